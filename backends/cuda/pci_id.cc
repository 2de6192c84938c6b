#include "backends/cuda/pci_id.h"

#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tg::cuda {
namespace {

// Largest values PCI allows: 16-bit (32-bit in extended) domain, 8-bit bus, 5-bit device,
// 3-bit function.
constexpr uint64_t kMaxDomain = 0xffffffff;
constexpr uint64_t kMaxBus = 0xff;
constexpr uint64_t kMaxDevice = 0x1f;
constexpr uint64_t kMaxFunction = 0x7;

bool ParseHex(absl::string_view s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 8) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleHexAtoi(s, out) && *out <= max;
}

}  // namespace

absl::StatusOr<std::string> PciDeviceId(absl::string_view bus_id) {
  const absl::string_view text = absl::StripAsciiWhitespace(bus_id);
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  uint64_t domain, bus, device, function;
  bool ok = parts.size() == 3 && ParseHex(parts[0], kMaxDomain, &domain) &&
            ParseHex(parts[1], kMaxBus, &bus);
  if (ok) {
    const std::vector<absl::string_view> df = absl::StrSplit(parts[2], '.');
    ok = df.size() == 2 && ParseHex(df[0], kMaxDevice, &device) &&
         ParseHex(df[1], kMaxFunction, &function);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("PCI bus id '", bus_id, "' is not domain:bus:device.function in hexadecimal"));
  }
  return absl::StrFormat("pci:%04x:%02x:%02x.%x", domain, bus, device, function);
}

}  // namespace tg::cuda

// Printing of GGUF files for `tg-gguf info` (see info.h).
#include "tools/tg-gguf/info.h"

#include <algorithm>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tg::gguf_tool {
namespace {

constexpr size_t kMaxShownStringBytes = 64;  // chat templates can be kilobytes long.
constexpr size_t kMaxShownElems = 6;         // of arrays (vocabularies have 100k+ entries).
constexpr size_t kMaxNameBytes = 256;        // of keys and tensor names (64 KiB allowed).

// `s` with quotes, backslashes and control bytes escaped (a hostile file must not be able to
// send terminal escape sequences); UTF-8 passes through. Cut after `max_bytes`.
std::string Printable(const std::string& s, size_t max_bytes) {
  std::string out;
  const size_t shown = std::min(s.size(), max_bytes);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02X", c));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (shown < s.size()) absl::StrAppend(&out, "... (", s.size(), " bytes)");
  return out;
}

std::string Quote(const std::string& s) {
  return absl::StrCat("\"", Printable(s, kMaxShownStringBytes), "\"");
}

std::string FormatScalar(const GgufValue& v) {
  if (const auto* s = std::get_if<std::string>(&v.scalar)) return Quote(*s);
  if (const auto* b = std::get_if<bool>(&v.scalar)) return *b ? "true" : "false";
  if (const auto* u = std::get_if<uint64_t>(&v.scalar)) return absl::StrCat(*u);
  if (const auto* i = std::get_if<int64_t>(&v.scalar)) return absl::StrCat(*i);
  return absl::StrCat(std::get<double>(v.scalar));
}

std::string TypeLabel(const GgufValue& v) {
  if (v.type != GgufType::kArray) return std::string(GgufTypeName(v.type));
  return absl::StrCat("[", GgufTypeName(v.elem_type), " x ", v.array.size(), "]");
}

std::string ShapeText(const GgufTensorInfo& t) {
  return absl::StrCat("[", absl::StrJoin(absl::MakeConstSpan(t.ne, std::max(t.n_dims, 1)), ", "),
                      "]");
}

void PrintMetadata(const GgufFile& f, std::FILE* out) {
  size_t key_width = 0;
  size_t type_width = 0;
  for (const auto& [key, value] : f.metadata()) {
    key_width = std::max(key_width, Printable(key, kMaxNameBytes).size());
    type_width = std::max(type_width, TypeLabel(value).size());
  }
  absl::FPrintF(out, "metadata   %d keys\n", f.metadata().size());
  for (const auto& [key, value] : f.metadata()) {
    absl::FPrintF(out, "  %-*s  %-*s  %s\n", key_width, Printable(key, kMaxNameBytes), type_width,
                  TypeLabel(value), FormatValue(value));
  }
}

void PrintTensors(const GgufFile& f, std::FILE* out) {
  size_t name_width = 4;
  size_t shape_width = 5;
  for (const GgufTensorInfo& t : f.tensors()) {
    name_width = std::max(name_width, Printable(t.name, kMaxNameBytes).size());
    shape_width = std::max(shape_width, ShapeText(t).size());
  }
  absl::FPrintF(out, "tensors    %d\n", f.tensors().size());
  absl::FPrintF(out, "  %-*s  %-5s  %-*s  %12s  %12s\n", name_width, "name", "type", shape_width,
                "shape", "offset", "bytes");
  uint64_t bytes = 0;
  int64_t elements = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    absl::FPrintF(out, "  %-*s  %-5s  %-*s  %12d  %12d\n", name_width,
                  Printable(t.name, kMaxNameBytes), DTypeName(t.type), shape_width, ShapeText(t),
                  t.offset, t.nbytes);
    bytes += t.nbytes;
    // No overflow: tensors do not overlap inside the file and take >= 0.5 byte per element.
    elements += t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  }
  absl::FPrintF(out, "total      %d tensors, %d elements (%.2fM), %d bytes (%.2f MiB)\n",
                f.tensors().size(), elements, static_cast<double>(elements) / 1e6, bytes,
                static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

std::string FormatValue(const GgufValue& value) {
  if (value.type != GgufType::kArray) return FormatScalar(value);
  std::vector<std::string> shown;
  const size_t n = std::min(value.array.size(), kMaxShownElems);
  for (size_t i = 0; i < n; ++i) shown.push_back(FormatValue(value.array[i]));
  if (n < value.array.size()) {
    shown.push_back(absl::StrCat("... (", value.array.size(), " in all)"));
  }
  return absl::StrCat("[", absl::StrJoin(shown, ", "), "]");
}

absl::Status RunInfo(const std::string& path, std::FILE* out) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  if (!f.ok()) return f.status();
  const GgufFile& g = **f;
  absl::FPrintF(out, "file       %s (%d bytes)\n", path, g.file_size());
  absl::FPrintF(out, "version    %d\n", g.version());
  absl::FPrintF(out, "alignment  %d (data section at offset %d)\n", g.alignment(),
                g.data_section() - g.bytes().data());
  PrintMetadata(g, out);
  PrintTensors(g, out);
  return absl::OkStatus();
}

}  // namespace tg::gguf_tool

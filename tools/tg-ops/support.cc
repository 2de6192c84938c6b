// `tg-ops support` (see commands.h).
#include <algorithm>
#include <cstdio>
#include <string>

#include "tools/tg-ops/commands.h"
#include "tools/tg-ops/op_cases.h"

namespace tg::ops_tool {
namespace {

constexpr int kOpColumn = 12;
constexpr int kMinDeviceColumn = 5;

const OpCase* FirstCaseOf(Op op, const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) {
    if (c.op == op) return &c;
  }
  return nullptr;
}

}  // namespace

int RunSupportCommand(const Options& opts, const std::vector<Device*>& devices) {
  const std::vector<OpCase> cases = TestCases();
  std::vector<int> widths;
  std::printf("%-*s", kOpColumn, "op");
  for (Device* d : devices) {
    widths.push_back(std::max<int>(kMinDeviceColumn, static_cast<int>(d->name().size()) + 2));
    std::printf("%*s", widths.back(), std::string(d->name()).c_str());
  }
  std::printf("\n");
  int errors = 0;
  for (int i = 1; i < static_cast<int>(Op::kCount); ++i) {
    const Op op = static_cast<Op>(i);
    if (opts.op.has_value() && op != *opts.op) continue;
    std::printf("%-*s", kOpColumn, std::string(OpName(op)).c_str());
    const OpCase* c = FirstCaseOf(op, cases);
    absl::StatusOr<BuiltCase> built =
        c != nullptr ? BuildCase(c->build) : absl::NotFoundError("no case for this op");
    if (!built.ok()) {
      std::printf("  error: %s\n", std::string(built.status().message()).c_str());
      ++errors;
      continue;
    }
    const Tensor& node = *NodeUnderTest(*c, *built);
    for (size_t j = 0; j < devices.size(); ++j) {
      std::printf("%*s", widths[j], devices[j]->SupportsOp(node) ? "yes" : "no");
    }
    std::printf("\n");
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace tg::ops_tool

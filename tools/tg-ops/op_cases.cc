// The case catalogue's assembly, the shared operand makers and case descriptions.
#include "tools/tg-ops/op_cases.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "tools/tg-ops/case_helpers.h"

namespace tg::ops_tool {

TensorOr TransposedLeaf(CaseBuilder& b, DType type, Shape4 ne, float lo, float hi) {
  TG_ASSIGN_OR_RETURN(Tensor * leaf, b.Uniform(type, {ne[1], ne[0], ne[2], ne[3]}, lo, hi));
  return Transpose(b.ctx(), leaf);
}

TensorOr PaddedRowsLeaf(CaseBuilder& b, DType type, Shape4 ne, float lo, float hi) {
  const int64_t block = BlockSize(type);
  TG_ASSIGN_OR_RETURN(Tensor * leaf,
                      b.Uniform(type, {ne[0] + 2 * block, ne[1], ne[2], ne[3]}, lo, hi));
  return View(b.ctx(), leaf, ne, {leaf->nb[1], leaf->nb[2], leaf->nb[3]}, BlockBytes(type));
}

TensorOr PermutedLeaf(CaseBuilder& b, DType type, Shape4 ne, float lo, float hi) {
  TG_ASSIGN_OR_RETURN(Tensor * leaf, b.Uniform(type, {ne[0], ne[2], ne[1], ne[3]}, lo, hi));
  return Permute(b.ctx(), leaf, 0, 2, 1, 3);
}

int64_t OddRowLength(DType type) {
  constexpr int64_t kPlain = 257;        // odd, not a multiple of any SIMD width.
  constexpr int64_t kBlocks32 = 288;     // 9 blocks of 32.
  constexpr int64_t kSuperBlocks = 512;  // 2 super-blocks of 256.
  if (!IsQuantized(type)) return kPlain;
  return BlockSize(type) == 32 ? kBlocks32 : kSuperBlocks;
}

std::vector<OpCase> TestCases() {
  std::vector<OpCase> cases;
  AddRowsCases(&cases);
  AddMatMulCases(&cases);
  AddElementwiseCases(&cases);
  AddRopeCases(&cases);
  AddCopyCases(&cases);
  AddAttentionCases(&cases);
  AddSampleCases(&cases);
  AddRouterCases(&cases);
  return cases;
}

namespace {

// Names of an op's sources as docs/ops.md calls them.
std::vector<const char*> SourceRoles(Op op) {
  switch (op) {
    case Op::kGetRows:
      return {"a", "idx"};
    case Op::kSetRows:
      return {"dst", "rows", "idx"};
    case Op::kMulMatId:
      return {"as", "b", "ids"};
    case Op::kRope:
      return {"a", "pos", "ff"};
    case Op::kSoftMax:
      return {"a", "mask", "sinks"};
    case Op::kSwiglu:
    case Op::kSwigluOai:
      return {"gate", "up"};
    case Op::kFlashAttn:
      return {"q", "k", "v", "mask"};
    case Op::kSample:
      return {"logits", "pos", "recent"};
    default:
      return {"a", "b", "c", "d"};
  }
}

std::string ShapeText(const Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.ne, t.ne + kMaxDims, ","), "]");
}

// "f32[67,5,1,1]", marked when the operand is read through a non-contiguous layout.
std::string OperandText(const Tensor& t) {
  return absl::StrCat(DTypeName(t.type), ShapeText(t), t.IsContiguous() ? "" : " strided");
}

}  // namespace

const Tensor* NodeUnderTest(const OpCase& c, const BuiltCase& built) {
  for (auto it = built.graph.nodes.rbegin(); it != built.graph.nodes.rend(); ++it) {
    if ((*it)->op == c.op) return *it;
  }
  return built.out;
}

std::string DescribeCase(const OpCase& c, const BuiltCase& built) {
  const Tensor& node = *NodeUnderTest(c, built);
  const std::vector<const char*> roles = SourceRoles(node.op);
  std::vector<std::string> parts;
  for (int i = 0; i < kMaxSrc && i < static_cast<int>(roles.size()); ++i) {
    if (node.src[i] != nullptr)
      parts.push_back(absl::StrCat(roles[i], "=", OperandText(*node.src[i])));
  }
  if (IsViewOp(node.op)) parts.push_back(absl::StrCat("out=", OperandText(node)));
  if (!c.note.empty()) parts.push_back(c.note);
  return absl::StrCat(OpName(c.op), "(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace tg::ops_tool

#include "models/llama_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "core/registry.h"
#include "core/status_macros.h"
#include "models/llama_tensor_split.h"

namespace tg {

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& path,
                                                             const LoadOptions& options) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  TG_ASSIGN_OR_RETURN(m->file_, GgufFile::Open(path));
  TG_ASSIGN_OR_RETURN(m->hparams_, ReadLlamaHParams(*m->file_));
  TG_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::FromGguf(*m->file_));
  if (m->tokenizer_->n_vocab() != m->hparams_.n_vocab) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: tokenizer has %d tokens, model %d",
                                                      path, m->tokenizer_->n_vocab(),
                                                      m->hparams_.n_vocab));
  }
  TG_RETURN_IF_ERROR(m->ChooseDevices(options));
  TG_RETURN_IF_ERROR(m->CreateWeights());
  TG_RETURN_IF_ERROR(m->UploadWeights(options));
  return m;
}

absl::Status LlamaModel::ChooseDevices(const LoadOptions& options) {
  plan_ = options.plan;
  if (plan_.devices.empty()) {
    Device* d = options.device != nullptr ? options.device : Registry::Get().CpuDevice();
    if (d == nullptr) return absl::FailedPreconditionError("no device to load weights on");
    plan_ = DevicePlan{SplitMode::kNone, {d}, {1.0f}};
  }
  switch (plan_.mode) {
    case SplitMode::kNone:
      device_ = plan_.devices[0];
      return absl::OkStatus();
    case SplitMode::kTensor: {
      TG_ASSIGN_OR_RETURN(owned_device_, CreateTensorSplitDevice(hparams_, plan_));
      device_ = owned_device_.get();
      return absl::OkStatus();
    }
    case SplitMode::kLayer:
      return absl::UnimplementedError("--split-mode layer is not implemented yet");
  }
  return absl::InvalidArgumentError("unknown split mode");
}

absl::StatusOr<Tensor*> LlamaModel::Weight(const std::string& name,
                                           std::initializer_list<int64_t> ne, bool required) {
  const GgufTensorInfo* info = file_->FindTensor(name);
  if (info == nullptr) {
    if (!required) return nullptr;
    return absl::InvalidArgumentError(absl::StrCat(file_->path(), ": missing tensor '", name, "'"));
  }
  const std::vector<int64_t> want(ne);
  for (int i = 0; i < kMaxDims; ++i) {
    const int64_t expected = i < static_cast<int>(want.size()) ? want[i] : 1;
    if (info->ne[i] != expected) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tensor '%s' has shape %dx%dx%dx%d, the architecture needs %s", file_->path(), name,
          info->ne[0], info->ne[1], info->ne[2], info->ne[3], absl::StrJoin(want, "x")));
    }
  }
  TG_ASSIGN_OR_RETURN(Tensor * t, ctx_.NewTensor(info->type, want));
  t->SetName(name);
  t->flags |= kFlagWeight;
  weights_.emplace_back(t, info);
  n_params_ += t->NumElements();
  return t;
}

absl::Status LlamaModel::CreateWeights() {
  const LlamaHParams& hp = hparams_;
  const int64_t n_embd = hp.n_embd;
  TG_ASSIGN_OR_RETURN(tok_embd_, Weight("token_embd.weight", {n_embd, hp.n_vocab}));
  TG_ASSIGN_OR_RETURN(output_norm_, Weight("output_norm.weight", {n_embd}));
  TG_ASSIGN_OR_RETURN(output_, Weight("output.weight", {n_embd, hp.n_vocab}, false));
  if (output_ == nullptr) output_ = tok_embd_;  // tied embeddings.
  layers_.resize(hp.n_layer);
  for (int64_t i = 0; i < hp.n_layer; ++i) {
    LlamaLayer& l = layers_[i];
    const std::string p = absl::StrCat("blk.", i, ".");
    TG_ASSIGN_OR_RETURN(l.attn_norm, Weight(p + "attn_norm.weight", {n_embd}));
    TG_ASSIGN_OR_RETURN(l.wq, Weight(p + "attn_q.weight", {n_embd, hp.n_embd_q()}));
    TG_ASSIGN_OR_RETURN(l.wk, Weight(p + "attn_k.weight", {n_embd, hp.n_embd_kv()}));
    TG_ASSIGN_OR_RETURN(l.wv, Weight(p + "attn_v.weight", {n_embd, hp.n_embd_kv()}));
    TG_ASSIGN_OR_RETURN(l.wo, Weight(p + "attn_output.weight", {hp.n_embd_q(), n_embd}));
    if (hp.has_qkv_bias) {
      TG_ASSIGN_OR_RETURN(l.bq, Weight(p + "attn_q.bias", {hp.n_embd_q()}));
      TG_ASSIGN_OR_RETURN(l.bk, Weight(p + "attn_k.bias", {hp.n_embd_kv()}));
      TG_ASSIGN_OR_RETURN(l.bv, Weight(p + "attn_v.bias", {hp.n_embd_kv()}));
    }
    if (hp.has_qk_norm) {
      TG_ASSIGN_OR_RETURN(l.q_norm, Weight(p + "attn_q_norm.weight", {hp.head_dim}));
      TG_ASSIGN_OR_RETURN(l.k_norm, Weight(p + "attn_k_norm.weight", {hp.head_dim}));
    }
    TG_ASSIGN_OR_RETURN(l.ffn_norm, Weight(p + "ffn_norm.weight", {n_embd}));
    TG_ASSIGN_OR_RETURN(l.ffn_gate, Weight(p + "ffn_gate.weight", {n_embd, hp.n_ff}));
    TG_ASSIGN_OR_RETURN(l.ffn_up, Weight(p + "ffn_up.weight", {n_embd, hp.n_ff}));
    TG_ASSIGN_OR_RETURN(l.ffn_down, Weight(p + "ffn_down.weight", {hp.n_ff, n_embd}));
  }
  for (auto& [t, info] : weights_) {
    const bool is_norm_or_bias = t->ne[1] == 1;
    if (is_norm_or_bias && t->type != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(file_->path(), ": tensor '", t->name,
                                                     "' must be f32, is ", DTypeName(t->type)));
    }
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::UploadWeights(const LoadOptions& options) {
  BufferType* type = device_->default_buffer_type();
  const size_t align = type->alignment();
  std::vector<size_t> offsets;
  size_t total = 0;
  for (auto& [t, info] : weights_) {
    total = (total + align - 1) / align * align;
    offsets.push_back(total);
    total += type->AllocSize(*t);
  }
  TG_ASSIGN_OR_RETURN(buffer_, type->Allocate(total));
  buffer_->set_usage(BufferUsage::kWeights);
  size_t done = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    auto& [t, info] = weights_[i];
    TG_RETURN_IF_ERROR(PlaceTensor(buffer_.get(), t, offsets[i]));
    TG_RETURN_IF_ERROR(buffer_->SetTensor(t, info->data, 0, info->nbytes));
    done += info->nbytes;
    if (options.progress) options.progress(done, file_->file_size());
  }
  weight_bytes_ = done;
  return absl::OkStatus();
}

std::string LlamaModel::Describe() const {
  return absl::StrFormat("%s %dL %dd %s", hparams_.arch_name, hparams_.n_layer, hparams_.n_embd,
                         DTypeName(layers_.empty() ? tok_embd_->type : layers_[0].wq->type));
}

}  // namespace tg

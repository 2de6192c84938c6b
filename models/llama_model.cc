#include "models/llama_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/host_memory.h"
#include "core/load_weights.h"
#include "core/lost_endpoint.h"
#include "core/mutex.h"
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
    return absl::InvalidArgumentError(absl::StrFormat("%s: tokenizer has %d tokens, model %d", path,
                                                      m->tokenizer_->n_vocab(),
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
      break;
    case SplitMode::kTensor: {
      // The heads' cut follows attn_output's quant blocks where it can (no all-gather).
      int64_t attn_output_block = 1;
      for (int64_t il = 0; il < hparams_.n_layer; ++il) {
        const GgufTensorInfo* w =
            file_->FindTensor(absl::StrCat("blk.", il, ".attn_output.weight"));
        if (w != nullptr) attn_output_block = std::max(attn_output_block, BlockSize(w->type));
      }
      TG_ASSIGN_OR_RETURN(owned_device_,
                          CreateTensorSplitDevice(hparams_, plan_, attn_output_block));
      device_ = owned_device_.get();
      break;
    }
    case SplitMode::kLayer: {
      const std::vector<float> proportions =
          plan_.proportions.empty() ? ProportionsFromMemory(plan_.devices) : plan_.proportions;
      TG_ASSIGN_OR_RETURN(placement_, PlaceLayers(hparams_.n_layer, plan_.devices, proportions));
      device_ = placement_.input();
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError("unknown split mode");
  }
  // One device holds everything.
  placement_ = LayerPlacement{{device_}, std::vector<int>(hparams_.n_layer, 0), 0, 0};
  return absl::OkStatus();
}

absl::StatusOr<Tensor*> LlamaModel::Weight(const std::string& name,
                                           std::initializer_list<int64_t> ne, int device,
                                           bool required) {
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
  weights_.push_back({t, info, device});
  n_params_ += t->NumElements();
  return t;
}

absl::Status LlamaModel::CreateWeights() {
  const LlamaHParams& hp = hparams_;
  const int in = placement_.input_device;
  const int out = placement_.output_device;
  TG_ASSIGN_OR_RETURN(tok_embd_, Weight("token_embd.weight", {hp.n_embd, hp.n_vocab}, in));
  TG_ASSIGN_OR_RETURN(output_norm_, Weight("output_norm.weight", {hp.n_embd}, out));
  TG_ASSIGN_OR_RETURN(output_, Weight("output.weight", {hp.n_embd, hp.n_vocab}, out, false));
  if (output_ == nullptr && in == out) output_ = tok_embd_;  // tied embeddings.
  if (output_ == nullptr) {
    // Tied, and the head is on another device than the embeddings: a second copy of the
    // table there (as llama.cpp duplicates it) instead of a transfer of it per token.
    TG_ASSIGN_OR_RETURN(output_, Weight("token_embd.weight", {hp.n_embd, hp.n_vocab}, out));
    output_->SetName("token_embd.weight#output");
    n_params_ -= output_->NumElements();
    weights_.back().duplicate = true;
  }
  layers_.resize(hp.n_layer);
  for (int64_t i = 0; i < hp.n_layer; ++i) TG_RETURN_IF_ERROR(CreateLayerWeights(i));
  for (const FileWeight& w : weights_) {
    const bool is_norm_or_bias = w.tensor->ne[1] == 1;
    if (is_norm_or_bias && w.tensor->type != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(file_->path(), ": tensor '", w.tensor->name,
                                                     "' must be f32, is ",
                                                     DTypeName(w.tensor->type)));
    }
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::CreateLayerWeights(int64_t i) {
  const LlamaHParams& hp = hparams_;
  const int64_t n_embd = hp.n_embd;
  const int d = placement_.layer_device[i];
  LlamaLayer& l = layers_[i];
  const std::string p = absl::StrCat("blk.", i, ".");
  TG_ASSIGN_OR_RETURN(l.attn_norm, Weight(p + "attn_norm.weight", {n_embd}, d));
  TG_ASSIGN_OR_RETURN(l.wq, Weight(p + "attn_q.weight", {n_embd, hp.n_embd_q()}, d));
  TG_ASSIGN_OR_RETURN(l.wk, Weight(p + "attn_k.weight", {n_embd, hp.n_embd_kv()}, d));
  TG_ASSIGN_OR_RETURN(l.wv, Weight(p + "attn_v.weight", {n_embd, hp.n_embd_kv()}, d));
  TG_ASSIGN_OR_RETURN(l.wo, Weight(p + "attn_output.weight", {hp.n_embd_q(), n_embd}, d));
  if (hp.has_qkv_bias) {
    TG_ASSIGN_OR_RETURN(l.bq, Weight(p + "attn_q.bias", {hp.n_embd_q()}, d));
    TG_ASSIGN_OR_RETURN(l.bk, Weight(p + "attn_k.bias", {hp.n_embd_kv()}, d));
    TG_ASSIGN_OR_RETURN(l.bv, Weight(p + "attn_v.bias", {hp.n_embd_kv()}, d));
  }
  if (hp.has_qk_norm) {
    TG_ASSIGN_OR_RETURN(l.q_norm, Weight(p + "attn_q_norm.weight", {hp.head_dim}, d));
    TG_ASSIGN_OR_RETURN(l.k_norm, Weight(p + "attn_k_norm.weight", {hp.head_dim}, d));
  }
  if (hp.has_o_bias) {
    TG_ASSIGN_OR_RETURN(l.bo, Weight(p + "attn_output.bias", {n_embd}, d));
  }
  if (hp.has_sinks) {
    TG_ASSIGN_OR_RETURN(l.sinks, Weight(p + "attn_sinks.weight", {hp.n_head}, d));
  }
  // gpt-oss names the norm before the feed-forward after the attention it follows.
  const char* ffn_norm = hp.gpt_oss_moe ? "post_attention_norm.weight" : "ffn_norm.weight";
  TG_ASSIGN_OR_RETURN(l.ffn_norm, Weight(p + ffn_norm, {n_embd}, d));
  if (hp.moe()) {
    const int64_t f = hp.n_ff_exp, e = hp.n_expert;
    TG_ASSIGN_OR_RETURN(l.moe.gate_inp, Weight(p + "ffn_gate_inp.weight", {n_embd, e}, d));
    TG_ASSIGN_OR_RETURN(l.moe.gate_exps, Weight(p + "ffn_gate_exps.weight", {n_embd, f, e}, d));
    TG_ASSIGN_OR_RETURN(l.moe.up_exps, Weight(p + "ffn_up_exps.weight", {n_embd, f, e}, d));
    TG_ASSIGN_OR_RETURN(l.moe.down_exps, Weight(p + "ffn_down_exps.weight", {f, n_embd, e}, d));
    if (!hp.gpt_oss_moe) return absl::OkStatus();
    TG_ASSIGN_OR_RETURN(l.moe.gate_inp_b, Weight(p + "ffn_gate_inp.bias", {e}, d));
    TG_ASSIGN_OR_RETURN(l.moe.gate_exps_b, Weight(p + "ffn_gate_exps.bias", {f, e}, d));
    TG_ASSIGN_OR_RETURN(l.moe.up_exps_b, Weight(p + "ffn_up_exps.bias", {f, e}, d));
    TG_ASSIGN_OR_RETURN(l.moe.down_exps_b, Weight(p + "ffn_down_exps.bias", {n_embd, e}, d));
    return absl::OkStatus();
  }
  TG_ASSIGN_OR_RETURN(l.ffn_gate, Weight(p + "ffn_gate.weight", {n_embd, hp.n_ff}, d));
  TG_ASSIGN_OR_RETURN(l.ffn_up, Weight(p + "ffn_up.weight", {n_embd, hp.n_ff}, d));
  TG_ASSIGN_OR_RETURN(l.ffn_down, Weight(p + "ffn_down.weight", {hp.n_ff, n_embd}, d));
  return absl::OkStatus();
}

WeightSource WeightSourceOf(const GgufFile& file) {
  WeightSource source;
  source.path = file.path();
  source.mapping = file.bytes();
  source.header_bytes = static_cast<uint64_t>(file.data_section() - file.bytes().data());
  for (const GgufTensorInfo& t : file.tensors()) {
    source.tensors.push_back({static_cast<uint64_t>(t.data - file.bytes().data()), t.nbytes});
  }
  return source;
}

bool KeepsWeightsInPlace(WeightMapping mapping, uint64_t tensor_bytes) {
  if (mapping != WeightMapping::kAuto) return mapping == WeightMapping::kInPlace;
  return !TransparentHugePagesUsable() || tensor_bytes > HostMemoryAvailable() / 2;
}

absl::StatusOr<std::unique_ptr<Buffer>> LlamaModel::MapTensorData(int d) const {
  BufferType* type = placement_.devices[d]->default_buffer_type();
  const absl::Span<const uint8_t> bytes = file_->bytes();
  const uint8_t* begin = file_->data_section();
  begin -= reinterpret_cast<uintptr_t>(begin) % type->alignment();
  if (begin < bytes.data()) return nullptr;  // a mapping not aligned for the device.
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      type->FromHostPtr(begin, bytes.data() + bytes.size() - begin);
  if (absl::IsUnimplemented(buffer.status())) return nullptr;
  TG_RETURN_IF_ERROR(buffer.status());
  (*buffer)->set_usage(BufferUsage::kWeights);
  return buffer;
}

// Per device: the weights its buffer type can use where they lie in the mapped file (aligned,
// unpadded) stay there; one buffer holds the rest, which LoadWeights fills from the file.
absl::Status LlamaModel::UploadWeights(const LoadOptions& options) {
  const size_t n_devices = placement_.devices.size();
  std::vector<std::unique_ptr<Buffer>> mapped(n_devices);
  std::vector<size_t> totals(n_devices, 0);
  std::vector<size_t> offsets;  // per weight; SIZE_MAX: in the mapping.
  std::vector<char> asked(n_devices, 0);
  const uint8_t* data_end = file_->bytes().data() + file_->bytes().size();
  const bool in_place = KeepsWeightsInPlace(options.mapping, data_end - file_->data_section());
  for (const FileWeight& w : weights_) {
    if (in_place && !asked[w.device]) {
      asked[w.device] = 1;
      TG_ASSIGN_OR_RETURN(mapped[w.device], MapTensorData(w.device));
    }
    BufferType* type = placement_.devices[w.device]->default_buffer_type();
    const size_t align = type->alignment();
    const Buffer* m = mapped[w.device].get();
    if (m != nullptr && m->type()->AllocSize(*w.tensor) == w.info->nbytes &&
        (w.info->data - static_cast<const uint8_t*>(m->base())) % m->type()->alignment() == 0) {
      offsets.push_back(SIZE_MAX);
      continue;
    }
    totals[w.device] = (totals[w.device] + align - 1) / align * align;
    offsets.push_back(totals[w.device]);
    totals[w.device] += type->AllocSize(*w.tensor);
  }
  std::vector<Buffer*> buffers(n_devices, nullptr);
  for (size_t d = 0; d < n_devices; ++d) {
    if (totals[d] == 0) continue;  // a device without layers, or all of them mapped.
    Device* device = placement_.devices[d];
    absl::StatusOr<std::unique_ptr<Buffer>> buffer =
        device->default_buffer_type()->Allocate(totals[d]);
    if (!buffer.ok()) {
      return KeepIdentity(buffer.status(),
                          absl::ResourceExhaustedError(absl::StrFormat(
                              "weights of %.1f MiB do not fit on %s: %s", totals[d] / 1048576.0,
                              device->name(), buffer.status().message())));
    }
    (*buffer)->set_usage(BufferUsage::kWeights);
    buffers[d] = buffer->get();
    buffers_.push_back(std::move(*buffer));
  }
  WeightSource source = WeightSourceOf(*file_);
  std::vector<TensorLoad> loads;
  size_t total = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const FileWeight& w = weights_[i];
    if (offsets[i] == SIZE_MAX) {
      Buffer* m = mapped[w.device].get();
      TG_RETURN_IF_ERROR(
          PlaceTensor(m, w.tensor, w.info->data - static_cast<const uint8_t*>(m->base())));
      continue;
    }
    TG_RETURN_IF_ERROR(PlaceTensor(buffers[w.device], w.tensor, offsets[i]));
    loads.push_back(WholeTensorLoad(
        w.tensor, static_cast<uint64_t>(w.info->data - file_->bytes().data()), w.info->nbytes));
    total += w.info->nbytes;
  }
  std::vector<const Buffer*> buffers_for_mapped(n_devices, nullptr);
  for (size_t d = 0; d < n_devices; ++d) {
    buffers_for_mapped[d] = mapped[d].get();
    if (mapped[d] != nullptr) buffers_.push_back(std::move(mapped[d]));
  }
  std::atomic<size_t> done{0};
  Mutex progress_mu;
  if (options.progress) {
    source.on_placed = [&](uint64_t bytes) {
      const size_t now = done.fetch_add(bytes) + bytes;
      MutexLock lock(&progress_mu);
      options.progress(std::min(now, total), total);
    };
  }
  const auto start = std::chrono::steady_clock::now();
  TG_ASSIGN_OR_RETURN(std::vector<LoadStats> stats, LoadWeights(source, loads));
  // Every weight now lives in a device buffer: the file's pages need not stay mapped in too
  // (a copy onto the CPU would otherwise hold the weights resident twice).
  if (std::none_of(offsets.begin(), offsets.end(), [](size_t o) { return o == SIZE_MAX; })) {
    file_->ReleaseTensorPages();
  }
  // The weights left in the mapping count too: the device holds them without a copy.
  for (size_t i = 0; i < weights_.size(); ++i) {
    const FileWeight& w = weights_[i];
    if (offsets[i] != SIZE_MAX) continue;
    const Buffer* m = buffers_for_mapped[w.device];
    auto it = std::find_if(stats.begin(), stats.end(),
                           [m](const LoadStats& s) { return s.buffer == m; });
    if (it == stats.end()) it = stats.insert(stats.end(), LoadStats{.buffer = m});
    it->bytes += w.info->nbytes;
    it->mapped += w.info->nbytes;
  }
  if (options.loaded) {
    options.loaded(stats,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  weight_bytes_ = 0;
  for (const FileWeight& w : weights_) weight_bytes_ += w.duplicate ? 0 : w.info->nbytes;
  return absl::OkStatus();
}

std::string LlamaModel::Describe() const {
  const std::string experts =
      hparams_.moe() ? absl::StrFormat(" %dx%d experts", hparams_.n_expert_used, hparams_.n_expert)
                     : "";
  return absl::StrFormat("%s %dL %dd%s %s", hparams_.arch_name, hparams_.n_layer, hparams_.n_embd,
                         experts,
                         DTypeName(layers_.empty() ? tok_embd_->type : layers_[0].wq->type));
}

}  // namespace tg

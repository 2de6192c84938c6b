#include "models/llama_session.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "models/llama_graph.h"

namespace tg {
namespace {

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

absl::Status SetInput(Tensor* t, const void* data, size_t bytes) {
  return t->buffer->SetTensor(t, data, 0, bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaSession>> LlamaSession::Create(const LlamaModel& model,
                                                                   const SessionOptions& options) {
  if (options.n_batch <= 0) return absl::InvalidArgumentError("batch size must be positive");
  std::unique_ptr<LlamaSession> s(new LlamaSession(model));
  s->options_ = options;
  TG_ASSIGN_OR_RETURN(s->cache_, KvCache::Create(model.hparams(), options.n_ctx, options.kv_type,
                                                 model.device()));
  TG_ASSIGN_OR_RETURN(s->stream_, model.device()->CreateStream());
  s->allocator_ = std::make_unique<GraphAllocator>(model.device()->default_buffer_type());
  return s;
}

absl::StatusOr<absl::Span<const float>> LlamaSession::Decode(absl::Span<const int32_t> tokens,
                                                             bool all_logits) {
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to decode");
  for (int32_t id : tokens) {
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token id %d is outside the vocabulary [0, %d)", id, n_vocab));
    }
  }
  if (n_past_ + static_cast<int64_t>(tokens.size()) > cache_->n_ctx()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "context full: %d + %d tokens exceed %d (raise -c)", n_past_, tokens.size(),
        cache_->n_ctx()));
  }
  logits_.resize((all_logits ? tokens.size() : 1) * n_vocab);
  for (size_t done = 0; done < tokens.size();) {
    const size_t n = std::min<size_t>(options_.n_batch, tokens.size() - done);
    const bool last = done + n == tokens.size();
    // Only the last batch produces logits unless every row is wanted.
    float* out = all_logits ? logits_.data() + done * n_vocab : (last ? logits_.data() : nullptr);
    TG_RETURN_IF_ERROR(RunBatch(tokens.subspan(done, n), all_logits, out));
    done += n;
  }
  return absl::Span<const float>(logits_);
}

absl::Status LlamaSession::RunBatch(absl::Span<const int32_t> tokens, bool all_logits,
                                    float* out) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_out = all_logits ? n : 1;
  TG_ASSIGN_OR_RETURN(std::unique_ptr<LlamaGraph> g,
                      BuildLlamaGraph(model_, *cache_, n, n_past_, n_out));
  TG_RETURN_IF_ERROR(allocator_->Allocate(g->graph));
  TG_RETURN_IF_ERROR(SetInput(g->tokens, tokens.data(), n * sizeof(int32_t)));
  scratch_i32_.resize(n);
  for (int64_t i = 0; i < n; ++i) scratch_i32_[i] = static_cast<int32_t>(n_past_ + i);
  TG_RETURN_IF_ERROR(SetInput(g->pos, scratch_i32_.data(), n * sizeof(int32_t)));
  // Causal mask: token i (at position n_past + i) sees cells 0..n_past + i.
  const int64_t n_kv = g->n_kv;
  scratch_mask_.assign(n_kv * n, -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i) {
    std::fill_n(scratch_mask_.begin() + i * n_kv, n_past_ + i + 1, 0.0f);
  }
  TG_RETURN_IF_ERROR(SetInput(g->mask, scratch_mask_.data(), scratch_mask_.size() * sizeof(float)));
  if (g->out_ids != nullptr) {
    const int32_t last = static_cast<int32_t>(n - 1);
    TG_RETURN_IF_ERROR(SetInput(g->out_ids, &last, sizeof(last)));
  }
  timings_.build_us += MicrosSince(t0);
  const auto t1 = std::chrono::steady_clock::now();
  TG_RETURN_IF_ERROR(stream_->Compute(g->graph));
  TG_RETURN_IF_ERROR(stream_->Synchronize());
  timings_.compute_us += MicrosSince(t1);
  ++timings_.graphs;
  n_past_ += n;
  if (out != nullptr) {
    const size_t bytes = g->logits->NumBytes();
    TG_RETURN_IF_ERROR(g->logits->buffer->GetTensor(g->logits, out, 0, bytes));
  }
  return absl::OkStatus();
}

}  // namespace tg

#include "models/llama_session.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/scheduler.h"
#include "core/status_macros.h"
#include "models/llama_graph.h"

namespace tg {
namespace {

// Reads what `logits` and `pick` ask for (the graph was built for it).
absl::Status ReadGraphResults(const LlamaGraph& g, float* logits, int32_t* pick) {
  if (logits != nullptr) {
    TG_RETURN_IF_ERROR(g.logits->buffer->GetTensor(g.logits, logits, 0, g.logits->NumBytes()));
  }
  if (pick != nullptr) {
    // The last output row's pick.
    const size_t offset = g.pick->NumBytes() - sizeof(int32_t);
    TG_RETURN_IF_ERROR(g.pick->buffer->GetTensor(g.pick, pick, offset, sizeof(int32_t)));
  }
  return absl::OkStatus();
}

}  // namespace

// n_tokens of the session's tokens at n_past (a piece: the rows [offset, offset + size) at
// n_past + offset), with what to read back; a pick is drawn by SAMPLE with `sample`, or is
// ARGMAX's (sample nullptr). Steps queued ahead feed their pick back, and may take their
// one token from the device (tokens empty).
class LlamaSession::TokenBatch : public Batch {
 public:
  TokenBatch(LlamaSession& session, absl::Span<const int32_t> tokens, int64_t n_tokens,
             int64_t n_past, bool all_logits, Readback out, const PickOptions* sample = nullptr,
             bool feeds_back = false)
      : session_(session),
        tokens_(tokens),
        n_tokens_(n_tokens),
        n_past_(n_past),
        all_logits_(all_logits),
        feeds_back_(feeds_back),
        out_(out),
        sample_(sample) {}

  int64_t n_tokens() const override { return n_tokens_; }
  GraphKey Key(BatchPiece piece) const override {
    return {.n_tokens = piece.size,
            .n_kv = AttendedCells(session_.cache_->n_ctx(), n_past_ + piece.offset, piece.size,
                                  session_.options_.kv_pad),
            .all_logits = all_logits_,
            .output = OutputOf(piece),
            .pick = PickOf(piece)};
  }
  absl::StatusOr<std::unique_ptr<LlamaGraph>> Build(BatchPiece piece) override {
    return session_.BuildBatchGraph(piece.size, n_past_ + piece.offset, all_logits_,
                                    OutputOf(piece), PickOf(piece));
  }
  absl::Status FillInputs(const LlamaGraph& g, BatchPiece piece, InputWriter write) override {
    const absl::Span<const int32_t> tokens =
        tokens_.empty() ? tokens_ : tokens_.subspan(piece.offset, piece.size);
    TG_RETURN_IF_ERROR(session_.FillInputs(g, tokens, piece.size, n_past_ + piece.offset, write));
    // A pick fed back on the device has pushed itself into the window; a token from the
    // host comes with the window as the host knows it.
    const PickOptions pick = PickOf(piece);
    if (!Samples(g.output) || pick.penalty_window == 0 || tokens_.empty()) return absl::OkStatus();
    return session_.FillPenaltyWindow(pick, tokens_.first(piece.offset + piece.size), write);
  }
  absl::Status ReadResults(const LlamaGraph& g, BatchPiece piece) override {
    const Readback out = ReadbackOf(piece);
    return ReadGraphResults(g, out.logits, out.pick);
  }

 private:
  // Every piece's logits rows when all are wanted; otherwise only the last piece's results.
  Readback ReadbackOf(BatchPiece piece) const {
    if (all_logits_) {
      const int64_t n_vocab = session_.model_.hparams().n_vocab;
      return {.logits = out_.logits == nullptr ? nullptr : out_.logits + piece.offset * n_vocab};
    }
    return piece.offset + piece.size == n_tokens_ ? out_ : Readback{};
  }
  GraphOutput OutputOf(BatchPiece piece) const {
    if (feeds_back_)
      return sample_ != nullptr ? GraphOutput::kSampleFedBack : GraphOutput::kArgmaxFedBack;
    if (ReadbackOf(piece).pick == nullptr) return GraphOutput::kLogits;
    return sample_ != nullptr ? GraphOutput::kSample : GraphOutput::kArgmax;
  }
  PickOptions PickOf(BatchPiece piece) const {
    if (OutputOf(piece) == GraphOutput::kLogits) return {};
    PickOptions pick = sample_ != nullptr ? *sample_ : PickOptions{};
    const Readback out = ReadbackOf(piece);
    pick.keep_logits = out.logits != nullptr && out.pick != nullptr;
    return pick;
  }

  LlamaSession& session_;
  absl::Span<const int32_t> tokens_;
  int64_t n_tokens_;
  int64_t n_past_;
  bool all_logits_;
  bool feeds_back_;
  Readback out_;
  const PickOptions* sample_;
};

// Generation steps of one token each from the session's n_past, greedy (sample nullptr) or
// sampled; a step `ahead` runs at n_past + ahead. The token each step decodes is recorded in
// the session's history when its pick is handed over (Advance, then Handed).
class LlamaSession::DeviceSteps : public PickSteps {
 public:
  DeviceSteps(LlamaSession& session, int32_t token, const SamplingParams* params,
              const PickOptions* sample)
      : session_(session), input_(token), params_(params), sample_(sample) {}

  absl::StatusOr<int32_t> DecodeOne(int32_t token) override {
    if (params_ == nullptr) return session_.DecodeGreedy({&token, 1});
    return session_.DecodeSample({&token, 1}, *params_);
  }
  absl::Status Check(const int32_t* token, int64_t ahead) const override {
    if (token != nullptr) TG_RETURN_IF_ERROR(session_.CheckTokens({token, 1}));
    return session_.CheckRoom(session_.n_past_ + ahead, 1);
  }
  Batch& Step(const int32_t* token, int64_t ahead) override {
    const absl::Span<const int32_t> tokens =
        token == nullptr ? absl::Span<const int32_t>() : absl::Span<const int32_t>(token, 1);
    step_.emplace(session_, tokens, 1, session_.n_past_ + ahead, /*all_logits=*/false, Readback{},
                  sample_, /*feeds_back=*/true);
    return *step_;
  }
  void Advance() override {
    session_.history_.push_back(input_);
    ++session_.n_past_;
  }
  // The pick just handed over is the next step's token.
  void Handed(int32_t pick) { input_ = pick; }

 private:
  LlamaSession& session_;
  int32_t input_;
  const SamplingParams* params_;
  const PickOptions* sample_;
  std::optional<TokenBatch> step_;
};

absl::StatusOr<std::unique_ptr<LlamaSession>> LlamaSession::Create(const LlamaModel& model,
                                                                   const SessionOptions& options) {
  if (options.n_batch <= 0) return absl::InvalidArgumentError("batch size must be positive");
  TG_ASSIGN_OR_RETURN(ExecutorOptions eo,
                      PipelineOptions(options.n_copies, options.min_micro_batch));
  if (options.kv_pad < 0) return absl::InvalidArgumentError("kv_pad must not be negative");
  if (options.greedy_batch < 0 || options.greedy_batch > kMaxGreedyBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("greedy batch ", options.greedy_batch, " outside [0, ", kMaxGreedyBatch, "]"));
  }
  std::unique_ptr<LlamaSession> s(new LlamaSession(model));
  s->options_ = options;
  if (s->options_.kv_pad == 0) s->options_.kv_pad = kDefaultKvPad;
  TG_ASSIGN_OR_RETURN(s->cache_, KvCache::ForModel(model, options.n_ctx, options.kv_type));
  eo.greedy_batch = options.greedy_batch;
  TG_ASSIGN_OR_RETURN(s->executor_, CreateExecutor(model, eo));
  return s;
}

absl::Status LlamaSession::CheckTokens(absl::Span<const int32_t> tokens) const {
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to decode");
  for (int32_t id : tokens) {
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token id %d is outside the vocabulary [0, %d)", id, n_vocab));
    }
  }
  return absl::OkStatus();
}

absl::Status LlamaSession::CheckRoom(int64_t n_past, int64_t n_tokens) const {
  if (n_past + n_tokens > cache_->n_ctx()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "context full: %d + %d tokens exceed %d (raise -c)", n_past, n_tokens, cache_->n_ctx()));
  }
  return absl::OkStatus();
}

absl::Status LlamaSession::CheckBatch(absl::Span<const int32_t> tokens) const {
  TG_RETURN_IF_ERROR(CheckTokens(tokens));
  return CheckRoom(n_past_, static_cast<int64_t>(tokens.size()));
}

absl::StatusOr<SequenceState> LlamaSession::CaptureState(absl::Span<const float> logits) const {
  std::vector<int32_t> cells(n_past_);
  for (int64_t i = 0; i < n_past_; ++i) cells[i] = static_cast<int32_t>(i);  // cell = position.
  return CaptureSequence(*cache_, cells, history_, logits);
}

absl::Status LlamaSession::RestoreState(const SequenceState& state, int64_t n) {
  if (n < 0 || n > static_cast<int64_t>(state.tokens.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("the state holds %d tokens, not %d",
                                                      state.tokens.size(), n));
  }
  TG_RETURN_IF_ERROR(CheckRoom(0, n));
  Reset();
  std::vector<int32_t> cells(n);
  for (int64_t i = 0; i < n; ++i) cells[i] = static_cast<int32_t>(i);
  TG_RETURN_IF_ERROR(RestoreRows(state, *cache_, cells));
  history_.assign(state.tokens.begin(), state.tokens.begin() + n);
  n_past_ = n;
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> LlamaSession::Decode(absl::Span<const int32_t> tokens,
                                                             bool all_logits) {
  TG_RETURN_IF_ERROR(CheckBatch(tokens));
  logits_.resize((all_logits ? tokens.size() : 1) * model_.hparams().n_vocab);
  TG_RETURN_IF_ERROR(RunBatches(tokens, all_logits, {.logits = logits_.data()}));
  return absl::Span<const float>(logits_);
}

absl::StatusOr<int32_t> LlamaSession::DecodeGreedy(absl::Span<const int32_t> tokens) {
  TG_RETURN_IF_ERROR(CheckBatch(tokens));
  int32_t token = -1;
  TG_RETURN_IF_ERROR(RunBatches(tokens, /*all_logits=*/false, {.pick = &token}));
  return token;
}

absl::StatusOr<int32_t> LlamaSession::DecodeSample(absl::Span<const int32_t> tokens,
                                                   const SamplingParams& params,
                                                   absl::Span<const float>* logits) {
  TG_RETURN_IF_ERROR(CheckBatch(tokens));
  TG_ASSIGN_OR_RETURN(const PickOptions sample, SamplingPick(params));
  int32_t token = -1;
  Readback out{.pick = &token};
  if (logits != nullptr) {
    logits_.resize(model_.hparams().n_vocab);
    out.logits = logits_.data();
  }
  TG_RETURN_IF_ERROR(RunBatches(tokens, /*all_logits=*/false, out, &sample));
  if (logits != nullptr) *logits = logits_;
  return token;
}

absl::Status LlamaSession::GenerateGreedy(int32_t token, int64_t max_tokens,
                                          absl::FunctionRef<bool(int32_t)> on_token) {
  DeviceSteps steps(*this, token, nullptr, nullptr);
  return executor_->Generate(steps, token, max_tokens, [&](int32_t pick) {
    steps.Handed(pick);
    return on_token(pick);
  });
}

absl::Status LlamaSession::Generate(int32_t token, int64_t max_tokens, const SamplingParams& params,
                                    absl::FunctionRef<bool(int32_t)> on_token) {
  TG_ASSIGN_OR_RETURN(const PickOptions sample, SamplingPick(params));
  DeviceSteps steps(*this, token, &params, &sample);
  return executor_->Generate(steps, token, max_tokens, [&](int32_t pick) {
    steps.Handed(pick);
    return on_token(pick);
  });
}

absl::StatusOr<PickOptions> LlamaSession::SamplingPick(const SamplingParams& params) {
  PickOptions pick{.sample = params.sample};
  if (params.penalty_last_n < 0 || params.penalty_last_n > cache_->n_ctx()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("repetition penalty window %d outside [0, %d] (the context size)",
                        params.penalty_last_n, cache_->n_ctx()));
  }
  if (params.penalty_last_n == 0 || params.sample.repeat_penalty == 1.0f) return pick;
  if (recent_ == nullptr) {
    Device* device = model_.multi_device() ? model_.placement().output() : model_.device();
    TG_ASSIGN_OR_RETURN(Tensor * t, recent_ctx_.NewTensor(DType::kI32, {cache_->n_ctx() + 1}));
    t->SetName("recent_tokens");
    BufferType* type = device->default_buffer_type();
    TG_ASSIGN_OR_RETURN(recent_buffer_, type->Allocate(type->AllocSize(*t)));
    TG_RETURN_IF_ERROR(PlaceTensor(recent_buffer_.get(), t, 0));
    recent_ = t;
  }
  pick.penalty_window = params.penalty_last_n;
  pick.recent = recent_;
  return pick;
}

absl::Status LlamaSession::FillPenaltyWindow(const PickOptions& pick,
                                             absl::Span<const int32_t> tokens, InputWriter write) {
  scratch_i32_.assign(pick.penalty_window + 1, -1);  // element 0: the graph's staging slot.
  size_t k = 1;
  for (auto it = tokens.rbegin(); it != tokens.rend() && k < scratch_i32_.size(); ++it) {
    scratch_i32_[k++] = *it;
  }
  for (auto it = history_.rbegin(); it != history_.rend() && k < scratch_i32_.size(); ++it) {
    scratch_i32_[k++] = *it;
  }
  return write(pick.recent, scratch_i32_.data(), scratch_i32_.size() * sizeof(int32_t));
}

// Cuts tokens into batches of at most n_batch (1 when deterministic); only the last one's
// results are read unless every row's logits are wanted.
absl::Status LlamaSession::RunBatches(absl::Span<const int32_t> tokens, bool all_logits,
                                      Readback out, const PickOptions* sample) {
  const int64_t n_vocab = model_.hparams().n_vocab;
  const int64_t n_batch = options_.deterministic ? 1 : options_.n_batch;
  for (size_t done = 0; done < tokens.size();) {
    const size_t n = std::min<size_t>(n_batch, tokens.size() - done);
    const bool last = done + n == tokens.size();
    Readback batch_out;
    if (all_logits) {
      batch_out.logits = out.logits + done * n_vocab;
    } else if (last) {
      batch_out = out;
    }
    TokenBatch batch(*this, tokens.subspan(done, n), static_cast<int64_t>(n), n_past_, all_logits,
                     batch_out, sample);
    TG_RETURN_IF_ERROR(executor_->Run(batch));
    history_.insert(history_.end(), tokens.begin() + done, tokens.begin() + done + n);
    n_past_ += static_cast<int64_t>(n);
    done += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LlamaGraph>> LlamaSession::BuildBatchGraph(int64_t n_tokens,
                                                                          int64_t n_past,
                                                                          bool all_logits,
                                                                          GraphOutput output,
                                                                          const PickOptions& pick) {
  ++graphs_built_;
  return BuildLlamaGraph(model_, *cache_, n_tokens, n_past, all_logits ? n_tokens : 1,
                         options_.kv_pad, output, pick);
}

absl::Status LlamaSession::FillInputs(const LlamaGraph& g, absl::Span<const int32_t> tokens,
                                      int64_t n, int64_t n_past, InputWriter write) {
  if (!tokens.empty()) TG_RETURN_IF_ERROR(write(g.tokens, tokens.data(), n * sizeof(int32_t)));
  scratch_i32_.resize(n);
  for (int64_t i = 0; i < n; ++i) scratch_i32_[i] = static_cast<int32_t>(n_past + i);
  TG_RETURN_IF_ERROR(write(g.pos, scratch_i32_.data(), n * sizeof(int32_t)));
  // One sequence: position p's K and V live in cell p.
  TG_RETURN_IF_ERROR(write(g.kv_idx, scratch_i32_.data(), n * sizeof(int32_t)));
  // Causal mask: token i (at position n_past + i) sees cells 0..n_past + i.
  const int64_t n_kv = g.n_kv;
  scratch_mask_.assign(n_kv * n, -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i) {
    std::fill_n(scratch_mask_.begin() + i * n_kv, n_past + i + 1, 0.0f);
  }
  TG_RETURN_IF_ERROR(write(g.mask, scratch_mask_.data(), scratch_mask_.size() * sizeof(float)));
  if (g.mask_swa != nullptr) {
    // Its own scratch: writes may be asynchronous, so the causal mask's bytes must stay.
    // Sliding layers also hide the cells n_swa or more positions behind the token.
    const int64_t window = model_.hparams().n_swa;
    scratch_mask_swa_ = scratch_mask_;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t hidden = std::max<int64_t>(0, n_past + i + 1 - window);
      std::fill_n(scratch_mask_swa_.begin() + i * n_kv, hidden,
                  -std::numeric_limits<float>::infinity());
    }
    TG_RETURN_IF_ERROR(
        write(g.mask_swa, scratch_mask_swa_.data(), scratch_mask_swa_.size() * sizeof(float)));
  }
  if (g.out_ids != nullptr) {
    const int32_t last = static_cast<int32_t>(n - 1);
    TG_RETURN_IF_ERROR(write(g.out_ids, &last, sizeof(last)));
  }
  return absl::OkStatus();
}

}  // namespace tg

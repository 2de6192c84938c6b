#include "models/batch_session.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/ops.h"
#include "core/scheduler.h"
#include "core/status_macros.h"
#include "models/llama_graph.h"
#include "models/sequence_state.h"

namespace tg {

// One step's rows (every item's tokens end to end, each with its sequence, position and
// cell) and output rows (each item's last), cut by the executor into pieces that are rows
// [offset, offset + size) in graphs of their own.
class BatchSession::StepBatch : public Batch {
 public:
  struct Row {
    int32_t token, pos, cell;
    int seq;
  };

  StepBatch(BatchSession& session, std::vector<Row> rows, std::vector<int64_t> outputs,
            std::vector<const SamplingParams*> sampling, int64_t n_kv, bool with_logits,
            std::vector<SequenceResult>* results)
      : session_(session),
        rows_(std::move(rows)),
        outputs_(std::move(outputs)),
        sampling_(std::move(sampling)),
        n_kv_(n_kv),
        with_logits_(with_logits),
        results_(results) {}

  int64_t n_tokens() const override { return static_cast<int64_t>(rows_.size()); }
  GraphKey Key(BatchPiece piece) const override {
    PickOptions pick;
    pick.keep_logits = with_logits_;
    GraphKey key{.n_tokens = piece.size,
                 .n_kv = n_kv_,
                 .n_outputs = OutputsIn(piece).second,
                 .output = GraphOutput::kArgmax,
                 .pick = pick};
    if (Samples()) {
      // Every output row its own pick: ARGMAX (temperature 0) or SAMPLE with its parameters;
      // a piece without outputs has its placeholder row picked greedily.
      key.output = GraphOutput::kLogits;
      const auto [first, real] = RealOutputsIn(piece);
      for (int64_t k = 0; k < std::max<int64_t>(1, real); ++k) {
        key.row_picks.push_back(RowPick(k < real ? sampling_[first + k] : nullptr));
      }
    }
    return key;
  }
  absl::StatusOr<std::unique_ptr<LlamaGraph>> Build(BatchPiece piece) override;
  absl::Status FillInputs(const LlamaGraph& g, BatchPiece piece, InputWriter write) override;
  absl::Status ReadResults(const LlamaGraph& g, BatchPiece piece) override;

 private:
  // The outputs among the piece's rows: [first index into outputs_, count]. A piece with
  // none still gives one row (its last; the result is not read): a graph has an output.
  std::pair<size_t, int64_t> OutputsIn(BatchPiece piece) const {
    const auto [first, real] = RealOutputsIn(piece);
    return {first, std::max<int64_t>(1, real)};
  }
  // The outputs among the piece's rows, none when it has none.
  std::pair<size_t, int64_t> RealOutputsIn(BatchPiece piece) const {
    const auto lo = std::lower_bound(outputs_.begin(), outputs_.end(), piece.offset);
    const auto hi = std::lower_bound(lo, outputs_.end(), piece.offset + piece.size);
    return {static_cast<size_t>(lo - outputs_.begin()), hi - lo};
  }
  absl::Status WriteMask(Tensor* mask, BatchPiece piece, int64_t n_swa, std::vector<float>* scratch,
                         InputWriter write);
  bool Samples() const {
    return std::any_of(sampling_.begin(), sampling_.end(), [](auto* p) { return p != nullptr; });
  }
  // How an output row with these parameters (nullptr: greedy) is picked.
  static PickOptions RowPick(const SamplingParams* sampling) {
    PickOptions p;
    p.sample.temperature = 0;
    if (sampling != nullptr) {
      p.sample = sampling->sample;
      if (p.sample.repeat_penalty != 1.0f) p.penalty_window = sampling->penalty_last_n;
    }
    return p;
  }
  // The penalty window of output k (through its row's token), newest first, -1 past the start.
  std::vector<int32_t> Window(size_t k, int64_t w) const;

  BatchSession& session_;
  std::vector<Row> rows_;
  std::vector<int64_t> outputs_;                 // rows, ascending.
  std::vector<const SamplingParams*> sampling_;  // per output; nullptr: ARGMAX.
  int64_t n_kv_;
  bool with_logits_;
  std::vector<SequenceResult>* results_;  // one per output.
  // Inputs may be written asynchronously: their bytes stay here until the step is over.
  std::vector<int32_t> tokens_, pos_, cells_, out_ids_;
  std::vector<std::vector<int32_t>> windows_;
  std::vector<float> mask_, mask_swa_;
};

absl::StatusOr<std::unique_ptr<LlamaGraph>> BatchSession::StepBatch::Build(BatchPiece piece) {
  const GraphKey key = Key(piece);
  ++session_.graphs_built_;
  const LlamaGraphShape shape{.n_tokens = piece.size, .n_kv = n_kv_, .n_outputs = key.n_outputs};
  TG_ASSIGN_OR_RETURN(
      std::unique_ptr<LlamaGraph> g,
      BuildLlamaGraph(session_.model_, *session_.cache_, shape, key.output, key.pick));
  if (key.row_picks.empty()) return g;
  // Output row k (batch row out_k of the piece): a view of its logits, picked by ARGMAX or by
  // SAMPLE at that row's position with its own window input.
  const auto [first, real] = RealOutputsIn(piece);
  std::vector<Tensor*> outputs;
  const size_t row_bytes = g->logits->nb[1];
  for (int64_t k = 0; k < static_cast<int64_t>(key.row_picks.size()); ++k) {
    const PickOptions& p = key.row_picks[k];
    TG_ASSIGN_OR_RETURN(Tensor * logits,
                        View(g->ctx, g->logits, {g->logits->ne[0], 1}, {row_bytes}, k * row_bytes));
    Tensor* pick = nullptr;
    Tensor* window = nullptr;
    if (p.sample.temperature <= 0 && p.penalty_window == 0) {
      TG_ASSIGN_OR_RETURN(pick, Argmax(g->ctx, logits));
    } else {
      const size_t out = k < real ? outputs_[first + k] - piece.offset : piece.size - 1;
      TG_ASSIGN_OR_RETURN(Tensor * pos, View(g->ctx, g->pos, {1}, {}, out * sizeof(int32_t)));
      if (p.penalty_window > 0) {
        TG_ASSIGN_OR_RETURN(window, g->ctx.NewTensor(DType::kI32, {p.penalty_window}));
        window->SetName("inp_window");
        window->flags |= kFlagInput;
      }
      TG_ASSIGN_OR_RETURN(pick, Sample(g->ctx, logits, pos, window, p.sample));
    }
    pick->flags |= kFlagOutput;
    g->row_picks.push_back(pick);
    g->row_windows.push_back(window);
    outputs.push_back(pick);
  }
  if (with_logits_) {
    g->logits->flags |= kFlagOutput;
    outputs.push_back(g->logits);
  }
  TG_ASSIGN_OR_RETURN(g->graph, BuildGraph(outputs));
  return g;
}

std::vector<int32_t> BatchSession::StepBatch::Window(size_t k, int64_t w) const {
  const int64_t last = outputs_[k];
  const int seq = rows_[last].seq;
  std::vector<int32_t> window;
  for (int64_t r = last; r >= 0 && rows_[r].seq == seq && static_cast<int64_t>(window.size()) < w;
       --r) {
    window.push_back(rows_[r].token);
  }
  const std::vector<int32_t>& past = session_.seqs_[seq].tokens;
  for (auto it = past.rbegin(); it != past.rend() && static_cast<int64_t>(window.size()) < w;
       ++it) {
    window.push_back(*it);
  }
  window.resize(w, -1);
  return window;
}

absl::Status BatchSession::StepBatch::WriteMask(Tensor* mask, BatchPiece piece, int64_t n_swa,
                                                std::vector<float>* scratch, InputWriter write) {
  const KvCells& cells = session_.cells_;
  scratch->assign(n_kv_ * piece.size, -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < piece.size; ++i) {
    const Row& r = rows_[piece.offset + i];
    float* out = scratch->data() + i * n_kv_;
    for (int32_t c = 0; c < n_kv_; ++c) {
      if (cells.Visible(c, r.seq, r.pos, n_swa)) out[c] = 0.0f;
    }
  }
  return write(mask, scratch->data(), scratch->size() * sizeof(float));
}

absl::Status BatchSession::StepBatch::FillInputs(const LlamaGraph& g, BatchPiece piece,
                                                 InputWriter write) {
  tokens_.clear();
  pos_.clear();
  cells_.clear();
  for (int64_t i = piece.offset; i < piece.offset + piece.size; ++i) {
    tokens_.push_back(rows_[i].token);
    pos_.push_back(rows_[i].pos);
    cells_.push_back(rows_[i].cell);
  }
  const size_t bytes = piece.size * sizeof(int32_t);
  TG_RETURN_IF_ERROR(write(g.tokens, tokens_.data(), bytes));
  TG_RETURN_IF_ERROR(write(g.pos, pos_.data(), bytes));
  TG_RETURN_IF_ERROR(write(g.kv_idx, cells_.data(), bytes));
  TG_RETURN_IF_ERROR(WriteMask(g.mask, piece, 0, &mask_, write));
  if (g.mask_swa != nullptr) {
    TG_RETURN_IF_ERROR(
        WriteMask(g.mask_swa, piece, session_.model_.hparams().n_swa, &mask_swa_, write));
  }
  windows_.resize(outputs_.size());
  for (size_t k = 0; k < g.row_windows.size(); ++k) {
    Tensor* window = g.row_windows[k];
    const size_t out = OutputsIn(piece).first + k;
    if (window == nullptr || out >= outputs_.size()) continue;
    windows_[out] = Window(out, window->ne[0]);
    TG_RETURN_IF_ERROR(write(window, windows_[out].data(), window->NumBytes()));
  }
  if (g.out_ids != nullptr) {
    const auto [first, count] = OutputsIn(piece);
    out_ids_.clear();
    for (size_t k = first; k < outputs_.size() && outputs_[k] < piece.offset + piece.size; ++k) {
      out_ids_.push_back(static_cast<int32_t>(outputs_[k] - piece.offset));
    }
    if (out_ids_.empty()) out_ids_.push_back(static_cast<int32_t>(piece.size - 1));
    TG_RETURN_IF_ERROR(write(g.out_ids, out_ids_.data(), count * sizeof(int32_t)));
  }
  return absl::OkStatus();
}

absl::Status BatchSession::StepBatch::ReadResults(const LlamaGraph& g, BatchPiece piece) {
  const auto [first, count] = OutputsIn(piece);
  size_t n = 0;  // this piece's real outputs.
  while (first + n < outputs_.size() && outputs_[first + n] < piece.offset + piece.size) ++n;
  if (n == 0) return absl::OkStatus();
  std::vector<int32_t> picks(count);
  if (g.row_picks.empty()) {
    TG_RETURN_IF_ERROR(g.pick->buffer->GetTensor(g.pick, picks.data(), 0, count * sizeof(int32_t)));
  }
  for (size_t k = 0; k < n && k < g.row_picks.size(); ++k) {
    const Tensor* p = g.row_picks[k];
    TG_RETURN_IF_ERROR(p->buffer->GetTensor(p, &picks[k], 0, sizeof(int32_t)));
  }
  const int64_t n_vocab = session_.model_.hparams().n_vocab;
  std::vector<float> logits;
  if (with_logits_) {
    logits.resize(count * n_vocab);
    TG_RETURN_IF_ERROR(
        g.logits->buffer->GetTensor(g.logits, logits.data(), 0, logits.size() * sizeof(float)));
  }
  for (size_t k = 0; k < n; ++k) {
    SequenceResult& r = (*results_)[first + k];
    r.pick = picks[k];
    if (with_logits_)
      r.logits.assign(logits.begin() + k * n_vocab, logits.begin() + (k + 1) * n_vocab);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BatchSession>> BatchSession::Create(
    const LlamaModel& model, const BatchSessionOptions& options) {
  if (options.n_ctx <= 0) return absl::InvalidArgumentError("the cache needs at least one cell");
  if (options.n_batch <= 0) return absl::InvalidArgumentError("batch size must be positive");
  if (options.kv_pad < 0) return absl::InvalidArgumentError("kv_pad must not be negative");
  TG_ASSIGN_OR_RETURN(const ExecutorOptions eo,
                      PipelineOptions(options.n_copies, options.min_micro_batch));
  std::unique_ptr<BatchSession> s(new BatchSession(model, options));
  if (s->options_.kv_pad == 0) s->options_.kv_pad = kDefaultKvPad;
  TG_ASSIGN_OR_RETURN(s->cache_, KvCache::ForModel(model, options.n_ctx, options.kv_type));
  TG_ASSIGN_OR_RETURN(s->executor_, CreateExecutor(model, eo));
  return s;
}

absl::StatusOr<int> BatchSession::NewSequence() {
  for (size_t i = 0; i < seqs_.size(); ++i) {
    if (!seqs_[i].live) {
      seqs_[i] = {.live = true};
      return static_cast<int>(i);
    }
  }
  if (seqs_.size() >= KvCells::kMaxSequences) {
    return absl::ResourceExhaustedError(absl::StrCat("every one of the ", KvCells::kMaxSequences,
                                                     " sequences is live (end one first)"));
  }
  seqs_.push_back({.live = true});
  return static_cast<int>(seqs_.size() - 1);
}

absl::StatusOr<int> BatchSession::ForkPrefix(int src, int64_t n_pos) {
  TG_RETURN_IF_ERROR(CheckSequence(src));
  if (n_pos < 0 || n_pos > seqs_[src].n_past) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sequence %d holds %d positions: cannot share its first %d", src,
                        seqs_[src].n_past, n_pos));
  }
  TG_ASSIGN_OR_RETURN(const int dst, NewSequence());
  cells_.SharePrefix(src, dst, static_cast<int32_t>(n_pos));
  seqs_[dst].n_past = n_pos;
  seqs_[dst].tokens.assign(seqs_[src].tokens.begin(), seqs_[src].tokens.begin() + n_pos);
  return dst;
}

absl::StatusOr<std::string> BatchSession::SaveSequence(int seq,
                                                       absl::Span<const float> logits) const {
  TG_RETURN_IF_ERROR(CheckSequence(seq));
  TG_ASSIGN_OR_RETURN(SequenceState state,
                      CaptureSequence(*cache_, cells_.CellsOf(seq), seqs_[seq].tokens, logits));
  return EncodeSequenceState(model_, *cache_, state);
}

absl::StatusOr<int> BatchSession::RestoreSequence(absl::string_view bytes,
                                                  std::vector<float>* logits) {
  TG_ASSIGN_OR_RETURN(SequenceState state, DecodeSequenceState(model_, *cache_, bytes));
  const int64_t n = static_cast<int64_t>(state.tokens.size());
  TG_ASSIGN_OR_RETURN(const int seq, NewSequence());
  absl::StatusOr<std::vector<int32_t>> cells = cells_.FindFree(n, seq);
  absl::Status s = cells.status();
  if (s.ok()) s = RestoreRows(state, *cache_, *cells);
  if (!s.ok()) {
    seqs_[seq] = {};
    return s;
  }
  for (int64_t i = 0; i < n; ++i) cells_.Assign((*cells)[i], seq, static_cast<int32_t>(i));
  seqs_[seq].n_past = n;
  seqs_[seq].tokens = std::move(state.tokens);
  if (logits != nullptr) *logits = std::move(state.logits);
  return seq;
}

absl::Status BatchSession::EndSequence(int seq) {
  TG_RETURN_IF_ERROR(CheckSequence(seq));
  cells_.Remove(seq);
  seqs_[seq] = {};
  return absl::OkStatus();
}

absl::Status BatchSession::CheckSequence(int seq) const {
  if (live(seq)) return absl::OkStatus();
  std::vector<int> ids;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    if (seqs_[i].live) ids.push_back(static_cast<int>(i));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown sequence id ", seq,
                   " (live: ", ids.empty() ? "none" : absl::StrJoin(ids, ","), ")"));
}

absl::Status BatchSession::CheckWork(absl::Span<const SequenceWork> work) const {
  if (work.empty()) return absl::InvalidArgumentError("a step needs at least one sequence");
  const int64_t n_vocab = model_.hparams().n_vocab;
  int64_t total = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    const SequenceWork& w = work[i];
    TG_RETURN_IF_ERROR(CheckSequence(w.seq));
    for (size_t j = 0; j < i; ++j) {
      if (work[j].seq == w.seq) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", w.seq, " appears twice in one step (join its tokens)"));
      }
    }
    if (w.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", w.seq, " has no tokens"));
    }
    for (int32_t id : w.tokens) {
      if (id < 0 || id >= n_vocab) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "sequence %d: token id %d is outside the vocabulary [0, %d)", w.seq, id, n_vocab));
      }
    }
    if (w.sampling != nullptr &&
        (w.sampling->penalty_last_n < 0 || w.sampling->penalty_last_n > options_.n_ctx)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sequence %d: repetition penalty window %d outside [0, %d] (the cache size)", w.seq,
          w.sampling->penalty_last_n, options_.n_ctx));
    }
    total += static_cast<int64_t>(w.tokens.size());
  }
  if (total > options_.n_batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a step of %d tokens exceeds the batch size %d (cut prompts into chunks)",
                        total, options_.n_batch));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SequenceResult>> BatchSession::Step(absl::Span<const SequenceWork> work,
                                                               bool with_logits) {
  TG_RETURN_IF_ERROR(CheckWork(work));
  // Cells for every token, found before any is taken: a full cache changes nothing.
  std::vector<std::vector<int32_t>> found;
  KvCells trial = cells_;
  for (const SequenceWork& w : work) {
    TG_ASSIGN_OR_RETURN(std::vector<int32_t> c,
                        trial.FindFree(static_cast<int64_t>(w.tokens.size()), w.seq));
    for (size_t i = 0; i < c.size(); ++i) {
      trial.Assign(c[i], w.seq, static_cast<int32_t>(seqs_[w.seq].n_past + i));
    }
    found.push_back(std::move(c));
  }
  std::vector<StepBatch::Row> rows;
  std::vector<int64_t> outputs;
  std::vector<const SamplingParams*> sampling;
  for (size_t k = 0; k < work.size(); ++k) {
    const SequenceWork& w = work[k];
    for (size_t i = 0; i < w.tokens.size(); ++i) {
      rows.push_back(
          {w.tokens[i], static_cast<int32_t>(seqs_[w.seq].n_past + i), found[k][i], w.seq});
    }
    outputs.push_back(static_cast<int64_t>(rows.size()) - 1);
    sampling.push_back(w.sampling);
  }
  KvCells before = std::move(cells_);
  cells_ = std::move(trial);
  const int64_t pad = options_.kv_pad;
  const int64_t n_kv = std::min(cells_.size(), (cells_.end() + pad - 1) / pad * pad);
  std::vector<SequenceResult> results(work.size());
  StepBatch batch(*this, std::move(rows), std::move(outputs), std::move(sampling), n_kv,
                  with_logits, &results);
  if (absl::Status s = executor_->Run(batch); !s.ok()) {
    cells_ = std::move(before);  // the step's cells hold nothing usable.
    return s;
  }
  for (const SequenceWork& w : work) {
    seqs_[w.seq].n_past += static_cast<int64_t>(w.tokens.size());
    seqs_[w.seq].tokens.insert(seqs_[w.seq].tokens.end(), w.tokens.begin(), w.tokens.end());
    tokens_decoded_ += static_cast<int64_t>(w.tokens.size());
  }
  return results;
}

}  // namespace tg

// Test support for the many-sequence engine (models/batch_session.h): runs prompts as
// sequences decoded together and, as the independent path, each alone in a LlamaSession of
// its own, and compares their greedy tokens and logits. Header-only (test targets link
// tg_models); not thread-safe.
#ifndef TENSORGRID_TESTS_LIB_BATCHED_VS_ALONE_H_
#define TENSORGRID_TESTS_LIB_BATCHED_VS_ALONE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "models/batch_session.h"
#include "models/llama_model.h"
#include "models/llama_session.h"

namespace tg::testing {

// One sequence's greedy run: per step the pick and the logits it was picked from.
struct GreedyTrace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// Different prompts of different lengths in a vocabulary of at least 503 tokens.
inline std::vector<int32_t> VariedPrompt(int i) {
  std::vector<int32_t> p = {1};
  for (int k = 0; k < 3 + 5 * i; ++k) p.push_back((k * 37 + i * 101 + 11) % 500 + 3);
  return p;
}

// `prompt`, then `steps` greedy tokens, alone in a LlamaSession (F32 KV cache).
inline GreedyTrace DecodeAlone(const LlamaModel& model, const std::vector<int32_t>& prompt,
                               int steps) {
  SessionOptions so;
  so.n_ctx = 512;
  so.kv_type = DType::kF32;
  absl::StatusOr<std::unique_ptr<LlamaSession>> s = LlamaSession::Create(model, so);
  EXPECT_TRUE(s.ok()) << s.status();
  GreedyTrace t;
  if (!s.ok()) return t;
  absl::StatusOr<absl::Span<const float>> logits = (*s)->Decode(prompt);
  for (int k = 0; k < steps && logits.ok(); ++k) {
    t.logits.emplace_back(logits->begin(), logits->end());
    const int32_t pick =
        static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    t.tokens.push_back(pick);
    logits = (*s)->Decode({&pick, 1});
  }
  EXPECT_TRUE(logits.ok()) << logits.status();
  return t;
}

// Every prompt as a sequence of `session`, all decoded together (the prompts in one step,
// then one step per token), `steps` greedy picks each, made on the device.
inline std::vector<GreedyTrace> DecodeBatched(BatchSession& session,
                                              const std::vector<std::vector<int32_t>>& prompts,
                                              int steps) {
  const size_t n = prompts.size();
  std::vector<int> seqs;
  std::vector<SequenceWork> work;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<int> seq = session.NewSequence();
    EXPECT_TRUE(seq.ok()) << seq.status();
    if (!seq.ok()) return {};
    seqs.push_back(*seq);
    work.push_back({*seq, prompts[i]});
  }
  std::vector<GreedyTrace> traces(n);
  std::vector<int32_t> next(n);
  for (int k = 0; k < steps; ++k) {
    absl::StatusOr<std::vector<SequenceResult>> r = session.Step(work, /*with_logits=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    for (size_t i = 0; i < n; ++i) {
      const std::vector<float>& l = (*r)[i].logits;
      EXPECT_EQ((*r)[i].pick, std::max_element(l.begin(), l.end()) - l.begin())
          << "the device's pick is not the logits' argmax";
      traces[i].tokens.push_back((*r)[i].pick);
      traces[i].logits.push_back(l);
      next[i] = (*r)[i].pick;
    }
    for (size_t i = 0; i < n; ++i) work[i] = {seqs[i], {&next[i], 1}};
  }
  return traces;
}

// The same tokens, and every logit within `tol`.
inline void ExpectSameTrace(const GreedyTrace& alone, const GreedyTrace& batched, double tol,
                            const std::string& what) {
  ASSERT_EQ(batched.tokens.size(), alone.tokens.size()) << what;
  EXPECT_EQ(batched.tokens, alone.tokens) << what;
  double worst = 0;
  for (size_t k = 0; k < alone.logits.size(); ++k) {
    for (size_t i = 0; i < alone.logits[k].size(); ++i) {
      worst = std::max(worst, std::fabs(double{batched.logits[k][i]} - alone.logits[k][i]));
    }
  }
  EXPECT_LE(worst, tol) << what;
}

// On `model` (on one device): 1, 2, 4 and 8 sequences decoded together give each the tokens
// and logits (F32 KV, within `tol`) it gets alone on the same model, and no graph needed the
// host CPU beside the device (every node had a kernel there).
inline void ExpectBatchedEqualsAloneOnItsDevice(const LlamaModel& model, int steps, double tol) {
  std::vector<GreedyTrace> alone;
  for (int i = 0; i < 8; ++i) alone.push_back(DecodeAlone(model, VariedPrompt(i), steps));
  for (int n : {1, 2, 4, 8}) {
    BatchSessionOptions o;
    o.n_ctx = 512;
    o.kv_type = DType::kF32;
    absl::StatusOr<std::unique_ptr<BatchSession>> session = BatchSession::Create(model, o);
    ASSERT_TRUE(session.ok()) << session.status();
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < n; ++i) prompts.push_back(VariedPrompt(i));
    const std::vector<GreedyTrace> batched = DecodeBatched(**session, prompts, steps);
    ASSERT_EQ(batched.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      ExpectSameTrace(alone[i], batched[i], tol,
                      std::to_string(n) + " sequences, #" + std::to_string(i));
    }
    EXPECT_EQ((*session)->timings().fallback_graphs, 0) << (*session)->timings().fallback_reason;
  }
}

}  // namespace tg::testing

#endif  // TENSORGRID_TESTS_LIB_BATCHED_VS_ALONE_H_

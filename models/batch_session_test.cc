// BatchSession on a real model (stories260K, F32 KV cache): sequences decoded together give
// each the tokens and logits it gets alone (a LlamaSession of its own, the independent
// path), on one CPU device and split by layers and by tensors over three; sequences that join
// and leave mid-run change no other's tokens; a shared prefix decodes only the new tokens;
// bad input is a clear error that changes nothing.
#include "models/batch_session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "models/shared_model_path.h"
#include "tests/lib/batched_vs_alone.h"

namespace tg {
namespace {

using ::testing::HasSubstr;

using testing::DecodeAlone;
using testing::DecodeBatched;
using testing::GreedyTrace;
using testing::VariedPrompt;

constexpr int kSteps = 24;          // greedy tokens generated per sequence.
constexpr double kLogitTol = 1e-4;  // the bound for F32 KV (sums in other orders).

void ExpectSame(const GreedyTrace& alone, const GreedyTrace& batched, const std::string& what) {
  testing::ExpectSameTrace(alone, batched, kLogitTol, what);
}

class BatchSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = DemoModelPath();
    if (!std::ifstream(path_).good()) GTEST_SKIP() << path_ << " not found";
  }

  LoadOptions Plan(SplitMode mode) {
    LoadOptions lo;
    if (mode == SplitMode::kNone) {
      lo.plan = DevicePlan{SplitMode::kNone, {&dev0_}, {1.0f}};
    } else {
      lo.plan = DevicePlan{mode, {&dev0_, &dev1_, &dev2_}, {0.4f, 0.3f, 0.3f}};
    }
    return lo;
  }

  void ExpectEachSequenceSamplesAsAlone(SplitMode mode);

  BatchSessionOptions Options() const {
    BatchSessionOptions o;
    o.n_ctx = 512;
    o.kv_type = DType::kF32;
    o.min_micro_batch = 1;  // short prompt steps pipelined too.
    return o;
  }

  std::string path_;
  cpu::CpuDevice dev0_{"CPU0", "cpu:0", 1};
  cpu::CpuDevice dev1_{"CPU1", "cpu:1", 1};
  cpu::CpuDevice dev2_{"CPU2", "cpu:2", 1};
};

// 1, 2, 4 and 8 sequences: every prompt in one step, then every sequence's next token in one
// step each; the picks are made on the device and must be the host's argmax of the logits.
TEST_F(BatchSessionTest, BatchedEqualsAloneOnEveryPlacement) {
  for (SplitMode mode : {SplitMode::kNone, SplitMode::kLayer, SplitMode::kTensor}) {
    auto model = *LlamaModel::Load(path_, Plan(mode));
    std::vector<GreedyTrace> alone;
    for (int i = 0; i < 8; ++i) alone.push_back(DecodeAlone(*model, VariedPrompt(i), kSteps));
    for (int n : {1, 2, 4, 8}) {
      const std::string what = absl::StrCat(SplitModeName(mode), ", ", n, " sequences");
      auto session = *BatchSession::Create(*model, Options());
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < n; ++i) prompts.push_back(VariedPrompt(i));
      const std::vector<GreedyTrace> batched = DecodeBatched(*session, prompts, kSteps);
      ASSERT_EQ(batched.size(), static_cast<size_t>(n)) << what;
      for (int i = 0; i < n; ++i) ExpectSame(alone[i], batched[i], absl::StrCat(what, ", #", i));
      // Nothing was decoded twice, and (one device) the decode steps built a graph only when
      // the cells they attend grew past a multiple of kDefaultKvPad.
      int64_t prompt_tokens = 0;
      for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
      EXPECT_EQ(session->tokens_decoded(), prompt_tokens + int64_t{n} * (kSteps - 1)) << what;
      std::set<int64_t> pads;
      for (int k = 1; k < kSteps; ++k) {
        pads.insert((prompt_tokens + int64_t{k} * n + kDefaultKvPad - 1) / kDefaultKvPad);
      }
      if (mode == SplitMode::kNone) {
        EXPECT_EQ(session->graphs_built(), 1 + static_cast<int64_t>(pads.size())) << what;
      }
    }
  }
}

// Sequences that start late and stop early: every sequence's tokens are its tokens alone.
TEST_F(BatchSessionTest, SequencesJoiningAndLeavingChangeNoOtherSequence) {
  auto model = *LlamaModel::Load(path_, Plan(SplitMode::kNone));
  struct Plan {
    int start, stop;  // steps
  };
  const Plan plans[] = {{0, 30}, {3, 12}, {5, 30}, {8, 20}, {12, 30}};
  constexpr int kTotal = 30;
  auto session = *BatchSession::Create(*model, Options());
  std::vector<int> seq(5, -1);
  std::vector<GreedyTrace> got(5);
  std::vector<int32_t> next(5);
  for (int step = 0; step < kTotal; ++step) {
    std::vector<SequenceWork> work;
    std::vector<int> who;
    std::vector<std::vector<int32_t>> prompts(5);
    for (int i = 0; i < 5; ++i) {
      if (step == plans[i].stop && seq[i] >= 0) {
        ASSERT_TRUE(session->EndSequence(seq[i]).ok());
        seq[i] = -2;
      }
      if (step == plans[i].start) {
        seq[i] = *session->NewSequence();
        prompts[i] = VariedPrompt(i);
        work.push_back({seq[i], prompts[i]});
        who.push_back(i);
      } else if (seq[i] >= 0) {
        work.push_back({seq[i], {&next[i], 1}});
        who.push_back(i);
      }
    }
    absl::StatusOr<std::vector<SequenceResult>> r = session->Step(work, true);
    ASSERT_TRUE(r.ok()) << r.status();
    for (size_t k = 0; k < who.size(); ++k) {
      got[who[k]].tokens.push_back((*r)[k].pick);
      got[who[k]].logits.push_back((*r)[k].logits);
      next[who[k]] = (*r)[k].pick;
    }
  }
  for (int i = 0; i < 5; ++i) {
    const int steps = plans[i].stop - plans[i].start;
    ExpectSame(DecodeAlone(*model, VariedPrompt(i), steps), got[i], absl::StrCat("sequence ", i));
  }
  // The ended sequences' cells went back: only the live ones' remain.
  int64_t live_cells = 0;
  for (int i = 0; i < 5; ++i) {
    if (seq[i] >= 0) live_cells += session->n_past(seq[i]);
  }
  EXPECT_EQ(session->cells().used(), live_cells);
}

// A sequence that shares another's 200-token prefix decodes only its own tokens and gives
// the tokens it gives alone.
TEST_F(BatchSessionTest, ASharedPrefixIsNotDecodedAgain) {
  auto model = *LlamaModel::Load(path_, Plan(SplitMode::kNone));
  std::vector<int32_t> prefix = {1};
  for (int k = 1; k < 200; ++k) prefix.push_back((k * 13 + 5) % 500 + 3);
  const std::vector<int32_t> tail_a = {33, 44, 55}, tail_b = {66, 77};
  auto session = *BatchSession::Create(*model, Options());
  const int a = *session->NewSequence();
  ASSERT_TRUE(session->Step(std::vector<SequenceWork>{{a, prefix}}).ok());
  const int b = *session->ForkPrefix(a, 200);
  const int64_t before = session->tokens_decoded();
  absl::StatusOr<std::vector<SequenceResult>> r =
      session->Step(std::vector<SequenceWork>{{a, tail_a}, {b, tail_b}}, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(session->tokens_decoded() - before, 5);  // the tails only.
  std::vector<int32_t> whole_b = prefix;
  whole_b.insert(whole_b.end(), tail_b.begin(), tail_b.end());
  const GreedyTrace alone_b = DecodeAlone(*model, whole_b, 1);
  ExpectSame(alone_b, {{(*r)[1].pick}, {(*r)[1].logits}}, "the forked sequence");
  // Ending the first keeps the shared cells for the second.
  ASSERT_TRUE(session->EndSequence(a).ok());
  EXPECT_EQ(session->cells().used(), 202);
}

// Sequences that sample, each with its own parameters (seeds, temperatures, cuts, one with a
// repetition penalty over its own last tokens) beside a greedy one, all in one batch: each
// draws the tokens LlamaSession::DecodeSample draws for it alone (the draw depends on the
// seed and the token's position only).
TEST_F(BatchSessionTest, EachSequenceSamplesWithItsOwnParameters) {
  // Split by layers, the prompt step (prompts of 39, 34, 29 and 24 tokens) runs as pipelined
  // pieces, the first without an output row.
  for (SplitMode mode : {SplitMode::kNone, SplitMode::kLayer}) {
    ExpectEachSequenceSamplesAsAlone(mode);
  }
}

void BatchSessionTest::ExpectEachSequenceSamplesAsAlone(SplitMode mode) {
  SCOPED_TRACE(SplitModeName(mode));
  auto model = *LlamaModel::Load(path_, Plan(mode));
  std::vector<std::optional<SamplingParams>> params(4);
  params[0] = SamplingParams{.sample = {.temperature = 0.8f, .seed = 7}};
  params[1] = SamplingParams{.sample = {.temperature = 1.1f, .top_k = 0, .top_p = 0.9f,
                                        .repeat_penalty = 1.3f, .seed = 11},
                             .penalty_last_n = 16};
  params[3] = SamplingParams{.sample = {.temperature = 0.5f, .top_k = 0, .seed = 3}};
  constexpr int kDraws = 24;
  std::vector<std::vector<int32_t>> alone(4);
  for (int i = 0; i < 4; ++i) {
    SessionOptions so;
    so.n_ctx = 256;
    so.kv_type = DType::kF32;
    auto s = *LlamaSession::Create(*model, so);
    std::vector<int32_t> next = VariedPrompt(7 - i);
    for (int k = 0; k < kDraws; ++k) {
      absl::StatusOr<int32_t> t = params[i].has_value() ? s->DecodeSample(next, *params[i])
                                                        : s->DecodeGreedy(next);
      ASSERT_TRUE(t.ok()) << t.status();
      alone[i].push_back(*t);
      next = {*t};
    }
  }
  auto session = *BatchSession::Create(*model, Options());
  std::vector<int> seqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    seqs.push_back(*session->NewSequence());
    prompts.push_back(VariedPrompt(7 - i));
  }
  std::vector<std::vector<int32_t>> batched(4);
  std::vector<int32_t> next(4);
  for (int k = 0; k < kDraws; ++k) {
    std::vector<SequenceWork> work;
    for (int i = 0; i < 4; ++i) {
      const absl::Span<const int32_t> tokens =
          k == 0 ? absl::Span<const int32_t>(prompts[i]) : absl::Span<const int32_t>(&next[i], 1);
      work.push_back({seqs[i], tokens, params[i].has_value() ? &*params[i] : nullptr});
    }
    absl::StatusOr<std::vector<SequenceResult>> r = session->Step(work);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int i = 0; i < 4; ++i) {
      batched[i].push_back((*r)[i].pick);
      next[i] = (*r)[i].pick;
    }
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(batched[i], alone[i]) << "sequence " << i;
  // The draws are not the greedy path (the parameters reached the device).
  EXPECT_NE(batched[0], batched[2]);
}

// Greedy from a restored or live sequence: `steps` picks, the first from `logits`.
std::vector<int32_t> GreedyFrom(BatchSession& session, int seq, const std::vector<float>& logits,
                                int steps) {
  std::vector<int32_t> out = {
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
  while (static_cast<int>(out.size()) < steps) {
    absl::StatusOr<std::vector<SequenceResult>> r =
        session.Step(std::vector<SequenceWork>{{seq, {&out.back(), 1}}});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    out.push_back((*r)[0].pick);
  }
  return out;
}

// A state saved after the prompt and 20 tokens under a tensor split over three devices (each
// device's rows read in place), restored on one device, and one saved under a layer split
// restored under a tensor split (written in place), goes on with the tokens of the
// uninterrupted run; nothing is decoded to restore it: the bytes hold the logical rows.
TEST_F(BatchSessionTest, AStateSavedUnderOneSplitRestoresUnderAnother) {
  const std::vector<int32_t> prompt = VariedPrompt(3);
  for (auto [from, to] : {std::pair{SplitMode::kTensor, SplitMode::kNone},
                          {SplitMode::kLayer, SplitMode::kTensor}}) {
    const std::string what = absl::StrCat(SplitModeName(from), " -> ", SplitModeName(to));
    auto saver_model = *LlamaModel::Load(path_, Plan(from));
    auto saver = *BatchSession::Create(*saver_model, Options());
    const int a = *saver->NewSequence();
    auto r = saver->Step(std::vector<SequenceWork>{{a, prompt}}, /*with_logits=*/true);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int32_t> whole = GreedyFrom(*saver, a, (*r)[0].logits, 20);
    // The 20th pick is not decoded yet: the state holds the prompt and 19 picks, and the
    // logits that made the 20th.
    auto last = saver->Step(std::vector<SequenceWork>{{a, {&whole.back(), 1}}}, true);
    ASSERT_TRUE(last.ok()) << last.status();
    absl::StatusOr<std::string> state = saver->SaveSequence(a, (*last)[0].logits);
    ASSERT_TRUE(state.ok()) << state.status();
    const std::vector<int32_t> rest = GreedyFrom(*saver, a, (*last)[0].logits, 20);

    auto restorer_model = *LlamaModel::Load(path_, Plan(to));
    auto restorer = *BatchSession::Create(*restorer_model, Options());
    std::vector<float> logits;
    absl::StatusOr<int> b = restorer->RestoreSequence(*state, &logits);
    ASSERT_TRUE(b.ok()) << what << ": " << b.status();
    EXPECT_EQ(restorer->n_past(*b), static_cast<int64_t>(prompt.size()) + 20) << what;
    EXPECT_EQ(restorer->tokens_decoded(), 0) << what;
    EXPECT_EQ(GreedyFrom(*restorer, *b, logits, 20), rest) << what;
  }
}

TEST_F(BatchSessionTest, ABadStateIsRefusedAndChangesNothing) {
  auto model = *LlamaModel::Load(path_, Plan(SplitMode::kNone));
  auto session = *BatchSession::Create(*model, Options());
  const int a = *session->NewSequence();
  const std::vector<int32_t> prompt = VariedPrompt(1);
  ASSERT_TRUE(session->Step(std::vector<SequenceWork>{{a, prompt}}).ok());
  const std::string state = *session->SaveSequence(a);
  BatchSessionOptions f16 = Options();
  f16.kv_type = DType::kF16;
  auto other = *BatchSession::Create(*model, f16);
  struct Case {
    std::string bytes;
    const char* message;
  };
  std::string other_model = state;
  other_model[8] ^= 1;  // the fingerprint.
  const Case cases[] = {
      {state.substr(0, state.size() - 1), "truncated or damaged"},
      {"not a state at all", "not a tensorgrid sequence state"},
      {other_model, "saved with another model"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<int> s = session->RestoreSequence(c.bytes);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message));
  }
  EXPECT_THAT(std::string(other->RestoreSequence(state).status().message()),
              HasSubstr("the state's KV cache (f32, 5 layers) is not this session's (f16"));
  EXPECT_EQ(session->cells().used(), static_cast<int64_t>(prompt.size()));
  EXPECT_FALSE(session->live(1));
}

TEST_F(BatchSessionTest, BadInputIsAClearErrorThatChangesNothing) {
  auto model = *LlamaModel::Load(path_, Plan(SplitMode::kNone));
  BatchSessionOptions o = Options();
  o.n_ctx = 16;
  o.n_batch = 8;
  auto session = *BatchSession::Create(*model, o);
  const int a = *session->NewSequence();
  const std::vector<int32_t> four = {1, 5, 6, 7}, nine(9, 5), bad = {1, 512};
  struct Case {
    std::vector<SequenceWork> work;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {{{7, four}}, absl::StatusCode::kInvalidArgument, "unknown sequence id 7 (live: 0)"},
      {{{a, nine}}, absl::StatusCode::kInvalidArgument, "9 tokens exceeds the batch size 8"},
      {{{a, bad}}, absl::StatusCode::kInvalidArgument, "token id 512 is outside the vocabulary"},
      {{{a, four}, {a, four}}, absl::StatusCode::kInvalidArgument, "appears twice"},
      {{{a, {}}}, absl::StatusCode::kInvalidArgument, "has no tokens"},
  };
  for (const Case& c : cases) {
    const absl::Status s = session->Step(c.work).status();
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
  // A full cache names the sequence and the cells; the others are untouched.
  ASSERT_TRUE(session->Step(std::vector<SequenceWork>{{a, four}}).ok());
  const int b = *session->NewSequence();
  const std::vector<int32_t> eight(8, 9);
  ASSERT_TRUE(session->Step(std::vector<SequenceWork>{{b, eight}}).ok());
  const absl::Status full = session->Step(std::vector<SequenceWork>{{a, four}, {b, four}}).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kOutOfRange) << full;
  EXPECT_THAT(std::string(full.message()),
              HasSubstr("KV cache full: sequence 1 needs 4 cells, 0 of 16 are free"));
  EXPECT_EQ(session->n_past(a), 4);
  EXPECT_EQ(session->n_past(b), 8);
  EXPECT_EQ(session->cells().used(), 12);
  EXPECT_THAT(std::string(session->EndSequence(9).message()), HasSubstr("unknown sequence id 9"));
  EXPECT_THAT(std::string(session->ForkPrefix(a, 5).status().message()),
              HasSubstr("sequence 0 holds 4 positions: cannot share its first 5"));
}

}  // namespace
}  // namespace tg

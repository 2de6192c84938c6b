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
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "models/shared_model_path.h"

namespace tg {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 24;         // greedy tokens generated per sequence.
constexpr double kLogitTol = 1e-4;  // the bound for F32 KV (sums in other orders).

// One sequence decoded alone: the prompt, then its own greedy picks; per step the logits
// that picked the token.
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

class BatchSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = DemoModelPath();
    if (!std::ifstream(path_).good()) GTEST_SKIP() << path_ << " not found";
  }

  // Different prompts of different lengths (token ids of stories260K's 512).
  static std::vector<int32_t> Prompt(int i) {
    std::vector<int32_t> p = {1};
    for (int k = 0; k < 3 + 5 * i; ++k) p.push_back((k * 37 + i * 101 + 11) % 500 + 3);
    return p;
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

  Trace Alone(const LlamaModel& model, const std::vector<int32_t>& prompt, int steps) {
    SessionOptions so;
    so.n_ctx = 256;
    so.kv_type = DType::kF32;
    auto s = *LlamaSession::Create(model, so);
    Trace t;
    absl::StatusOr<absl::Span<const float>> logits = s->Decode(prompt);
    for (int k = 0; k < steps && logits.ok(); ++k) {
      t.logits.emplace_back(logits->begin(), logits->end());
      const int32_t pick =
          static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      t.tokens.push_back(pick);
      logits = s->Decode({&pick, 1});
    }
    EXPECT_TRUE(logits.ok()) << logits.status();
    return t;
  }

  static void ExpectSame(const Trace& alone, const Trace& batched, const std::string& what) {
    ASSERT_EQ(batched.tokens.size(), alone.tokens.size()) << what;
    EXPECT_EQ(batched.tokens, alone.tokens) << what;
    double worst = 0;
    for (size_t k = 0; k < alone.logits.size(); ++k) {
      for (size_t i = 0; i < alone.logits[k].size(); ++i) {
        worst = std::max(worst, std::fabs(double{batched.logits[k][i]} - alone.logits[k][i]));
      }
    }
    EXPECT_LE(worst, kLogitTol) << what;
  }

  BatchSessionOptions Options() const {
    BatchSessionOptions o;
    o.n_ctx = 512;
    o.kv_type = DType::kF32;
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
    std::vector<Trace> alone;
    for (int i = 0; i < 8; ++i) alone.push_back(Alone(*model, Prompt(i), kSteps));
    for (int n : {1, 2, 4, 8}) {
      const std::string what = absl::StrCat(SplitModeName(mode), ", ", n, " sequences");
      auto session = *BatchSession::Create(*model, Options());
      std::vector<int> seqs;
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < n; ++i) {
        seqs.push_back(*session->NewSequence());
        prompts.push_back(Prompt(i));
      }
      std::vector<Trace> batched(n);
      std::vector<int32_t> next(n);
      std::vector<SequenceWork> work;
      for (int i = 0; i < n; ++i) work.push_back({seqs[i], prompts[i]});
      for (int k = 0; k < kSteps; ++k) {
        absl::StatusOr<std::vector<SequenceResult>> r = session->Step(work, /*with_logits=*/true);
        ASSERT_TRUE(r.ok()) << what << ": " << r.status();
        for (int i = 0; i < n; ++i) {
          const std::vector<float>& l = (*r)[i].logits;
          EXPECT_EQ((*r)[i].pick, std::max_element(l.begin(), l.end()) - l.begin()) << what;
          batched[i].tokens.push_back((*r)[i].pick);
          batched[i].logits.push_back(l);
          next[i] = (*r)[i].pick;
        }
        for (int i = 0; i < n; ++i) work[i] = {seqs[i], {&next[i], 1}};
      }
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
  std::vector<Trace> got(5);
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
        prompts[i] = Prompt(i);
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
    ExpectSame(Alone(*model, Prompt(i), steps), got[i], absl::StrCat("sequence ", i));
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
  const Trace alone_b = Alone(*model, whole_b, 1);
  ExpectSame(alone_b, {{(*r)[1].pick}, {(*r)[1].logits}}, "the forked sequence");
  // Ending the first keeps the shared cells for the second.
  ASSERT_TRUE(session->EndSequence(a).ok());
  EXPECT_EQ(session->cells().used(), 202);
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

// ContinuousBatcher on stories260K: requests that arrive while others decode (one with a
// long prompt read in chunks) each get the greedy tokens they get alone in a LlamaSession
// (the independent path); the running requests get a token at every step while the long
// prompt is read; a request waits for cells and then runs; cancelling and stopping end a
// request and free its cells; bad requests are refused at once. Prompt reuse: a request
// whose prompt starts like a finished (idle) or running one's starts from the shared prefix,
// reports it (on_admitted) and decodes only the rest (BatchSession::tokens_decoded), with the
// tokens it gets alone; idle sequences give way at once to a request that needs their cells
// or their sequence slots; reuse off reports nothing cached and keeps nothing. Log-probabilities:
// a request's equal the log-softmax (in double, here) of the logits it gets alone in a
// LlamaSession, its top N sorted with ties by id, the whole vocabulary's summing to 1; a
// request without them beside it gets its tokens unchanged. Moving to another session
// (Suspend, Rebind: tg-server --rpc-failover): a greedy and a seeded sampling request stopped
// mid-generation, and one still queued, get on a fresh session exactly the tokens of the
// uninterrupted run, each once; a step failing with an error `recoverable` accepts ends no
// request.
#include "models/continuous_batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "models/llama_model.h"
#include "models/shared_model_path.h"
#include "tests/lib/batched_vs_alone.h"

namespace tg {
namespace {

using ::testing::HasSubstr;

class ContinuousBatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = DemoModelPath();
    if (!std::ifstream(path).good()) GTEST_SKIP() << path << " not found";
    LoadOptions lo;
    lo.plan = DevicePlan{SplitMode::kNone, {&cpu_}, {1.0f}};
    model_ = *LlamaModel::Load(path, lo);
  }

  std::unique_ptr<BatchSession> Session(int64_t n_ctx) {
    BatchSessionOptions o;
    o.n_ctx = n_ctx;
    o.kv_type = DType::kF32;
    return *BatchSession::Create(*model_, o);
  }

  // A request that records its tokens (and the step each came in) and how it ended.
  struct Record {
    std::vector<int32_t> tokens;
    std::vector<int> steps;
    std::optional<absl::Status> done;
  };
  GenerationRequest Request(std::vector<int32_t> prompt, int64_t max_tokens, Record* rec,
                            const int* step) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.on_token = [rec, step](int32_t t) {
      rec->tokens.push_back(t);
      rec->steps.push_back(*step);
      return true;
    };
    r.on_done = [rec](const absl::Status& s) { rec->done = s; };
    return r;
  }

  // Runs `batcher` until it is idle.
  static void Drain(ContinuousBatcher& batcher) {
    for (int i = 0; i < 1000 && !batcher.idle(); ++i) ASSERT_TRUE(batcher.Step().ok());
    ASSERT_TRUE(batcher.idle());
  }

  // `prompt` alone through `batcher`: its tokens, the prompt tokens it reported cached (-1:
  // not admitted) and the tokens the session decoded for it.
  struct Run {
    std::vector<int32_t> tokens;
    int64_t cached = -1;
    int64_t decoded = 0;
  };
  Run RunOne(BatchSession& session, ContinuousBatcher& batcher, std::vector<int32_t> prompt,
             int64_t max_tokens) {
    Run run;
    Record rec;
    int step = 0;
    GenerationRequest r = Request(std::move(prompt), max_tokens, &rec, &step);
    r.on_admitted = [&run](int64_t cached) { run.cached = cached; };
    const int64_t before = session.tokens_decoded();
    batcher.Submit(std::move(r));
    Drain(batcher);
    run.decoded = session.tokens_decoded() - before;
    EXPECT_TRUE(rec.done.has_value() && rec.done->ok());
    run.tokens = rec.tokens;
    return run;
  }

  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int steps) {
    return testing::DecodeAlone(*model_, prompt, steps).tokens;
  }

  cpu::CpuDevice cpu_{"CPU0", "cpu:0", 1};
  std::unique_ptr<LlamaModel> model_;
};

TEST_F(ContinuousBatcherTest, LateRequestsAndALongPromptLeaveEveryoneTheirTokens) {
  auto session = Session(512);
  ContinuousBatcher batcher(*session, /*n_batch=*/32);
  std::vector<int32_t> long_prompt = {1};
  for (int k = 1; k < 150; ++k) long_prompt.push_back((k * 17 + 9) % 500 + 3);
  struct Plan {
    int at;
    std::vector<int32_t> prompt;
    int64_t max_tokens;
  };
  const std::vector<Plan> plans = {{0, testing::VariedPrompt(1), 20},
                                   {3, testing::VariedPrompt(2), 16},
                                   {5, long_prompt, 8},
                                   {7, testing::VariedPrompt(4), 10}};
  std::vector<Record> rec(plans.size());
  int step = 0;
  for (; step < 200 && (step <= plans.back().at || !batcher.idle()); ++step) {
    for (size_t i = 0; i < plans.size(); ++i) {
      if (plans[i].at == step) {
        batcher.Submit(Request(plans[i].prompt, plans[i].max_tokens, &rec[i], &step));
      }
    }
    ASSERT_TRUE(batcher.Step().ok());
  }
  ASSERT_TRUE(batcher.idle());
  for (size_t i = 0; i < plans.size(); ++i) {
    ASSERT_TRUE(rec[i].done.has_value()) << i;
    EXPECT_TRUE(rec[i].done->ok()) << *rec[i].done;
    EXPECT_EQ(rec[i].tokens, Alone(plans[i].prompt, plans[i].max_tokens)) << "request " << i;
  }
  // The long prompt took 5 steps of chunks (32 tokens a step, less what the decodes took);
  // the requests decoding meanwhile got a token at every one of those steps.
  const int long_first = rec[2].steps.front();
  EXPECT_GE(long_first - plans[2].at, 4);
  for (int s = plans[2].at; s < long_first; ++s) {
    EXPECT_THAT(rec[0].steps, ::testing::Contains(s)) << "request 0 had no token at step " << s;
  }
  EXPECT_EQ(session->cells().used(), batcher.cached_cells());  // only idle sequences' cells.
}

TEST_F(ContinuousBatcherTest, ARequestWaitsForCellsThenRuns) {
  auto session = Session(64);  // room for one request of 40 cells at a time.
  ContinuousBatcher batcher(*session, 64);
  Record a, b;
  int step = 0;
  batcher.Submit(Request(testing::VariedPrompt(3), 22, &a, &step));  // 19 + 22 = 41 cells.
  batcher.Submit(Request(testing::VariedPrompt(2), 26, &b, &step));  // 14 + 26 = 40.
  ASSERT_TRUE(batcher.Step().ok());
  EXPECT_EQ(batcher.running(), 1);
  EXPECT_EQ(batcher.queued(), 1);
  for (step = 1; step < 200 && !batcher.idle(); ++step) ASSERT_TRUE(batcher.Step().ok());
  EXPECT_EQ(a.tokens, Alone(testing::VariedPrompt(3), 22));
  EXPECT_EQ(b.tokens, Alone(testing::VariedPrompt(2), 26));
  ASSERT_FALSE(a.steps.empty() || b.steps.empty());
  EXPECT_GT(b.steps.front(), a.steps.back());  // b started once a had ended.
}

TEST_F(ContinuousBatcherTest, CancelAndStopEndARequestAndFreeItsCells) {
  auto session = Session(512);
  ContinuousBatcher batcher(*session, 64);
  Record stopper, cancelled, queued;
  int step = 0;
  GenerationRequest r = Request(testing::VariedPrompt(1), 30, &stopper, &step);
  r.on_token = [&stopper](int32_t t) {
    stopper.tokens.push_back(t);
    return stopper.tokens.size() < 3;  // stops after its third token.
  };
  batcher.Submit(std::move(r));
  const int c = batcher.Submit(Request(testing::VariedPrompt(2), 30, &cancelled, &step));
  ASSERT_TRUE(batcher.Step().ok());
  ASSERT_TRUE(batcher.Step().ok());
  batcher.Cancel(c);
  const int q = batcher.Submit(Request(testing::VariedPrompt(3), 30, &queued, &step));
  batcher.Cancel(q);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(batcher.Step().ok());
  EXPECT_EQ(stopper.tokens.size(), 3u);
  EXPECT_TRUE(stopper.done.has_value() && stopper.done->ok());
  ASSERT_TRUE(cancelled.done.has_value());
  EXPECT_TRUE(absl::IsCancelled(*cancelled.done)) << *cancelled.done;
  EXPECT_EQ(cancelled.tokens.size(), 2u);
  ASSERT_TRUE(queued.done.has_value());
  EXPECT_TRUE(absl::IsCancelled(*queued.done));
  EXPECT_TRUE(queued.tokens.empty());
  EXPECT_TRUE(batcher.idle());
  EXPECT_EQ(session->cells().used(), batcher.cached_cells());  // only idle sequences' cells.
}

TEST_F(ContinuousBatcherTest, BadRequestsAreRefusedAtOnce) {
  auto session = Session(32);
  ContinuousBatcher batcher(*session, 16);
  Record empty, huge, none;
  int step = 0;
  batcher.Submit(Request({}, 4, &empty, &step));
  batcher.Submit(Request(testing::VariedPrompt(1), 40, &huge, &step));
  batcher.Submit(Request(testing::VariedPrompt(1), 0, &none, &step));
  ASSERT_TRUE(empty.done.has_value() && huge.done.has_value() && none.done.has_value());
  EXPECT_THAT(std::string(empty.done->message()), HasSubstr("the prompt has no tokens"));
  EXPECT_THAT(std::string(huge.done->message()),
              HasSubstr("a prompt of 9 tokens and 40 to generate need 49 cells; the cache has 32"));
  EXPECT_THAT(std::string(none.done->message()), HasSubstr("max_tokens 0 must be at least 1"));
  EXPECT_TRUE(batcher.idle());
}

// The first 10 tokens of VariedPrompt(3), then others.
std::vector<int32_t> Diverging() {
  std::vector<int32_t> p = testing::VariedPrompt(3);
  p.resize(10);
  for (int k = 0; k < 7; ++k) p.push_back((k * 53 + 7) % 500 + 3);
  return p;
}

TEST_F(ContinuousBatcherTest, ASharedPrefixIsDecodedOnceAndGivesTheTokensAlone) {
  auto session = Session(512);
  ContinuousBatcher batcher(*session, 64);
  const std::vector<int32_t> a = testing::VariedPrompt(3);  // 19 tokens.
  const Run first = RunOne(*session, batcher, a, 12);
  EXPECT_EQ(first.tokens, Alone(a, 12));
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(first.decoded, 19 + 12 - 1);  // the prompt, then every pick but the last.
  EXPECT_EQ(batcher.cached_sequences(), 1);
  // Diverging after 10 tokens: 10 reused (a fork of the idle sequence), 7 decoded.
  const std::vector<int32_t> b = Diverging();
  const Run second = RunOne(*session, batcher, b, 12);
  EXPECT_EQ(second.tokens, Alone(b, 12));
  EXPECT_EQ(second.cached, 10);
  EXPECT_EQ(second.decoded, 7 + 12 - 1);
  // A continuation of the first: its prompt, its picks, more; all the first one held (its
  // prompt and its first 11 picks: the 12th was never decoded) is reused.
  std::vector<int32_t> c = a;
  c.insert(c.end(), first.tokens.begin(), first.tokens.end());
  for (int k = 0; k < 5; ++k) c.push_back((k * 71 + 13) % 500 + 3);
  const Run third = RunOne(*session, batcher, c, 12);
  EXPECT_EQ(third.tokens, Alone(c, 12));
  EXPECT_EQ(third.cached, 19 + 11);
  EXPECT_EQ(third.decoded, static_cast<int64_t>(c.size()) - 30 + 12 - 1);
  EXPECT_EQ(batcher.cached_tokens_total(), 10 + 30);
}

TEST_F(ContinuousBatcherTest, APromptEqualToACachedOneReusesAllButItsLastToken) {
  auto session = Session(512);
  ContinuousBatcher batcher(*session, 64);
  const std::vector<int32_t> a = testing::VariedPrompt(2);  // 14 tokens.
  const std::vector<int32_t> want = Alone(a, 10);
  const Run first = RunOne(*session, batcher, a, 10);
  const Run second = RunOne(*session, batcher, a, 10);
  EXPECT_EQ(first.tokens, want);
  EXPECT_EQ(second.tokens, want);
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(second.cached, 13);  // the last prompt token is decoded: it gives the first pick.
  EXPECT_EQ(second.decoded, 1 + 10 - 1);
  // The second holds all the first did: one of them was dropped.
  EXPECT_EQ(batcher.cached_sequences(), 1);
  // Longer: it holds more than the cached one, which is dropped when it ends.
  const Run third = RunOne(*session, batcher, a, 16);
  EXPECT_EQ(third.tokens, Alone(a, 16));
  EXPECT_EQ(third.cached, 13);
  EXPECT_EQ(batcher.cached_sequences(), 1);
}

TEST_F(ContinuousBatcherTest, ARunningRequestsPrefixIsSharedToo) {
  auto session = Session(512);
  ContinuousBatcher batcher(*session, 64);
  const std::vector<int32_t> a = testing::VariedPrompt(3);
  std::vector<int32_t> b = a;  // a's whole prompt, then others.
  for (int k = 0; k < 6; ++k) b.push_back((k * 29 + 5) % 500 + 3);
  Record ra, rb;
  int step = 0;
  int64_t cached_b = -1;
  batcher.Submit(Request(a, 20, &ra, &step));
  for (; step < 3; ++step) ASSERT_TRUE(batcher.Step().ok());  // a is generating.
  GenerationRequest r = Request(b, 12, &rb, &step);
  r.on_admitted = [&cached_b](int64_t n) { cached_b = n; };
  batcher.Submit(std::move(r));
  Drain(batcher);
  EXPECT_EQ(ra.tokens, Alone(a, 20));
  EXPECT_EQ(rb.tokens, Alone(b, 12));
  EXPECT_EQ(cached_b, static_cast<int64_t>(a.size()));
  EXPECT_EQ(session->cells().used(), batcher.cached_cells());
}

TEST_F(ContinuousBatcherTest, IdleSequencesGiveWayToARequestThatNeedsTheirCells) {
  auto session = Session(96);
  ContinuousBatcher batcher(*session, 64);
  // Three finished requests fill most of the cache with idle sequences.
  for (int i = 1; i <= 3; ++i) {
    const Run run = RunOne(*session, batcher, testing::VariedPrompt(i), 16);
    EXPECT_EQ(run.tokens, Alone(testing::VariedPrompt(i), 16)) << i;
  }
  EXPECT_EQ(batcher.cached_sequences(), 3);
  EXPECT_GT(session->cells().used(), 96 - 40);
  EXPECT_EQ(batcher.cached_cells(), session->cells().used());
  // 40 cells, more than are free: admitted at the first step, idle sequences ended for it.
  const std::vector<int32_t> p = Diverging();
  Record rec;
  int step = 0;
  batcher.Submit(Request(p, 40 - static_cast<int64_t>(p.size()), &rec, &step));
  ASSERT_TRUE(batcher.Step().ok());
  EXPECT_EQ(batcher.running(), 1);
  EXPECT_EQ(rec.tokens.size(), 1u);
  EXPECT_LT(batcher.cached_sequences(), 3);
  Drain(batcher);
  EXPECT_EQ(rec.tokens, Alone(p, 40 - static_cast<int>(p.size())));
}

TEST_F(ContinuousBatcherTest, TheLeastRecentlyUsedIdleSequenceGoesFirst) {
  auto session = Session(64);
  ContinuousBatcher batcher(*session, 64);
  // Prompts of 8 tokens with different first tokens: no prefix shared.
  auto prompt = [](int32_t first, int n) {
    std::vector<int32_t> p;
    for (int k = 0; k < n; ++k) p.push_back(first + 37 * k);
    return p;
  };
  for (int32_t first : {5, 6, 7}) RunOne(*session, batcher, prompt(first, 8), 8);  // A, B, C.
  EXPECT_EQ(batcher.cached_sequences(), 3);
  EXPECT_EQ(session->cells().used(), 45);  // 8 + 7 each.
  // A used again (its prompt: all but the last token reused): B is now the least recent.
  const Run again = RunOne(*session, batcher, prompt(5, 8), 8);
  EXPECT_EQ(again.cached, 7);
  EXPECT_EQ(again.tokens, Alone(prompt(5, 8), 8));
  EXPECT_EQ(batcher.cached_sequences(), 3);
  // 30 cells, 19 free: one idle sequence (B) ends.
  const Run big = RunOne(*session, batcher, prompt(9, 10), 20);
  EXPECT_EQ(big.cached, 0);
  EXPECT_EQ(big.tokens, Alone(prompt(9, 10), 20));
  EXPECT_EQ(RunOne(*session, batcher, prompt(5, 8), 1).cached, 7);  // A is there,
  EXPECT_EQ(RunOne(*session, batcher, prompt(7, 8), 1).cached, 7);  // C too,
  EXPECT_EQ(RunOne(*session, batcher, prompt(6, 8), 1).cached, 0);  // B is not.
}

TEST_F(ContinuousBatcherTest, IdleSequencesGiveWayToARequestThatNeedsASequenceSlot) {
  auto session = Session(1024);
  ContinuousBatcher batcher(*session, 512);
  // Every sequence slot held by a finished request: prompts [1, i + 3, i + 100], no prefix
  // of one another (they share only the first token).
  auto prompt = [](int i) { return std::vector<int32_t>{1, i + 3, i + 100}; };
  std::vector<Record> recs(KvCells::kMaxSequences);
  int step = 0;
  for (int i = 0; i < KvCells::kMaxSequences; ++i) {
    batcher.Submit(Request(prompt(i), 2, &recs[i], &step));
  }
  Drain(batcher);
  EXPECT_EQ(batcher.cached_sequences(), KvCells::kMaxSequences);
  const std::vector<int32_t> p = testing::VariedPrompt(4);
  Record rec;
  int64_t cached = -1;
  GenerationRequest r = Request(p, 8, &rec, &step);
  r.on_admitted = [&cached](int64_t n) { cached = n; };
  batcher.Submit(std::move(r));
  ASSERT_TRUE(batcher.Step().ok());
  EXPECT_EQ(batcher.running(), 1);
  EXPECT_EQ(cached, 1);  // the first token, shared with the idle sequences.
  EXPECT_EQ(batcher.cached_sequences(), KvCells::kMaxSequences - 1);
  Drain(batcher);
  EXPECT_EQ(rec.tokens, Alone(p, 8));
  EXPECT_EQ(recs[5].tokens, Alone(prompt(5), 2));
}

TEST_F(ContinuousBatcherTest, ReuseOffDecodesEveryPromptWholeAndKeepsNothing) {
  auto session = Session(512);
  ContinuousBatcher batcher(*session, 64, KvCells::kMaxSequences, /*reuse_prompts=*/false);
  const std::vector<int32_t> a = testing::VariedPrompt(2);
  const Run first = RunOne(*session, batcher, a, 10);
  const Run second = RunOne(*session, batcher, a, 10);
  EXPECT_EQ(first.tokens, Alone(a, 10));
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(second.cached, 0);
  EXPECT_EQ(second.decoded, 14 + 10 - 1);
  EXPECT_EQ(batcher.cached_sequences(), 0);
  EXPECT_EQ(session->cells().used(), 0);
  // Nor is a running request's prefix shared: the same prompt while the first decodes.
  Record r1, r2;
  int step = 0;
  int64_t cached2 = -1;
  batcher.Submit(Request(a, 10, &r1, &step));
  ASSERT_TRUE(batcher.Step().ok());
  GenerationRequest r = Request(a, 10, &r2, &step);
  r.on_admitted = [&cached2](int64_t n) { cached2 = n; };
  batcher.Submit(std::move(r));
  Drain(batcher);
  EXPECT_EQ(cached2, 0);
  EXPECT_EQ(r2.tokens, first.tokens);
  EXPECT_EQ(session->cells().used(), 0);
}

// The log-softmax of `logits` in double and every id sorted likeliest first (ties: lower id):
// the reference the batcher's log-probabilities are held to.
struct Reference {
  std::vector<double> logprob;
  std::vector<int32_t> order;
};
Reference LogSoftmax(const std::vector<float>& logits) {
  Reference r;
  double max = -INFINITY;
  for (float l : logits) max = std::max(max, double{l});
  double sum = 0;
  for (float l : logits) sum += std::exp(double{l} - max);
  for (float l : logits) r.logprob.push_back(double{l} - max - std::log(sum));
  r.order.resize(logits.size());
  std::iota(r.order.begin(), r.order.end(), 0);
  std::stable_sort(r.order.begin(), r.order.end(),
                   [&](int32_t a, int32_t b) { return r.logprob[a] > r.logprob[b]; });
  return r;
}

TEST_F(ContinuousBatcherTest, LogprobsAreTheLogSoftmaxOfTheLogitsAlone) {
  constexpr int kSteps = 8;
  constexpr int kTop = 5;
  // Batched and alone logits differ by float rounding (F32 KV): within this.
  constexpr double kTol = 2e-3;
  auto session = Session(512);
  ContinuousBatcher batcher(*session, /*n_batch=*/64);
  const std::vector<int32_t> with = testing::VariedPrompt(1);
  const std::vector<int32_t> without = testing::VariedPrompt(2);
  const std::vector<int32_t> whole = testing::VariedPrompt(3);
  struct Got {
    std::vector<int32_t> tokens;
    std::vector<int32_t> logprob_tokens;
    std::vector<TokenLogprobs> logprobs;
  };
  std::vector<Got> got(3);
  int step = 0;
  std::vector<Record> rec(3);
  const std::vector<std::vector<int32_t>> prompts = {with, without, whole};
  const std::vector<int> tops = {kTop, -1, 1 << 30};  // the last: the whole vocabulary.
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r = Request(prompts[i], kSteps, &rec[i], &step);
    r.top_logprobs = tops[i];
    r.on_logprobs = [&got, i](int32_t t, const TokenLogprobs& lp) {
      got[i].logprob_tokens.push_back(t);
      got[i].logprobs.push_back(lp);
    };
    batcher.Submit(std::move(r));
  }
  Drain(batcher);
  const int64_t n_vocab = model_->tokenizer().n_vocab();
  for (int i : {0, 2}) {
    const testing::GreedyTrace alone = testing::DecodeAlone(*model_, prompts[i], kSteps);
    ASSERT_EQ(rec[i].tokens, alone.tokens) << i;
    ASSERT_EQ(got[i].logprob_tokens, alone.tokens) << "on_logprobs gets each token, in order";
    for (int k = 0; k < kSteps; ++k) {
      const Reference ref = LogSoftmax(alone.logits[k]);
      const TokenLogprobs& lp = got[i].logprobs[k];
      const size_t n = i == 0 ? kTop : static_cast<size_t>(n_vocab);
      ASSERT_EQ(lp.top.size(), n);
      EXPECT_NEAR(lp.logprob, ref.logprob[alone.tokens[k]], kTol) << "step " << k;
      // Greedy: the chosen token is the likeliest.
      EXPECT_EQ(lp.top[0].first, alone.tokens[k]);
      EXPECT_FLOAT_EQ(lp.logprob, lp.top[0].second);
      double total = 0;
      for (size_t j = 0; j < n; ++j) {
        EXPECT_NEAR(lp.top[j].second, ref.logprob[lp.top[j].first], kTol) << k << " " << j;
        if (j > 0) {
          EXPECT_GE(lp.top[j - 1].second, lp.top[j].second);
        }
        EXPECT_LE(lp.top[j].second, 0.0f);
        total += std::exp(double{lp.top[j].second});
      }
      if (i == 0) {
        // The top ids are the reference's (ties by id), unless two are closer than rounding.
        for (size_t j = 0; j < n; ++j) {
          if (lp.top[j].first == ref.order[j]) continue;
          EXPECT_NEAR(ref.logprob[lp.top[j].first], ref.logprob[ref.order[j]], kTol)
              << "step " << k << " rank " << j;
        }
      } else {
        EXPECT_NEAR(total, 1.0, 1e-4) << "the whole vocabulary's probabilities, step " << k;
      }
    }
  }
  EXPECT_TRUE(got[1].logprobs.empty()) << "a request without top_logprobs gets none";
  EXPECT_EQ(rec[1].tokens, Alone(without, kSteps)) << "beside one with logprobs, unchanged";
}

TEST_F(ContinuousBatcherTest, SuspendedRequestsResumeOnANewSessionWithTheirOwnTokens) {
  constexpr int64_t kMax = 24;
  const std::vector<int32_t> p0 = testing::VariedPrompt(1), p1 = testing::VariedPrompt(2),
                             p2 = testing::VariedPrompt(3);
  const SamplingParams seeded{.sample = {.temperature = 0.9f, .repeat_penalty = 1.2f, .seed = 5}};
  // p0 greedy, p1 seeded sampling (both running), p2 greedy, queued behind them (2 at once).
  auto submit_all = [&](ContinuousBatcher& b, std::vector<Record>& rec, std::vector<int>& admits,
                        const int* step) {
    for (int i = 0; i < 3; ++i) {
      GenerationRequest r = Request(i == 0 ? p0 : i == 1 ? p1 : p2, kMax, &rec[i], step);
      if (i == 1) r.sampling = seeded;
      r.on_admitted = [&admits, i](int64_t) { ++admits[i]; };
      b.Submit(std::move(r));
    }
  };
  // The uninterrupted run.
  std::vector<Record> want(3);
  std::vector<int> want_admits(3, 0);
  int step = 0;
  {
    auto session = Session(512);
    ContinuousBatcher batcher(*session, /*n_batch=*/64, /*max_running=*/2);
    submit_all(batcher, want, want_admits, &step);
    Drain(batcher);
  }
  ASSERT_EQ(want[0].tokens, Alone(p0, kMax));  // the greedy reference is the session's alone.
  ASSERT_EQ(want[1].tokens.size(), static_cast<size_t>(kMax));
  // Stopped after 8 steps: 7 tokens out each, their last pick not decoded yet.
  std::vector<Record> got(3);
  std::vector<int> admits(3, 0);
  auto first = Session(512);
  ContinuousBatcher batcher(*first, /*n_batch=*/64, /*max_running=*/2);
  submit_all(batcher, got, admits, &step);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(batcher.Step().ok());
  ASSERT_EQ(batcher.running(), 2);
  ASSERT_EQ(batcher.queued(), 1);
  ASSERT_GT(got[0].tokens.size(), 2u);
  ASSERT_LT(got[1].tokens.size(), static_cast<size_t>(kMax));
  EXPECT_EQ(batcher.Suspend(), 2);
  EXPECT_EQ(batcher.running(), 0);
  EXPECT_EQ(batcher.queued(), 3);
  first.reset();  // the old session goes before the new one exists, as after a failover.
  auto second = Session(512);
  batcher.Rebind(*second);
  Drain(batcher);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].done.has_value() && got[i].done->ok()) << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(admits[i], 1) << "request " << i << " told of its admission again";
  }
  EXPECT_EQ(second->cells().used(), batcher.cached_cells());
}

TEST_F(ContinuousBatcherTest, AStepErrorThatIsRecoverableEndsNoRequest) {
  auto session = Session(128);
  const int32_t outside = static_cast<int32_t>(model_->tokenizer().n_vocab()) + 5;
  for (bool recover : {true, false}) {
    ContinuousBatcher batcher(*session, /*n_batch=*/32);
    Record rec;
    int step = 0;
    batcher.Submit(Request({1, outside}, 4, &rec, &step));
    const absl::Status s =
        batcher.Step(recover ? [](const absl::Status& e) { return absl::IsInvalidArgument(e); }
                             : std::function<bool(const absl::Status&)>());
    ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
    if (recover) {
      EXPECT_FALSE(rec.done.has_value());
      EXPECT_EQ(batcher.running(), 1);
      EXPECT_EQ(batcher.Suspend(), 1);
      batcher.EndAll(s);
    }
    ASSERT_TRUE(rec.done.has_value());
    EXPECT_EQ(*rec.done, s);
    EXPECT_TRUE(batcher.idle());
  }
}

}  // namespace
}  // namespace tg

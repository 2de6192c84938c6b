// tg-bench: measures prompt processing (pp) and generation (tg) speed like llama-bench:
// random tokens, a fresh KV cache per repetition, one warm-up run, mean and standard
// deviation of tokens/s; output as a markdown table, CSV or JSON with llama-bench's names.
// Per row it also says where the time went: compute and transfers (split-input copies,
// all-reduce) as shares of the wall time (summed over devices, so pipelined devices can
// exceed 100%), splits per graph and the scheduler's own time per split; for a model on
// several devices, the cost of one more split measured on a trivial graph. With --greedy, tg
// steps feed back the device's ARGMAX pick (greedy generation, as tg-run --temp 0 does) instead
// of reading the logits; with --temp T, the token SAMPLE draws on the device (tg-run --temp T).
// With --rpc-failover, a repetition that loses an rpc-server is run again on the devices left
// (FailoverSession): one line on stderr says so, and each row says where it ran. With
// --parallel N, a row runs N sequences at once over one KV cache (models/batch_session.h), as
// llama-batched-bench's -npl does: pp decodes N prompts of -p tokens together (chunks of
// -b / N tokens each per step), tg N sequences of -n tokens (one step: every sequence's next
// token); t/s is the aggregate, N * tokens / time.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/register_builtin.h"
#include "cli/arg_parser.h"
#include "cli/rpc/device_flags.h"
#include "core/deadlock_detection.h"
#include "core/registry.h"
#include "core/scheduler_probe.h"
#include "core/split_mode.h"
#include "core/status_macros.h"
#include "models/batch_session.h"
#include "models/failover_model.h"
#include "models/failover_session.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "tools/common/demo_model.h"
#include "tools/common/failover.h"
#include "tools/common/json_writer.h"
#include "tools/common/weight_loading.h"

namespace tg {
namespace {

struct BenchFlags {
  std::string model;
  std::string n_prompt = "512";
  std::string n_gen = "128";
  std::string threads = "";
  std::string n_copies = "0";
  std::string parallel = "1";  // sequences at once (BatchSession when > 1).
  std::string mmap = "auto";   // --mmap: ParseWeightMapping.
  DeviceFlags devices;
  int64_t reps = 5;
  int64_t batch = 512;
  std::string output = "md";
  bool greedy = false;  // tg: ARGMAX on the device, only the token id read back.
  float temp = 0.0f;    // > 0, tg: SAMPLE on the device at this temperature, fed back.
  int64_t greedy_batch = SessionOptions{}.greedy_batch;
  bool rpc_failover = false;
  bool deterministic = false;
  bool no_split_probe = false;  // skip the split-overhead line (about 4 s over rpc-servers).
};

struct TestResult {
  int64_t n_prompt = 0;
  int64_t n_gen = 0;
  int64_t n_threads = 0;
  int64_t n_copies = 0;  // pipeline micro-batches (0: the session's default).
  int64_t n_parallel = 1;  // sequences decoded together.
  bool greedy = false;
  float temp = 0.0f;       // sampled on the device (> 0).
  std::string devices;     // where the test ran (DeviceColumn), after any failover.
  std::string split_mode;  // likewise.
  int failovers = 0;       // repetitions run again after losing a server.
  std::vector<double> samples_ns;
  DecodeTimings timings;      // of the timed repetitions.
  double compute_share = 0;   // device time in Stream::Compute / wall time.
  double transfer_share = 0;  // device time in copies and all-reduce / wall time.
  double SplitsPerGraph() const {
    return timings.graphs > 0 ? static_cast<double>(timings.splits) / timings.graphs : 0;
  }
  double OverheadPerSplitUs() const {
    return timings.splits > 0 ? timings.overhead_us / timings.splits : 0;
  }
  double Mean(const std::vector<double>& v) const {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / v.size();
  }
  double Stddev(const std::vector<double>& v) const {
    if (v.size() < 2) return 0;
    const double m = Mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / (v.size() - 1));
  }
  // Aggregate tokens/s: every sequence's tokens.
  std::vector<double> SamplesTs() const {
    std::vector<double> ts;
    const double n = static_cast<double>((n_prompt + n_gen) * n_parallel);
    for (double ns : samples_ns) ts.push_back(n * 1e9 / ns);
    return ts;
  }
};

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " expects non-negative integers, got '", part, "'"));
    }
    out.push_back(v);
  }
  return out;
}

// The draws tg-bench --temp makes: llama.cpp's default chain, a fixed seed, no penalty.
SamplingParams BenchSampling(float temp) {
  constexpr uint64_t kSeed = 42;
  return {.sample = {.temperature = temp, .seed = kSeed}};
}

// "CPU0+CPU1" for a layer split, else the one (or meta) device.
std::string DeviceColumn(const LlamaModel& m) {
  if (!m.multi_device()) return std::string(m.device()->name());
  return absl::StrJoin(m.placement().UsedDevices(), "+",
                       [](std::string* out, const Device* d) { absl::StrAppend(out, d->name()); });
}

std::string TestName(const TestResult& r) {
  if (r.n_parallel > 1) {
    TestResult one = r;
    one.n_parallel = 1;
    return absl::StrCat(TestName(one), " x", r.n_parallel);
  }
  if (r.n_gen == 0) return absl::StrCat("pp", r.n_prompt);
  const std::string greedy =
      r.temp > 0 ? absl::StrFormat(" temp %g", r.temp) : (r.greedy ? " greedy" : "");
  if (r.n_prompt == 0) return absl::StrCat("tg", r.n_gen, greedy);
  return absl::StrCat("pp", r.n_prompt, "+tg", r.n_gen, greedy);
}

// Where a test ran (after any failover) and its time shares over `total_ns` of timed runs.
void RecordPlacement(const LlamaModel& model, SplitMode mode, int64_t n_copies, double total_ns,
                     TestResult* r) {
  r->n_copies = model.multi_device() ? (n_copies > 0 ? n_copies : kDefaultPipelineCopies) : 1;
  r->devices = DeviceColumn(model);
  r->split_mode = std::string(SplitModeName(mode));
  r->compute_share = r->timings.compute_us * 1e3 / total_ns;
  r->transfer_share = r->timings.transfer_us * 1e3 / total_ns;
}

// One timed repetition: fresh cache, then n_prompt tokens in batches or n_gen single steps.
// With greedy, each generated token is the device's ARGMAX pick of the step before; with a
// temperature, its SAMPLE draw.
absl::StatusOr<double> RunOnce(FailoverSession& session, int64_t n_prompt, int64_t n_gen,
                               int32_t bos, int64_t n_vocab, bool greedy, float temp,
                               std::mt19937& rng) {
  session.Reset();
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> prompt(n_prompt);
  for (int32_t& t : prompt) t = tok(rng);
  const auto t0 = std::chrono::steady_clock::now();
  if (n_prompt > 0) TG_RETURN_IF_ERROR(session.Decode(prompt).status());
  int32_t next = bos >= 0 ? bos : 0;
  if (temp > 0) {
    TG_RETURN_IF_ERROR(
        session.Generate(next, n_gen, BenchSampling(temp), [](int32_t) { return true; }));
  } else if (greedy) {
    TG_RETURN_IF_ERROR(session.GenerateGreedy(next, n_gen, [](int32_t) { return true; }));
  } else {
    for (int64_t i = 0; i < n_gen; ++i) {
      TG_RETURN_IF_ERROR(session.Decode({&next, 1}).status());
      next = tok(rng);
    }
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

DecodeTimings Minus(const DecodeTimings& a, const DecodeTimings& b) {
  return {a.build_us - b.build_us,       a.compute_us - b.compute_us, a.transfer_us - b.transfer_us,
          a.overhead_us - b.overhead_us, a.graphs - b.graphs,         a.splits - b.splits};
}

DecodeTimings Plus(const DecodeTimings& a, const DecodeTimings& b) {
  return {a.build_us + b.build_us,       a.compute_us + b.compute_us, a.transfer_us + b.transfer_us,
          a.overhead_us + b.overhead_us, a.graphs + b.graphs,         a.splits + b.splits};
}

absl::StatusOr<TestResult> RunTest(FailoverModel& fm, int64_t n_prompt, int64_t n_gen,
                                   int64_t threads, int64_t n_copies, const BenchFlags& f) {
  SetThreads(fm.plan().devices, threads);
  SessionOptions so;
  so.n_ctx = std::max<int64_t>(n_prompt + n_gen + 16, 256);
  so.n_batch = f.batch;
  so.deterministic = f.deterministic;
  so.n_copies = static_cast<int>(n_copies);
  so.greedy_batch = static_cast<int>(std::clamp<int64_t>(f.greedy_batch, 0, kMaxGreedyBatch + 1));
  // A repetition that loses a server is run again on the devices left: its time included the
  // recovery. Each recovery drops a server, so this ends.
  std::string where;
  auto report = [&](const FailoverEvent& e) {
    std::fprintf(stderr, "%s\n", RecoveryLine("tg-bench", where, e).c_str());
  };
  TG_ASSIGN_OR_RETURN(std::unique_ptr<FailoverSession> session,
                      FailoverSession::Create(fm, so, report));
  std::mt19937 rng(42);
  TestResult r;
  r.n_prompt = n_prompt;
  r.n_gen = n_gen;
  r.n_threads = threads;
  r.greedy = f.greedy && n_gen > 0;
  r.temp = n_gen > 0 ? f.temp : 0.0f;
  const int32_t bos = fm.model().tokenizer().bos();
  const int64_t n_vocab = fm.model().hparams().n_vocab;
  double total_ns = 0;
  // Repetition 0 is the warm-up, not timed.
  for (int64_t rep = 0; rep <= f.reps; ++rep) {
    where = rep == 0 ? absl::StrCat("in ", TestName(r), " warm-up")
                     : absl::StrCat("in ", TestName(r), " repetition ", rep);
    const int failovers = session->failovers();
    const DecodeTimings before = session->session().timings();
    TG_ASSIGN_OR_RETURN(double ns,
                        RunOnce(*session, n_prompt, n_gen, bos, n_vocab, r.greedy, r.temp, rng));
    if (session->failovers() != failovers) {
      // The test starts again, warm-up included, so that its row is all on the devices left.
      r.failovers += session->failovers() - failovers;
      r.samples_ns.clear();
      r.timings = {};
      total_ns = 0;
      rep = -1;
      continue;
    }
    if (rep == 0) continue;
    r.samples_ns.push_back(ns);
    total_ns += ns;
    r.timings = Plus(r.timings, Minus(session->session().timings(), before));
  }
  RecordPlacement(fm.model(), fm.plan().mode, n_copies, total_ns, &r);
  return r;
}

// One timed repetition of n_par sequences on a fresh cache: their prompts of n_prompt random
// tokens in steps of at most n_batch tokens (each sequence a chunk per step), or n_gen steps
// of one token per sequence (the device's pick with greedy, else random tokens).
absl::StatusOr<double> RunParallelOnce(BatchSession& session, int64_t n_par, int64_t n_prompt,
                                       int64_t n_gen, int64_t n_batch, int32_t bos,
                                       int64_t n_vocab, bool greedy, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int> seqs;
  std::vector<std::vector<int32_t>> prompts(n_par);
  for (int64_t i = 0; i < n_par; ++i) {
    TG_ASSIGN_OR_RETURN(const int seq, session.NewSequence());
    seqs.push_back(seq);
    for (int64_t k = 0; k < n_prompt; ++k) prompts[i].push_back(tok(rng));
  }
  const int64_t chunk = std::max<int64_t>(1, n_batch / n_par);
  std::vector<int32_t> next(n_par, bos >= 0 ? bos : 0);
  std::vector<SequenceWork> work;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t done = 0; done < n_prompt; done += chunk) {
    work.clear();
    for (int64_t i = 0; i < n_par; ++i) {
      const int64_t n = std::min(chunk, n_prompt - done);
      work.push_back({seqs[i], absl::MakeConstSpan(prompts[i]).subspan(done, n)});
    }
    TG_RETURN_IF_ERROR(session.Step(work).status());
  }
  for (int64_t k = 0; k < n_gen; ++k) {
    work.clear();
    for (int64_t i = 0; i < n_par; ++i) work.push_back({seqs[i], {&next[i], 1}});
    TG_ASSIGN_OR_RETURN(std::vector<SequenceResult> r, session.Step(work));
    for (int64_t i = 0; i < n_par; ++i) next[i] = greedy ? r[i].pick : tok(rng);
  }
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  for (int seq : seqs) TG_RETURN_IF_ERROR(session.EndSequence(seq));
  return ns;
}

absl::StatusOr<TestResult> RunParallelTest(const LlamaModel& model, const DevicePlan& plan,
                                           int64_t n_prompt, int64_t n_gen, int64_t threads,
                                           int64_t n_copies, int64_t n_par,
                                           const BenchFlags& f) {
  SetThreads(plan.devices, threads);
  BatchSessionOptions o;
  o.n_ctx = std::max<int64_t>((n_prompt + n_gen) * n_par + 16, 256);
  o.n_batch = std::max(f.batch, n_par);
  o.n_copies = static_cast<int>(n_copies);
  TG_ASSIGN_OR_RETURN(std::unique_ptr<BatchSession> session, BatchSession::Create(model, o));
  std::mt19937 rng(42);
  TestResult r;
  r.n_prompt = n_prompt;
  r.n_gen = n_gen;
  r.n_threads = threads;
  r.n_parallel = n_par;
  r.greedy = f.greedy && n_gen > 0;
  double total_ns = 0;
  for (int64_t rep = 0; rep <= f.reps; ++rep) {  // repetition 0: the warm-up.
    const DecodeTimings before = session->timings();
    TG_ASSIGN_OR_RETURN(double ns,
                        RunParallelOnce(*session, n_par, n_prompt, n_gen, o.n_batch,
                                        model.tokenizer().bos(), model.hparams().n_vocab,
                                        r.greedy, rng));
    if (rep == 0) continue;
    r.samples_ns.push_back(ns);
    total_ns += ns;
    r.timings = Plus(r.timings, Minus(session->timings(), before));
  }
  RecordPlacement(model, plan.mode, n_copies, total_ns, &r);
  return r;
}

// The cost of one more split on the model's devices (nullopt for one device).
absl::StatusOr<std::optional<SplitOverhead>> ProbeSplits(const LlamaModel& m) {
  if (!m.multi_device()) return std::nullopt;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<SchedulerBackend> backends;
  for (Device* d : m.placement().UsedDevices()) {
    TG_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, d->CreateStream());
    backends.push_back({d, stream.get()});
    streams.push_back(std::move(stream));
  }
  TG_ASSIGN_OR_RETURN(SplitOverhead o, MeasureSplitOverhead(backends));
  return o;
}

// What every output format needs besides the rows.
struct Report {
  const LlamaModel* model = nullptr;
  std::string path;
  std::string devices;  // DeviceColumn of the model at the end (rows say their own).
  std::optional<SplitOverhead> probe;
  std::vector<TestResult> results;
};

void PrintMarkdown(const Report& rep) {
  const LlamaModel& m = *rep.model;
  std::printf(
      "| model | size | params | devices | sm | threads | pipe | test | t/s | compute | "
      "xfer | splits | µs/split |\n");
  std::printf(
      "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
      "---: |\n");
  for (const TestResult& r : rep.results) {
    const std::vector<double> ts = r.SamplesTs();
    std::printf(
        "| %s | %.2f MiB | %.2f M | %s | %s | %d | %d | %s | %.2f ± %.2f | %.0f%% | "
        "%.1f%% | %.1f | %.1f |\n",
        m.Describe().c_str(), m.weight_bytes() / 1048576.0, m.n_params() / 1e6, r.devices.c_str(),
        r.split_mode.c_str(), static_cast<int>(r.n_threads), static_cast<int>(r.n_copies),
        TestName(r).c_str(), r.Mean(ts), r.Stddev(ts), 100 * r.compute_share,
        100 * r.transfer_share, r.SplitsPerGraph(), r.OverheadPerSplitUs());
  }
  if (rep.probe.has_value()) {
    std::printf(
        "\nsplit overhead on %s: %.1f µs per extra split (trivial chain: %.1f µs in 1 "
        "split, %.1f µs in %d)\n",
        rep.devices.c_str(), rep.probe->per_split_us, rep.probe->one_split_us,
        rep.probe->many_splits_us, rep.probe->splits);
  }
}

void PrintCsv(const Report& rep) {
  const LlamaModel& m = *rep.model;
  std::printf(
      "model_filename,model_type,model_size,model_n_params,devices,split_mode,n_threads,"
      "n_copies,n_prompt,n_gen,avg_ns,stddev_ns,avg_ts,stddev_ts,compute_us,transfer_us,"
      "splits_per_graph,overhead_us_per_split,split_overhead_us,greedy,temp,n_parallel\n");
  const double probe_us = rep.probe.has_value() ? rep.probe->per_split_us : 0;
  for (const TestResult& r : rep.results) {
    const std::vector<double> ts = r.SamplesTs();
    std::printf(
        "\"%s\",\"%s\",%zu,%lld,\"%s\",%s,%lld,%lld,%lld,%lld,%.0f,%.0f,%.6f,%.6f,%.0f,"
        "%.0f,%.3f,%.3f,%.3f,%d,%g,%lld\n",
        rep.path.c_str(), m.Describe().c_str(), m.weight_bytes(),
        static_cast<long long>(m.n_params()), r.devices.c_str(), r.split_mode.c_str(),
        static_cast<long long>(r.n_threads), static_cast<long long>(r.n_copies),
        static_cast<long long>(r.n_prompt), static_cast<long long>(r.n_gen), r.Mean(r.samples_ns),
        r.Stddev(r.samples_ns), r.Mean(ts), r.Stddev(ts), r.timings.compute_us,
        r.timings.transfer_us, r.SplitsPerGraph(), r.OverheadPerSplitUs(), probe_us,
        r.greedy ? 1 : 0, r.temp, static_cast<long long>(r.n_parallel));
  }
}

void PrintJson(const Report& rep) {
  const LlamaModel& m = *rep.model;
  JsonWriter j;
  j.BeginArray();
  for (const TestResult& r : rep.results) {
    const std::vector<double> ts = r.SamplesTs();
    j.BeginObject().Key("model_filename").String(rep.path).Key("model_type").String(m.Describe());
    j.Key("model_size")
        .Int(static_cast<int64_t>(m.weight_bytes()))
        .Key("model_n_params")
        .Int(m.n_params());
    j.Key("devices").String(r.devices).Key("cpu_info").String(m.device()->description());
    j.Key("split_mode").String(r.split_mode).Key("n_copies").Int(r.n_copies);
    j.Key("failovers").Int(r.failovers);
    j.Key("n_threads").Int(r.n_threads).Key("n_prompt").Int(r.n_prompt).Key("n_gen").Int(r.n_gen);
    j.Key("n_parallel").Int(r.n_parallel);
    j.Key("greedy").Bool(r.greedy).Key("temp").Double(r.temp);
    j.Key("avg_ns").Double(r.Mean(r.samples_ns)).Key("stddev_ns").Double(r.Stddev(r.samples_ns));
    j.Key("avg_ts").Double(r.Mean(ts)).Key("stddev_ts").Double(r.Stddev(ts));
    j.Key("compute_share").Double(r.compute_share).Key("transfer_share").Double(r.transfer_share);
    j.Key("compute_us")
        .Double(r.timings.compute_us)
        .Key("transfer_us")
        .Double(r.timings.transfer_us);
    j.Key("splits_per_graph").Double(r.SplitsPerGraph());
    j.Key("overhead_us_per_split").Double(r.OverheadPerSplitUs());
    if (rep.probe.has_value()) j.Key("split_overhead_us").Double(rep.probe->per_split_us);
    j.Key("samples_ns").BeginArray();
    for (double ns : r.samples_ns) j.Double(ns);
    j.EndArray().Key("samples_ts").BeginArray();
    for (double t : ts) j.Double(t);
    j.EndArray().EndObject();
  }
  j.EndArray();
  std::printf("%s\n", j.str().c_str());
}

absl::StatusOr<std::vector<TestResult>> RunTests(
    FailoverModel& model, const std::vector<int64_t>& threads, const std::vector<int64_t>& copies,
    const std::vector<int64_t>& pps, const std::vector<int64_t>& tgs,
    const std::vector<int64_t>& pars, const BenchFlags& f) {
  std::vector<TestResult> results;
  // One test: alone through the session (with its failover), or n_par sequences at once.
  auto run = [&](int64_t pp, int64_t tg, int64_t t, int64_t c, int64_t n_par) {
    if (n_par == 1) return RunTest(model, pp, tg, t, c, f);
    return RunParallelTest(model.model(), model.plan(), pp, tg, t, c, n_par, f);
  };
  for (int64_t t : threads) {
    if (t < 1) return absl::InvalidArgumentError("-t must be at least 1");
    for (int64_t c : copies) {
      if (c > kMaxSchedulerCopies) {
        return absl::InvalidArgumentError(
            absl::StrCat("--n-copies must be at most ", kMaxSchedulerCopies));
      }
      for (int64_t n_par : pars) {
        for (int64_t pp : pps) {
          if (pp == 0) continue;
          TG_ASSIGN_OR_RETURN(TestResult r, run(pp, 0, t, c, n_par));
          results.push_back(std::move(r));
        }
        for (int64_t tg : tgs) {
          if (tg == 0) continue;
          TG_ASSIGN_OR_RETURN(TestResult r, run(0, tg, t, c, n_par));
          results.push_back(std::move(r));
        }
      }
    }
  }
  return results;
}

// The usage errors Parse cannot see: bad values and combinations (exit 2, before any work).
absl::Status CheckFlags(const BenchFlags& f) {
  if (f.output != "md" && f.output != "csv" && f.output != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("-o must be md, csv or json, not '", f.output, "'"));
  }
  if (f.reps < 1) return absl::InvalidArgumentError("-r must be at least 1");
  if (f.temp < 0 || (f.temp > 0 && f.greedy)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temp ", f.temp, " must be positive and cannot go with --greedy"));
  }
  TG_RETURN_IF_ERROR(ParseSplitMode(f.devices.split_mode).status());
  TG_RETURN_IF_ERROR(ParseList(f.n_prompt, "-p").status());
  TG_RETURN_IF_ERROR(ParseList(f.n_gen, "-n").status());
  TG_RETURN_IF_ERROR(ParseList(f.n_copies, "--n-copies").status());
  TG_ASSIGN_OR_RETURN(std::vector<int64_t> pars, ParseList(f.parallel, "--parallel"));
  for (int64_t n : pars) {
    if (n < 1 || n > KvCells::kMaxSequences) {
      return absl::InvalidArgumentError(absl::StrCat("--parallel ", n, " outside [1, ",
                                                     KvCells::kMaxSequences, "]"));
    }
    if (n > 1 && f.temp > 0) {
      return absl::InvalidArgumentError("--parallel above 1 decodes greedily or with random "
                                        "tokens: --temp is for one sequence");
    }
  }
  return ParseList(f.threads, "-t").status();
}

absl::Status Run(const BenchFlags& f) {
  TG_ASSIGN_OR_RETURN(std::vector<int64_t> pps, ParseList(f.n_prompt, "-p"));
  TG_ASSIGN_OR_RETURN(std::vector<int64_t> tgs, ParseList(f.n_gen, "-n"));
  TG_ASSIGN_OR_RETURN(std::vector<int64_t> copies, ParseList(f.n_copies, "--n-copies"));
  TG_ASSIGN_OR_RETURN(std::vector<int64_t> pars, ParseList(f.parallel, "--parallel"));
  TG_ASSIGN_OR_RETURN(DevicePlan plan, ResolveDevicePlan(f.devices));
  if (f.devices.list_devices) {
    std::printf("%s", DescribeDevices().c_str());
    return absl::OkStatus();
  }
  std::vector<int64_t> threads = {std::max(plan.devices[0]->threads(), 1)};
  if (!f.threads.empty()) {
    TG_ASSIGN_OR_RETURN(threads, ParseList(f.threads, "-t"));
  }
  std::string path = f.model;
  if (path.empty()) {
    TG_ASSIGN_OR_RETURN(path, EnsureDemoModel(TG_DEMO_MODEL_DIR));
  }
  LoadOptions lo;
  lo.plan = plan;
  TG_ASSIGN_OR_RETURN(lo.mapping, ParseWeightMapping(f.mmap));
  // Outlives the model: a failover loads again, into the same report.
  LoadReport load;
  lo.progress = LoadProgressBar("tg-bench");
  lo.loaded = FillLoadReport(&load);
  TG_ASSIGN_OR_RETURN(std::unique_ptr<FailoverModel> model,
                      FailoverModel::Load(path, lo, f.rpc_failover));
  // Where the load time went (per device: bytes sent, from the server's cache or file).
  std::fputs(FormatLoadReport(load, "tg-bench").c_str(), stderr);
  Report rep;
  rep.path = path;
  TG_ASSIGN_OR_RETURN(rep.results, RunTests(*model, threads, copies, pps, tgs, pars, f));
  rep.model = &model->model();  // after the tests: a failover loads it again.
  rep.devices = DeviceColumn(model->model());
  if (!f.no_split_probe) {
    TG_ASSIGN_OR_RETURN(rep.probe, ProbeSplits(model->model()));  // with the last -t.
  }
  if (f.output == "md") PrintMarkdown(rep);
  if (f.output == "csv") PrintCsv(rep);
  if (f.output == "json") PrintJson(rep);
  return absl::OkStatus();
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  if (absl::Status s = tg::ConfigureDeadlockDetection(); !s.ok()) {
    std::fprintf(stderr, "tg-bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  tg::BenchFlags f;
  tg::ArgParser p("tg-bench");
  p.AddString("-m", "--model", &f.model, "GGUF model (default: the synthetic demo model)");
  p.AddString("-p", "--n-prompt", &f.n_prompt, "prompt sizes, comma-separated (default 512)");
  p.AddString("-n", "--n-gen", &f.n_gen, "generation lengths, comma-separated (default 128)");
  p.AddString("-t", "--threads", &f.threads, "thread counts, comma-separated (default: all)");
  p.AddString(nullptr, "--parallel", &f.parallel,
              "sequences decoded at once over one KV cache, comma-separated (default 1); t/s "
              "is then the aggregate, as llama-batched-bench's -npl");
  p.AddString(nullptr, "--n-copies", &f.n_copies,
              "-sm layer: prompt micro-batches in flight, comma-separated (default 0 = 4; 1 = "
              "no pipelining)");
  tg::AddDeviceSelectionFlags(p, &f.devices);
  p.AddInt("-r", "--repetitions", &f.reps, "repetitions per test (default 5)");
  p.AddInt("-b", "--batch-size", &f.batch, "prompt tokens per graph (default 512)");
  p.AddString("-o", "--output", &f.output, "md (default), csv or json");
  p.AddString(nullptr, "--mmap", &f.mmap, tg::kMmapHelp);
  p.AddBool(nullptr, "--greedy", &f.greedy,
            "tg: feed back the device's ARGMAX pick (greedy generation, only the token id is "
            "read) instead of reading the logits and feeding random tokens like llama-bench");
  p.AddFloat(nullptr, "--temp", &f.temp,
             "tg: draw each token on the device with SAMPLE at this temperature (top-k 40, "
             "top-p 0.95, min-p 0.05, a fixed seed) and feed it back, as tg-run --temp does");
  p.AddInt(
      nullptr, "--greedy-batch", &f.greedy_batch,
      absl::StrCat("--greedy or --temp on an rpc-server: decode steps sent in one message, 1..",
                   tg::kMaxGreedyBatch, " (default 0: as many as take ", tg::kGreedyBatchUs, " us)")
          .c_str());
  p.AddBool(
      nullptr, "--no-split-probe", &f.no_split_probe,
      "several devices: skip measuring the cost of one more split after the tests (the "
      "'split overhead' line; csv split_overhead_us 0), which takes seconds over rpc-servers");
  p.AddBool(nullptr, "--rpc-failover", &f.rpc_failover,
            "when an rpc-server is lost, run the test again on the remaining devices (the same "
            "split, -ts renormalised) and say so on stderr");
  p.AddBool(nullptr, "--deterministic", &f.deterministic,
            "pp: decode one token per graph, as tg-run --deterministic does (its cost)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "tg-bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (p.help_requested()) {
    std::printf("%s", p.Usage("[-m MODEL.gguf] [-p 512] [-n 128] [-r 5] [-t 2] [-o md|csv|json]\n"
                              "                [-sm none|layer|tensor] [--greedy | --temp T] "
                              "[options]")
                          .c_str());
    return 0;
  }
  if (!p.positional().empty()) {
    std::fprintf(stderr, "tg-bench: unexpected argument '%s'\n", p.positional()[0].c_str());
    return 2;
  }
  if (absl::Status s = tg::CheckFlags(f); !s.ok()) {
    std::fprintf(stderr, "tg-bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = tg::Run(f); !s.ok()) {
    std::fprintf(stderr, "tg-bench: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

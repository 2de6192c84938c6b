// tg-bench: measures prompt processing (pp) and generation (tg) speed like llama-bench:
// random tokens, a fresh KV cache per repetition, one warm-up run, mean and standard
// deviation of tokens/s; output as a markdown table, CSV or JSON with llama-bench's names.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/cpu/cpu_device.h"
#include "backends/register_builtin.h"
#include "core/registry.h"
#include "core/status_macros.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "tools/common/arg_parser.h"
#include "tools/common/demo_model.h"
#include "tools/common/device_flags.h"
#include "tools/common/json_writer.h"

namespace tg {
namespace {

struct BenchFlags {
  std::string model;
  std::string n_prompt = "512";
  std::string n_gen = "128";
  std::string threads = "";
  DeviceFlags devices;
  int64_t reps = 5;
  int64_t batch = 512;
  std::string output = "md";
};

struct TestResult {
  int64_t n_prompt = 0;
  int64_t n_gen = 0;
  int64_t n_threads = 0;
  std::vector<double> samples_ns;
  double compute_share = 0;  // fraction of wall time inside Stream::Compute.
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
  std::vector<double> SamplesTs() const {
    std::vector<double> ts;
    const double n = static_cast<double>(n_prompt + n_gen);
    for (double ns : samples_ns) ts.push_back(n * 1e9 / ns);
    return ts;
  }
};

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " expects non-negative integers, got '", part, "'"));
    }
    out.push_back(v);
  }
  return out;
}

// One timed repetition: fresh cache, then n_prompt tokens in batches or n_gen single steps.
absl::StatusOr<double> RunOnce(LlamaSession& session, int64_t n_prompt, int64_t n_gen,
                               int32_t bos, int64_t n_vocab, std::mt19937& rng) {
  session.Reset();
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> prompt(n_prompt);
  for (int32_t& t : prompt) t = tok(rng);
  const auto t0 = std::chrono::steady_clock::now();
  if (n_prompt > 0) TG_RETURN_IF_ERROR(session.Decode(prompt).status());
  int32_t next = bos >= 0 ? bos : 0;
  for (int64_t i = 0; i < n_gen; ++i) {
    TG_RETURN_IF_ERROR(session.Decode({&next, 1}).status());
    next = tok(rng);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

// Applies a thread count to every CPU device the model uses (streams read it at creation).
void SetCpuThreads(const LlamaModel& model, int64_t threads) {
  for (Device* d : model.plan().devices) {
    if (auto* cpu = dynamic_cast<cpu::CpuDevice*>(d); cpu != nullptr) {
      cpu->set_n_threads(static_cast<int>(threads));
    }
  }
}

absl::StatusOr<TestResult> RunTest(const LlamaModel& model, int64_t n_prompt, int64_t n_gen,
                                   int64_t threads, const BenchFlags& f) {
  SetCpuThreads(model, threads);
  SessionOptions so;
  so.n_ctx = std::max<int64_t>(n_prompt + n_gen + 16, 256);
  so.n_batch = f.batch;
  TG_ASSIGN_OR_RETURN(std::unique_ptr<LlamaSession> session, LlamaSession::Create(model, so));
  std::mt19937 rng(42);
  TestResult r{n_prompt, n_gen, threads, {}, 0};
  const int32_t bos = model.tokenizer().bos();
  TG_RETURN_IF_ERROR(RunOnce(*session, n_prompt, n_gen, bos, model.hparams().n_vocab, rng).status());
  const double compute_before = session->timings().compute_us;
  double total_ns = 0;
  for (int64_t rep = 0; rep < f.reps; ++rep) {
    TG_ASSIGN_OR_RETURN(double ns, RunOnce(*session, n_prompt, n_gen, bos, model.hparams().n_vocab, rng));
    r.samples_ns.push_back(ns);
    total_ns += ns;
  }
  r.compute_share = (session->timings().compute_us - compute_before) * 1e3 / total_ns;
  return r;
}

std::string TestName(const TestResult& r) {
  if (r.n_gen == 0) return absl::StrCat("pp", r.n_prompt);
  if (r.n_prompt == 0) return absl::StrCat("tg", r.n_gen);
  return absl::StrCat("pp", r.n_prompt, "+tg", r.n_gen);
}

void PrintMarkdown(const LlamaModel& m, const std::vector<TestResult>& results) {
  std::printf("| model | size | params | devices | threads | test | t/s | compute |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
  for (const TestResult& r : results) {
    const std::vector<double> ts = r.SamplesTs();
    std::printf("| %s | %.2f MiB | %.2f M | %s | %d | %s | %.2f ± %.2f | %.0f%% |\n",
                m.Describe().c_str(), m.weight_bytes() / 1048576.0, m.n_params() / 1e6,
                std::string(m.device()->name()).c_str(), static_cast<int>(r.n_threads),
                TestName(r).c_str(), r.Mean(ts), r.Stddev(ts), 100 * r.compute_share);
  }
}

void PrintCsv(const LlamaModel& m, const std::string& path, const std::vector<TestResult>& results) {
  std::printf("model_filename,model_type,model_size,model_n_params,devices,n_threads,n_prompt,"
              "n_gen,avg_ns,stddev_ns,avg_ts,stddev_ts\n");
  for (const TestResult& r : results) {
    const std::vector<double> ts = r.SamplesTs();
    std::printf("\"%s\",\"%s\",%zu,%lld,\"%s\",%lld,%lld,%lld,%.0f,%.0f,%.6f,%.6f\n", path.c_str(),
                m.Describe().c_str(), m.weight_bytes(), static_cast<long long>(m.n_params()),
                std::string(m.device()->name()).c_str(), static_cast<long long>(r.n_threads),
                static_cast<long long>(r.n_prompt), static_cast<long long>(r.n_gen),
                r.Mean(r.samples_ns), r.Stddev(r.samples_ns), r.Mean(ts), r.Stddev(ts));
  }
}

void PrintJson(const LlamaModel& m, const std::string& path, const std::vector<TestResult>& results) {
  JsonWriter j;
  j.BeginArray();
  for (const TestResult& r : results) {
    const std::vector<double> ts = r.SamplesTs();
    j.BeginObject().Key("model_filename").String(path).Key("model_type").String(m.Describe());
    j.Key("model_size").Int(static_cast<int64_t>(m.weight_bytes())).Key("model_n_params").Int(m.n_params());
    j.Key("devices").String(m.device()->name()).Key("cpu_info").String(m.device()->description());
    j.Key("n_threads").Int(r.n_threads).Key("n_prompt").Int(r.n_prompt).Key("n_gen").Int(r.n_gen);
    j.Key("avg_ns").Double(r.Mean(r.samples_ns)).Key("stddev_ns").Double(r.Stddev(r.samples_ns));
    j.Key("avg_ts").Double(r.Mean(ts)).Key("stddev_ts").Double(r.Stddev(ts));
    j.Key("compute_share").Double(r.compute_share);
    j.Key("samples_ns").BeginArray();
    for (double ns : r.samples_ns) j.Double(ns);
    j.EndArray().Key("samples_ts").BeginArray();
    for (double t : ts) j.Double(t);
    j.EndArray().EndObject();
  }
  j.EndArray();
  std::printf("%s\n", j.str().c_str());
}

absl::Status Run(const BenchFlags& f) {
  if (f.output != "md" && f.output != "csv" && f.output != "json") {
    return absl::InvalidArgumentError(absl::StrCat("-o must be md, csv or json, not '", f.output, "'"));
  }
  if (f.reps < 1) return absl::InvalidArgumentError("-r must be at least 1");
  TG_ASSIGN_OR_RETURN(std::vector<int64_t> pps, ParseList(f.n_prompt, "-p"));
  TG_ASSIGN_OR_RETURN(std::vector<int64_t> tgs, ParseList(f.n_gen, "-n"));
  TG_ASSIGN_OR_RETURN(DevicePlan plan, ResolveDevicePlan(f.devices));
  if (f.devices.list_devices) {
    std::printf("%s", DescribeDevices().c_str());
    return absl::OkStatus();
  }
  auto* first_cpu = dynamic_cast<cpu::CpuDevice*>(plan.devices[0]);
  std::vector<int64_t> threads = {first_cpu != nullptr ? first_cpu->n_threads() : 1};
  if (!f.threads.empty()) {
    TG_ASSIGN_OR_RETURN(threads, ParseList(f.threads, "-t"));
  }
  std::string path = f.model;
  if (path.empty()) {
    TG_ASSIGN_OR_RETURN(path, EnsureDemoModel(TG_DEMO_MODEL_DIR));
  }
  LoadOptions lo;
  lo.plan = plan;
  TG_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::Load(path, lo));
  std::vector<TestResult> results;
  for (int64_t t : threads) {
    if (t < 1) return absl::InvalidArgumentError("-t must be at least 1");
    for (int64_t pp : pps) {
      if (pp == 0) continue;
      TG_ASSIGN_OR_RETURN(TestResult r, RunTest(*model, pp, 0, t, f));
      results.push_back(std::move(r));
    }
    for (int64_t tg : tgs) {
      if (tg == 0) continue;
      TG_ASSIGN_OR_RETURN(TestResult r, RunTest(*model, 0, tg, t, f));
      results.push_back(std::move(r));
    }
  }
  if (f.output == "md") PrintMarkdown(*model, results);
  if (f.output == "csv") PrintCsv(*model, path, results);
  if (f.output == "json") PrintJson(*model, path, results);
  return absl::OkStatus();
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  tg::BenchFlags f;
  tg::ArgParser p("tg-bench");
  p.AddString("-m", "--model", &f.model, "GGUF model (default: the synthetic demo model)");
  p.AddString("-p", "--n-prompt", &f.n_prompt, "prompt sizes, comma-separated (default 512)");
  p.AddString("-n", "--n-gen", &f.n_gen, "generation lengths, comma-separated (default 128)");
  p.AddString("-t", "--threads", &f.threads, "thread counts, comma-separated (default: all)");
  p.AddString("-sm", "--split-mode", &f.devices.split_mode, "none (default), layer or tensor");
  p.AddString("-ts", "--tensor-split", &f.devices.tensor_split, "proportions per device, e.g. 3,1");
  p.AddString(nullptr, "--device", &f.devices.devices, "devices to use, e.g. CPU0,CPU1");
  p.AddBool(nullptr, "--list-devices", &f.devices.list_devices, "list the devices and exit");
  p.AddInt("-r", "--repetitions", &f.reps, "repetitions per test (default 5)");
  p.AddInt("-b", "--batch-size", &f.batch, "prompt tokens per graph (default 512)");
  p.AddString("-o", "--output", &f.output, "md (default), csv or json");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "tg-bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (p.help_requested()) {
    std::printf("%s", p.Usage("[-m MODEL.gguf] [-p 512] [-n 128] [-r 5] [-t 2] [-o md|csv|json]").c_str());
    return 0;
  }
  if (!p.positional().empty()) {
    std::fprintf(stderr, "tg-bench: unexpected argument '%s'\n", p.positional()[0].c_str());
    return 2;
  }
  if (absl::Status s = tg::Run(f); !s.ok()) {
    std::fprintf(stderr, "tg-bench: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

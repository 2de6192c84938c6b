// tg-run: generates text with a GGUF model on tensorgrid's devices, streaming it to stdout,
// or printing one JSON object with tokens, top logits and timings (--json).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/arg_parser.h"
#include "cli/rpc/device_flags.h"
#include "client/client_metrics.h"
#include "core/deadlock_detection.h"
#include "core/split_mode.h"
#include "core/status_macros.h"
#include "meta/allreduce.h"
#include "models/failover_model.h"
#include "models/failover_session.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "models/sampler.h"
#include "tools/common/demo_model.h"
#include "tools/common/failover.h"
#include "tools/common/json_writer.h"
#include "tools/common/prompt_cache.h"
#include "tools/common/weight_loading.h"

namespace tg {
namespace {

struct RunFlags {
  std::string model;
  std::string prompt = "Once upon a time";
  int64_t n_predict = 64;
  float temp = 0.8f;
  int64_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int64_t repeat_last_n = 64;
  int64_t seed = -1;
  DeviceFlags devices;
  int64_t ctx = 0;
  int64_t batch = 512;
  std::string kv_type = "f16";
  std::string mmap = "auto";  // --mmap: ParseWeightMapping.
  bool json = false;
  int64_t top_logits = 5;
  bool rpc_failover = false;
  bool deterministic = false;
  bool verbose = false;
  std::string prompt_cache;  // the prompt's saved state (tools/common/prompt_cache.h).
};

// Set once text has gone to stdout, so that an error starts on a line of its own.
bool g_streamed = false;

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Result {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<std::pair<float, int32_t>> top;
  float logit_min = 0;  // over the whole vocabulary at the first generated position.
  float logit_max = 0;
  double prompt_ms = 0;
  double gen_ms = 0;
  int64_t prompt_reused = 0;  // prompt tokens restored from --prompt-cache, not decoded.
  bool prompt_saved = false;  // the prompt's state was written to --prompt-cache.

  double PromptTps() const { return prompt_tokens.size() * 1000.0 / prompt_ms; }
  // The first generated token comes from the prompt pass: gen_ms covers the rest.
  double GenTps() const { return tokens.size() > 1 ? (tokens.size() - 1) * 1000.0 / gen_ms : 0.0; }
};

SamplingParams SamplingOf(const RunFlags& f) {
  SamplingParams p;
  p.sample.temperature = f.temp;
  p.sample.top_k = static_cast<int32_t>(f.top_k);
  p.sample.top_p = f.top_p;
  p.sample.min_p = f.min_p;
  p.sample.repeat_penalty = f.repeat_penalty;
  p.sample.seed =
      f.seed >= 0
          ? static_cast<uint64_t>(f.seed)
          : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  p.penalty_last_n = f.repeat_last_n;
  return p;
}

// Decodes the prompt, picks the first token, then generates the rest. Every pick is made on
// the device and only the token id comes back: ARGMAX (greedy) or SAMPLE (a temperature, or
// a repetition penalty), whose draws depend on the seed and each token's position only, so
// a device, a split or a session resumed after a lost server (--rpc-failover: the
// FailoverSession rebuilds its KV cache and goes on) gives the same tokens.
absl::Status Generate(const RunFlags& f, FailoverSession& session, const SamplingParams& sampling,
                      Result* r) {
  const bool greedy = f.temp <= 0.0f && f.repeat_penalty == 1.0f;
  // Hands a token over; false once generation must stop. The tokenizer is looked up each time:
  // a failover replaces the model (and its tokenizer) under a running generation.
  auto emit = [&](int32_t token) {
    const Tokenizer& tok = session.model().tokenizer();
    r->tokens.push_back(token);
    const std::string piece = tok.TokenToPiece(token);
    r->text += piece;
    if (!f.json) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
    return !tok.IsEog(token) && static_cast<int64_t>(r->tokens.size()) < f.n_predict;
  };
  r->prompt_tokens = session.model().tokenizer().Encode(f.prompt, /*add_special=*/true);
  if (r->prompt_tokens.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (!f.json) {
    std::fputs(f.prompt.c_str(), stdout);
    g_streamed = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  // --prompt-cache: the saved prefix of the prompt is restored; greedy picks its first token
  // from the saved logits when the whole prompt was saved, sampling decodes at least one.
  PromptCacheHit hit;
  if (!f.prompt_cache.empty()) {
    TG_ASSIGN_OR_RETURN(hit, RestorePromptCache(f.prompt_cache, session, r->prompt_tokens, greedy,
                                                [](const std::string& message) {
                                                  std::fprintf(stderr, "tg-run: warning: %s\n",
                                                               message.c_str());
                                                }));
    r->prompt_reused = hit.reused;
  }
  const absl::Span<const int32_t> rest = absl::MakeConstSpan(r->prompt_tokens).subspan(hit.reused);
  absl::Span<const float> logits = hit.logits;
  int32_t first = -1;
  if (rest.empty()) {
    first = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else if (greedy) {
    TG_ASSIGN_OR_RETURN(logits, session.Decode(rest));
    first = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    TG_ASSIGN_OR_RETURN(first, session.DecodeSample(rest, sampling, &logits));
  }
  if (!f.prompt_cache.empty() && !rest.empty()) {
    TG_RETURN_IF_ERROR(SavePromptCache(f.prompt_cache, session, logits));
    r->prompt_saved = true;
  }
  if (f.verbose && !f.prompt_cache.empty()) {
    std::fprintf(stderr, "%stg-run: prompt cache %s: %lld of %zu prompt tokens reused, %zu decoded%s\n",
                 g_streamed ? "\n" : "", f.prompt_cache.c_str(),
                 static_cast<long long>(hit.reused), r->prompt_tokens.size(), rest.size(),
                 r->prompt_saved ? "; saved" : "");
  }
  const auto t1 = std::chrono::steady_clock::now();
  r->prompt_ms = Ms(t0, t1);
  r->top = TopK(logits, static_cast<int32_t>(f.top_logits));
  const auto [lo, hi] = std::minmax_element(logits.begin(), logits.end());
  r->logit_min = *lo;
  r->logit_max = *hi;
  if (f.n_predict <= 0 || !emit(first)) return absl::OkStatus();
  // The steps after the prompt are on their way before the previous pick is back.
  const int64_t left = f.n_predict - 1;
  if (greedy) {
    TG_RETURN_IF_ERROR(session.GenerateGreedy(first, left, emit));
  } else {
    TG_RETURN_IF_ERROR(session.Generate(first, left, sampling, emit));
  }
  r->gen_ms = Ms(t1, std::chrono::steady_clock::now());
  return absl::OkStatus();
}

void PrintJson(const Result& r, const LoadReport& load) {
  JsonWriter j;
  j.BeginObject().Key("prompt_tokens").BeginArray();
  for (int32_t t : r.prompt_tokens) j.Int(t);
  j.EndArray().Key("tokens").BeginArray();
  for (int32_t t : r.tokens) j.Int(t);
  j.EndArray().Key("text").String(r.text).Key("top_logits").BeginArray();
  for (const auto& [logit, id] : r.top) j.BeginArray().Int(id).Double(logit).EndArray();
  j.EndArray().Key("logit_range").BeginArray().Double(r.logit_min).Double(r.logit_max);
  j.EndArray().Key("timings").BeginObject();
  j.Key("prompt_ms").Double(r.prompt_ms).Key("gen_ms").Double(r.gen_ms);
  j.Key("prompt_reused").Int(r.prompt_reused);
  j.Key("prompt_tps").Double(r.PromptTps());
  j.Key("gen_tps").Double(r.GenTps());
  j.EndObject().Key("load").BeginObject().Key("seconds").Double(load.seconds);
  j.Key("devices").BeginArray();
  for (const DeviceLoad& d : load.devices) {
    j.BeginObject().Key("device").String(d.device).Key("bytes").Int(d.bytes);
    j.Key("sent").Int(d.sent).Key("cached").Int(d.cached).Key("from_file").Int(d.from_file);
    j.Key("mapped").Int(d.mapped).Key("hashed").Int(d.hashed);
    j.Key("seconds").Double(d.seconds).EndObject();
  }
  j.EndArray().EndObject();
  // What the remote devices' all-reduces moved through this process: staged by the RPC
  // collectives (client/client_metrics.h) or, when a local device joins the split, by the
  // meta backend's generic all-reduce (meta/allreduce.h); or run among the servers.
  const rpc::ClientMetrics& m = rpc::ClientMetrics::Get();
  const meta::AllReduceTraffic& host = meta::AllReduceTraffic::Get();
  j.Key("rpc").BeginObject();
  j.Key("allreduce_client_bytes")
      .Int(static_cast<int64_t>(m.allreduce_client_bytes.load() + host.staged_bytes.load()));
  j.Key("allreduce_on_servers").Int(static_cast<int64_t>(m.allreduce_on_servers.load()));
  j.Key("allreduce_staged")
      .Int(static_cast<int64_t>(m.allreduce_staged.load() + host.staged.load()));
  j.EndObject().EndObject();
  std::printf("%s\n", j.str().c_str());
}

// The usage errors Parse cannot see: values outside a flag's list (exit 2, before any work).
absl::Status CheckFlags(const RunFlags& f) {
  TG_RETURN_IF_ERROR(ParseSplitMode(f.devices.split_mode).status());
  absl::StatusOr<DType> kv_type = ParseDType(f.kv_type);
  if (!kv_type.ok() || (*kv_type != DType::kF16 && *kv_type != DType::kF32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-type must be f16 or f32, not '", f.kv_type, "'"));
  }
  return absl::OkStatus();
}

absl::Status Run(const RunFlags& f) {
  DeviceFlags device_flags = f.devices;
  device_flags.verbose = f.verbose;
  TG_ASSIGN_OR_RETURN(DevicePlan plan, ResolveDevicePlan(device_flags));
  if (f.devices.list_devices) {
    std::printf("%s", DescribeDevices().c_str());
    return absl::OkStatus();
  }
  std::string path = f.model;
  if (path.empty()) {
    TG_ASSIGN_OR_RETURN(path, EnsureDemoModel(TG_DEMO_MODEL_DIR));
    std::fprintf(stderr,
                 "tg-run: no -m given; using the synthetic demo model %s\n"
                 "tg-run: its weights are random, so the text below is noise by design; for real "
                 "text give a GGUF model: the checkout's demo/stories260K.gguf (a tiny real "
                 "llama), or a file from Hugging Face (e.g. qwen2.5-0.5b-instruct-q8_0.gguf of "
                 "Qwen/Qwen2.5-0.5B-Instruct-GGUF):\n"
                 "tg-run:   tg-run -m demo/stories260K.gguf -p \"Once upon a time\" -n 64\n",
                 path.c_str());
  }
  TG_ASSIGN_OR_RETURN(DType kv_type, ParseDType(f.kv_type));
  LoadOptions lo;
  lo.plan = plan;
  TG_ASSIGN_OR_RETURN(lo.mapping, ParseWeightMapping(f.mmap));
  // Outlives the model: a failover loads again, into the same report.
  LoadReport load;
  lo.progress = LoadProgressBar("tg-run");
  lo.loaded = FillLoadReport(&load);
  TG_ASSIGN_OR_RETURN(std::unique_ptr<FailoverModel> model,
                      FailoverModel::Load(path, lo, f.rpc_failover));
  if (f.verbose) std::fputs(FormatLoadReport(load, "tg-run").c_str(), stderr);
  SessionOptions so;
  so.n_ctx = f.ctx > 0 ? f.ctx : std::min<int64_t>(model->model().hparams().n_ctx_train, 4096);
  so.n_batch = f.batch;
  so.deterministic = f.deterministic;
  so.kv_type = kv_type;
  Result r;
  // --rpc-failover: one line once the session goes on without a lost server.
  auto report = [&](const FailoverEvent& e) {
    std::fprintf(
        stderr, "%s%s\n", g_streamed ? "\n" : "",
        RecoveryLine("tg-run", absl::StrFormat("at token %zu", r.tokens.size()), e).c_str());
  };
  TG_ASSIGN_OR_RETURN(std::unique_ptr<FailoverSession> session,
                      FailoverSession::Create(*model, so, report));
  TG_RETURN_IF_ERROR(Generate(f, *session, SamplingOf(f), &r));
  if (const DecodeTimings& t = session->session().timings(); f.verbose && t.fallback_graphs > 0) {
    std::fprintf(stderr, "%stg-run: %lld graphs ran with the CPU beside the device, which lacks "
                 "kernels for some of their nodes: %s\n", g_streamed ? "\n" : "",
                 static_cast<long long>(t.fallback_graphs), t.fallback_reason.c_str());
  }
  if (f.json) {
    PrintJson(r, load);
  } else {
    const double n_gen = static_cast<double>(r.tokens.size());
    std::fprintf(stderr,
                 "\n\ntg-run: %s | prompt %zu tok %.1f ms (%.1f tok/s) | gen %.0f tok %.1f ms "
                 "(%.1f tok/s)\n",
                 session->model().Describe().c_str(), r.prompt_tokens.size(), r.prompt_ms,
                 r.PromptTps(), n_gen, r.gen_ms, r.GenTps());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  if (absl::Status s = tg::ConfigureDeadlockDetection(); !s.ok()) {
    std::fprintf(stderr, "tg-run: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  tg::RunFlags f;
  tg::ArgParser p("tg-run");
  p.AddString("-m", "--model", &f.model, "GGUF model (default: a synthetic demo model)");
  p.AddString("-p", "--prompt", &f.prompt, "prompt text (default \"Once upon a time\")");
  p.AddInt("-n", "--n-predict", &f.n_predict, "tokens to generate (default 64)");
  p.AddFloat(nullptr, "--temp", &f.temp,
             "temperature; 0 = greedy (default 0.8); tokens are drawn on the device (SAMPLE)");
  p.AddInt(nullptr, "--top-k", &f.top_k, "top-k (default 40; 0 = off)");
  p.AddFloat(nullptr, "--top-p", &f.top_p, "top-p (default 0.95; 1 = off)");
  p.AddFloat(nullptr, "--min-p", &f.min_p, "min-p (default 0.05; 0 = off)");
  p.AddFloat(nullptr, "--repeat-penalty", &f.repeat_penalty,
             "penalty on the last --repeat-last-n tokens (default 1 = off)");
  p.AddInt(nullptr, "--repeat-last-n", &f.repeat_last_n,
           "tokens the repeat penalty looks back over (default 64)");
  p.AddInt("-s", "--seed", &f.seed,
           "sampling seed (default: random); the same seed gives the same tokens on any device");
  tg::AddDeviceFlags(p, &f.devices);
  p.AddInt("-c", "--ctx-size", &f.ctx, "context size (default: the model's, at most 4096)");
  p.AddInt("-b", "--batch-size", &f.batch, "prompt tokens per graph (default 512)");
  p.AddString(nullptr, "--kv-type", &f.kv_type, "KV cache type: f16 (default) or f32");
  p.AddString(nullptr, "--mmap", &f.mmap, tg::kMmapHelp);
  p.AddBool(nullptr, "--json", &f.json, "print one JSON object instead of streaming text");
  p.AddInt(nullptr, "--top-logits", &f.top_logits, "top logits in the JSON output (default 5)");
  p.AddBool(nullptr, "--rpc-failover", &f.rpc_failover,
            "when an rpc-server is lost, go on with the remaining devices (the same split, -ts "
            "renormalised; the KV cache rebuilt from the tokens so far)");
  p.AddBool(nullptr, "--deterministic", &f.deterministic,
            "decode the prompt one token per step: the bits of any chunking, so that a "
            "failover's rebuilt cache continues with the uninterrupted run's tokens (slower "
            "prompts)");
  p.AddString(nullptr, "--prompt-cache", &f.prompt_cache,
              "file of the prompt's saved state: written after the prompt is decoded, and "
              "restored instead of decoding when a later prompt starts with its tokens (-v says "
              "how many); works across split modes and devices");
  p.AddBool("-v", "--verbose", &f.verbose,
            "print how the weights were loaded: per device, bytes sent, from the server's cache "
            "or its own copy of the file, and seconds");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "tg-run: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (p.help_requested()) {
    std::printf("%s", p.Usage("[-m MODEL.gguf] [-p PROMPT] [-n N] [-sm none|layer|tensor]\n"
                              "              [--kv-type f16|f32] [--json] [options]")
                          .c_str());
    return 0;
  }
  if (!p.positional().empty()) {
    std::fprintf(stderr, "tg-run: unexpected argument '%s'\n", p.positional()[0].c_str());
    return 2;
  }
  if (absl::Status s = tg::CheckFlags(f); !s.ok()) {
    std::fprintf(stderr, "tg-run: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = tg::Run(f); !s.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "%stg-run: error: %s\n", tg::g_streamed ? "\n" : "",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

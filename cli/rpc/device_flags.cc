#include "cli/rpc/device_flags.h"

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "backends/register_builtin.h"
#include "cli/flag_file.h"
#include "client/remote_device.h"
#include "core/registry.h"
#include "core/status_macros.h"

namespace tg {

void AddDeviceSelectionFlags(ArgParser& p, DeviceFlags* f) {
  p.AddString("-sm", "--split-mode", &f->split_mode, "none (default), layer or tensor");
  p.AddString("-ts", "--tensor-split", &f->tensor_split,
              "proportions per device, e.g. 3,1 (default: by free memory)");
  p.AddBool(nullptr, "--expert-split", &f->expert_split,
            "with -sm tensor: whole MoE experts per device (expert parallelism) instead of a "
            "share of every expert");
  p.AddString(nullptr, "--device", &f->devices,
              "devices to use, e.g. CPU,RPC[host:port]/0 (see --list-devices); default with -sm "
              "layer|tensor: every GPU and remote device, the local CPUs only when there is "
              "neither");
  p.AddBool(nullptr, "--list-devices", &f->list_devices, "list the devices and exit");
  AddRpcFlags(p, f);
}

void AddRpcFlags(ArgParser& p, DeviceFlags* f) {
  p.AddString(nullptr, "--rpc", &f->rpc,
              "rpc-servers whose devices to use, host:port,... (devices RPC[host:port]/N)");
  p.AddString(nullptr, "--rpc-token-file", &f->rpc_token_file,
              "file holding the bearer token of the rpc-servers");
  p.AddString(nullptr, "--rpc-tls-ca", &f->rpc_tls_ca,
              "PEM file of the CA that signed the servers' certificates (turns TLS on)");
  p.AddString(nullptr, "--rpc-tls-cert", &f->rpc_tls_cert,
              "client certificate (PEM) for servers that require mutual TLS");
  p.AddString(nullptr, "--rpc-tls-key", &f->rpc_tls_key, "private key (PEM) of --rpc-tls-cert");
}

absl::Status RegisterRpcDevices(const DeviceFlags& f) {
  if (f.rpc.empty()) {
    if (!f.rpc_token_file.empty() || !f.rpc_tls_ca.empty()) {
      return absl::InvalidArgumentError("--rpc-token-file/--rpc-tls-ca need --rpc host:port,...");
    }
    return absl::OkStatus();
  }
  rpc::ClientOptions options;
  auto read = [](const std::string& path, const char* flag, std::string* out) -> absl::Status {
    if (path.empty()) return absl::OkStatus();
    TG_ASSIGN_OR_RETURN(*out, ReadFlagFile(path, flag));
    return absl::OkStatus();
  };
  TG_RETURN_IF_ERROR(read(f.rpc_token_file, "--rpc-token-file", &options.token));
  options.token = std::string(absl::StripAsciiWhitespace(options.token));
  if (!f.rpc_token_file.empty() && options.token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rpc-token-file: '", f.rpc_token_file, "' is empty"));
  }
  TG_RETURN_IF_ERROR(read(f.rpc_tls_ca, "--rpc-tls-ca", &options.tls_ca_pem));
  TG_RETURN_IF_ERROR(read(f.rpc_tls_cert, "--rpc-tls-cert", &options.tls_cert_pem));
  TG_RETURN_IF_ERROR(read(f.rpc_tls_key, "--rpc-tls-key", &options.tls_key_pem));
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("--rpc-tls-cert and --rpc-tls-key go together");
  }
  if (!options.tls_cert_pem.empty() && options.tls_ca_pem.empty()) {
    return absl::InvalidArgumentError("--rpc-tls-cert needs --rpc-tls-ca");
  }
  TG_ASSIGN_OR_RETURN(std::vector<std::string> endpoints, rpc::ParseEndpoints(f.rpc));
  return rpc::RegisterRemoteDevices(endpoints, options);
}

void AddDeviceFlags(ArgParser& p, DeviceFlags* f) {
  AddDeviceSelectionFlags(p, f);
  p.AddInt("-t", "--threads", &f->threads, "CPU threads per CPU device (default: all)");
}

namespace {

absl::StatusOr<std::vector<float>> ParseProportions(const std::string& text, size_t n_devices) {
  std::vector<float> p;
  double total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    float v;
    if (!absl::SimpleAtof(part, &v) || !(v >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tensor-split: '", part, "' is not a non-negative number"));
    }
    p.push_back(v);
    total += v;
  }
  if (p.size() != n_devices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tensor-split has %d values for %d devices", p.size(), n_devices));
  }
  if (total <= 0) return absl::InvalidArgumentError("--tensor-split values are all zero");
  for (float& v : p) v = static_cast<float>(v / total);
  return p;
}

}  // namespace

absl::StatusOr<DevicePlan> ResolveDevicePlan(const DeviceFlags& f) {
  TG_RETURN_IF_ERROR(RegisterBuiltinBackends(f.verbose));
  TG_RETURN_IF_ERROR(RegisterRpcDevices(f));
  if (f.threads < 0) return absl::InvalidArgumentError("-t must be positive");
  if (f.threads > 0) SetThreads(Registry::Get().devices(), f.threads);
  DevicePlan plan;
  TG_ASSIGN_OR_RETURN(plan.mode, ParseSplitMode(f.split_mode));
  TG_ASSIGN_OR_RETURN(plan.devices, PickDevices(f.devices, "--device",
                                                plan.mode == SplitMode::kNone
                                                    ? DefaultDevices::kFirstDefault
                                                    : DefaultDevices::kGpusAndRemoteElseCpus));
  if (plan.mode == SplitMode::kNone && plan.devices.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device lists ", plan.devices.size(),
                     " devices but --split-mode is none (use layer or tensor)"));
  }
  if (f.expert_split && plan.mode != SplitMode::kTensor) {
    return absl::InvalidArgumentError(absl::StrCat("--expert-split needs --split-mode tensor (is ",
                                                   SplitModeName(plan.mode), ")"));
  }
  plan.expert_split = f.expert_split;
  if (!f.tensor_split.empty()) {
    TG_ASSIGN_OR_RETURN(plan.proportions, ParseProportions(f.tensor_split, plan.devices.size()));
  } else {
    plan.proportions = ProportionsFromMemory(plan.devices);
  }
  return plan;
}

}  // namespace tg

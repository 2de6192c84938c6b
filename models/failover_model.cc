#include "models/failover_model.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "models/failover_plan.h"

namespace tg {
namespace {

// Reads the replies still on their way from the devices of `left`: a graph of the old model
// that waited on a piece from the lost server fails on a server left, often after the client
// saw the loss itself, and that error would fail the reload's first call on that server.
// Such errors are about the old model and are dropped; one that names a server of `left`
// is returned: that server is lost too.
absl::Status DrainServersLeft(const DevicePlan& left) {
  for (Device* device : left.devices) {
    TG_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, device->CreateStream());
    const absl::Status drained = stream->Synchronize();
    if (LostServer(drained, left).has_value()) return drained;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FailoverModel>> FailoverModel::Load(const std::string& path,
                                                                   const LoadOptions& options,
                                                                   bool failover) {
  std::unique_ptr<FailoverModel> m(new FailoverModel(path, options, failover));
  TG_ASSIGN_OR_RETURN(m->model_, LlamaModel::Load(path, options));
  return m;
}

bool FailoverModel::Recoverable(const absl::Status& error) const {
  return failover_ && LostServer(error, options_.plan).has_value();
}

absl::StatusOr<FailoverEvent> FailoverModel::Recover(const absl::Status& error) {
  const auto t0 = std::chrono::steady_clock::now();
  FailoverEvent event;
  event.error = error;
  absl::Status reason = error;
  // A reload may lose another server of the plan left: that one goes too, in the same event.
  while (true) {
    const std::optional<std::string> lost =
        failover_ ? LostServer(reason, options_.plan) : std::nullopt;
    if (!lost.has_value()) return reason;
    absl::StrAppend(&event.server, event.server.empty() ? "" : ",", *lost);
    TG_ASSIGN_OR_RETURN(options_.plan, PlanWithout(options_.plan, *lost, reason));
    model_.reset();  // its buffers on the servers left go before the new ones are made.
    if (absl::Status drained = DrainServersLeft(options_.plan); !drained.ok()) {
      reason = drained;
      continue;
    }
    absl::StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::Load(path_, options_);
    if (model.ok()) {
      model_ = std::move(*model);
      break;
    }
    reason = model.status();
  }
  event.plan = options_.plan;
  event.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return event;
}

}  // namespace tg

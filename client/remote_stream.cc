#include "client/remote_stream.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/graph_encoder.h"
#include "client/remote_buffer.h"
#include "client/remote_device.h"
#include "core/status_macros.h"

namespace tg::rpc {
namespace {
namespace pb = tensorgrid::v1;
}  // namespace

RemoteStream::RemoteStream(RemoteDevice* device)
    : device_(device), compute_ns_(std::make_shared<std::atomic<int64_t>>(0)) {}

Device* RemoteStream::device() const { return device_; }

absl::Status RemoteStream::Synchronize() { return device_->connection()->Drain(); }

absl::Status RemoteStream::Compute(Graph& graph) {
  Connection* connection = device_->connection();
  auto locate = [&](const Tensor& t) -> absl::StatusOr<RemoteLocation> {
    auto* buffer = dynamic_cast<RemoteBuffer*>(t.buffer);
    if (buffer == nullptr || buffer->connection() != connection) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' is not in memory of ", device_->name(), " (",
          t.buffer == nullptr ? "no buffer" : std::string(t.buffer->type()->name()), ")"));
    }
    return RemoteLocation{buffer->handle(), buffer->OffsetOf(t)};
  };
  TG_ASSIGN_OR_RETURN(const uint64_t key, GraphKey(graph, locate));
  pb::SessionRequest request;
  pb::Compute* c = request.mutable_compute();
  c->set_device(device_->index());
  c->set_graph_key(key);
  if (!connection->MarkGraphSent(key)) {
    TG_ASSIGN_OR_RETURN(EncodedGraph encoded, EncodeGraph(graph, locate));
    *c->mutable_graph() = std::move(encoded.desc);
  }

  // Small outputs come back inline; the reply handler files them for GetTensor.
  std::vector<std::pair<uint64_t, uint64_t>> outputs;  // (handle, offset)
  size_t inline_bytes = 0;
  for (const Tensor* node : graph.nodes) {
    if (!node->HasFlag(kFlagOutput) || node->buffer == nullptr) continue;
    const size_t bytes = node->NumBytes();
    auto* buffer = dynamic_cast<RemoteBuffer*>(node->buffer);
    if (buffer == nullptr || inline_bytes + bytes > kInlineOutputBytes) continue;
    inline_bytes += bytes;
    pb::Range* r = c->add_outputs();
    r->set_buffer(buffer->handle());
    r->set_offset(buffer->OffsetOf(*node));
    r->set_size(bytes);
    outputs.emplace_back(buffer->handle(), buffer->OffsetOf(*node));
  }
  ++splits_;
  std::shared_ptr<std::atomic<int64_t>> compute_ns = compute_ns_;
  return connection->Post(std::move(request), [connection, outputs = std::move(outputs), compute_ns,
                                               key](pb::SessionReply& reply) {
    if (reply.code() != 0) {
      connection->ForgetGraph(key);
      return absl::OkStatus();  // the reply's own error is what the caller sees.
    }
    pb::ComputeReply& r = *reply.mutable_compute();
    compute_ns->fetch_add(static_cast<int64_t>(r.compute_us() * 1e3));
    if (static_cast<size_t>(r.outputs_size()) != outputs.size()) {
      return absl::InternalError(absl::StrCat("rpc-server ", connection->endpoint(),
                                              ": compute returned ", r.outputs_size(),
                                              " outputs, asked for ", outputs.size()));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      connection->AddInlineOutput(outputs[i].first, outputs[i].second,
                                  std::move(*r.mutable_outputs(i)));
    }
    return absl::OkStatus();
  });
}

StreamStats RemoteStream::stats() const {
  StreamStats s;
  s.compute_us = compute_ns_->load() / 1e3;
  s.splits = splits_.load();
  return s;
}

}  // namespace tg::rpc

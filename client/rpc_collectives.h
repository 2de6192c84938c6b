// The RPC device family's Collectives (core/backend.h): all-reduce of one F32 tensor per
// remote device, as the meta backend asks for tensor parallelism over rpc-servers. Every
// remote device returns the same RpcCollectives, so devices of several servers count as one
// family. Two routes:
//   servers  (default) one AllReduce command per device, posted behind the device's queued
//            work without waiting: each server sums its own devices and the servers run a
//            ring, a butterfly or, for small tensors on three servers or more, a direct
//            exchange among themselves (server/collective_runner.h); the client
//            receives only the commands' completion, never the tensors;
//   client   the tensors staged through the client: read from every device, summed here in
//            device order, written back (the path before the servers could do it; kept for
//            comparison, and taken when a server's protocol_minor predates AllReduce, which
//            such a server would answer UNIMPLEMENTED).
// TG_RPC_ALLREDUCE=servers|client picks the route; TG_RPC_ALLREDUCE_BF16=1 sends values
// between servers as BF16 in the ring (half the bytes; every device still ends with the
// same bits). ClientMetrics counts what each route moved through the client.
// Thread-safety: RpcCollectives is thread-safe; a communicator is used by one thread at a
// time (the meta backend's rank 0).
#ifndef TENSORGRID_CLIENT_RPC_COLLECTIVES_H_
#define TENSORGRID_CLIENT_RPC_COLLECTIVES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/backend.h"

namespace tg::rpc {

class Connection;
class RemoteBuffer;

enum class AllReduceRoute { kServers, kClient };

struct RpcCollectiveOptions {
  AllReduceRoute route = AllReduceRoute::kServers;
  bool bf16_wire = false;
};

// TG_RPC_ALLREDUCE and TG_RPC_ALLREDUCE_BF16 as given (null: unset). INVALID_ARGUMENT names
// a bad value and the ones allowed.
absl::StatusOr<RpcCollectiveOptions> ParseCollectiveOptions(const char* route, const char* bf16);

// Largest number of bytes one server sends in a DIRECT all-reduce ((servers - 1) x the
// tensor): a decode step's activations of an 8k-wide model over 3 servers, or a 2k-wide one's
// over 9. Below it one step of several pieces costs less than the butterfly's log2(servers)
// round trips; above it the butterfly's or ring's fewer bytes win.
inline constexpr uint64_t kDirectMaxSendBytes = uint64_t{64} << 10;

// Whether an all-reduce of `bytes` per device over `servers` servers, the oldest of which
// speaks protocol minor `min_minor`, asks the servers for DIRECT (every server sends its
// tensor to every other in one step) rather than AUTO: with three servers or more (two
// servers' butterfly is one step already) that all know it, within kDirectMaxSendBytes.
bool UseDirectAllReduce(size_t servers, uint32_t min_minor, uint64_t bytes);

class RpcCommunicator : public Communicator {
 public:
  // Sums tensors[i] (on the devices given to Init, in order: F32, contiguous, equal sizes)
  // in place.
  absl::Status AllReduce(absl::Span<Tensor* const> tensors) override;
  // On the servers, AllReduce posts one command per device and waits for nothing.
  bool QueuesOnly() const override { return on_servers_; }
  bool on_servers() const { return on_servers_; }

 private:
  friend class RpcCollectives;
  RpcCommunicator(RpcCollectiveOptions options, bool on_servers)
      : options_(options), on_servers_(on_servers) {}
  absl::StatusOr<std::vector<RemoteBuffer*>> Check(absl::Span<Tensor* const> tensors) const;
  absl::Status OnServers(absl::Span<Tensor* const> tensors, absl::Span<RemoteBuffer* const> bufs);
  absl::Status Staged(absl::Span<Tensor* const> tensors, absl::Span<RemoteBuffer* const> bufs);

  RpcCollectiveOptions options_;
  bool on_servers_;
  std::vector<Device*> devices_;
  std::vector<float> staging_;  // the staged route's host copies, one tensor after another.
};

class RpcCollectives : public Collectives {
 public:
  // The process-wide instance every remote device returns (options from the environment).
  static RpcCollectives* Get();
  explicit RpcCollectives(RpcCollectiveOptions options) : options_(options) {}

  // INVALID_ARGUMENT for devices that are not remote or are listed twice.
  absl::StatusOr<std::unique_ptr<Communicator>> Init(absl::Span<Device* const> devices) override;

 private:
  RpcCollectiveOptions options_;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_RPC_COLLECTIVES_H_

// PrecheckSessionRequest: the limits of a Session request checked on its wire bytes, before
// protobuf parses it. Parsing allocates per element (a 1e6-tensor graph costs ~400 MB, a
// batch of 6e6 commands ~1.3 GB, both inside the 64 MiB message limit), so counts that the
// server would refuse anyway are refused before they cost that: commands per batch
// (kMaxBatchCommands), tensors and nodes per graph (rpc::kMaxGraphTensors/kMaxGraphNodes)
// and graph tensors per request (rpc::kMaxRequestGraphTensors). The scan skips everything
// else without copying. Thread-safe (no state).
#ifndef TENSORGRID_SERVER_REQUEST_PRECHECK_H_
#define TENSORGRID_SERVER_REQUEST_PRECHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace tg::server {

struct Precheck {
  uint64_t id = 0;      // the request's id, for the reply to a refused request.
  absl::Status status;  // INVALID_ARGUMENT naming the count and the limit; OK to parse.
};

// Scans the serialized SessionRequest in `in`. Bytes that are not a well-formed message
// pass (the parse that follows refuses them).
Precheck PrecheckSessionRequest(google::protobuf::io::ZeroCopyInputStream* in);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_REQUEST_PRECHECK_H_

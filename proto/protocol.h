// Constants of the tensorgrid.v1 protocol that client/ and server/ must agree on.
#ifndef TENSORGRID_PROTO_PROTOCOL_H_
#define TENSORGRID_PROTO_PROTOCOL_H_

#include <cstddef>
#include <cstdint>

namespace tg::rpc {

// Bumped on any incompatible change of tensorgrid.proto; checked by Hello together with
// tg::OpTableFingerprint().
inline constexpr uint32_t kProtocolVersion = 2;
// Compatible additions since kProtocolVersion, in the order they came, each numbered by the
// minor that brought it (wire values: never renumbered). HelloReply.protocol_minor is the newest
// minor a server has (an older server sends 0): a client uses an addition only when the server's
// minor has it, and otherwise does what it did before (a server also answers a command it does not
// know UNIMPLEMENTED). A new addition goes last; the list is emptied when kProtocolVersion is
// bumped.
enum ProtocolMinor : uint32_t {
  // WriteRows/ReadRows (2D reads and writes of a buffer's rows).
  kMinorRows = 1,
  // PeerPull.after / PeerCopyRequest.after (a pull waits at the source for the command that
  // writes what it reads).
  kMinorOrderedPull = 2,
  // Model loading from the server's own files: OpenModelFile, UploadHeader.model_file/
  // file_offset, UploadReply.source, HelloReply.has_cache/has_model_dir and
  // CacheStatsReply.model_file_bytes.
  kMinorModelFiles = 3,
  // AllReduce and PeerReduce (all-reduce among servers).
  kMinorCollectives = 4,
  // PeerPush, AwaitPush and PeerDeliver (a server pushes to another in its own command order).
  kMinorPush = 5,
  // UploadHeader.store and CacheStatsReply.cache_blobs (the server hashes and stores what a
  // client sends without a hash).
  kMinorStoreUnhashed = 6,
  // PeerReduceStream: servers send all-reduce pieces to each other on one stream per session
  // and peer (a server before it takes only PeerReduce calls, so the client runs all-reduces
  // on servers only when every one of them has this minor).
  kMinorReduceStream = 7,
  // FillPieces: the pieces a client knows the hash of, offered in one call (the server fills
  // those it has from its cache or its copy of the model file).
  kMinorFillPieces = 8,
};
// The minor this build speaks: the newest addition.
inline constexpr uint32_t kProtocolMinor = kMinorFillPieces;
// Default port of rpc-server.
inline constexpr int kDefaultPort = 50052;
// Bulk streams carry at most this much per message.
inline constexpr size_t kChunkBytes = size_t{4} << 20;
// Largest gRPC message either side accepts (a Compute with a big graph and inline data).
inline constexpr size_t kMaxMessageBytes = size_t{64} << 20;
// Largest payload sent inline on the Session stream (WriteRange, ReadRange, Compute
// inputs/outputs); larger transfers use Upload/Download.
inline constexpr size_t kMaxInlineBytes = size_t{8} << 20;
// Most pieces in one FillPieces call (about 100 bytes each on the wire): a client offers more
// in several calls, which the server serves at the same time.
inline constexpr size_t kMaxFillPieces = 1024;
// Most tensors in one GraphDesc.
inline constexpr size_t kMaxGraphTensors = size_t{1} << 18;
// Metadata key of the bearer token ("authorization: Bearer <token>").
inline constexpr char kAuthMetadataKey[] = "authorization";

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_PROTOCOL_H_

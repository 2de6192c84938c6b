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
  // UploadHeader.cache_proof: a cache hit needs proof that the client holds the bytes (a
  // client before it never gets one: it sends the bytes).
  kMinorCacheProof = 9,
  // UploadHeader.region: FillPieces writes only rows of a piece the server has (a device's
  // slice of a weight under --split-mode tensor), reading the whole piece to check its hash.
  kMinorPieceRegions = 10,
  // PeerLink: a server offers its peers a plain TCP link for small all-reduce pieces
  // (server/peer_links.h); a peer without it answers UNIMPLEMENTED and keeps the stream.
  kMinorPeerLinks = 11,
  // AllReduce.algorithm DIRECT (server/allreduce_schedule.h): a client asks for it only when
  // every server of the collective has this minor.
  kMinorDirectReduce = 12,
};
// The minor this build speaks: the newest addition.
inline constexpr uint32_t kProtocolMinor = kMinorDirectReduce;
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
// Most bytes one FillPieces call may fill (the server copies them from its disk or cache): a
// small request must not buy unbounded work. Clients offer at most 1 GiB per call
// (client/model_upload.cc kFillCallBytes, plus a piece of round-robin imbalance); a call
// over this is INVALID_ARGUMENT. A piece with a region counts its whole piece (the server reads
// all of it).
inline constexpr uint64_t kMaxFillBytes = uint64_t{2} << 30;
// Most tensors, and nodes, in one GraphDesc: a 70B llama's decode graph has a few thousand
// tensors (tensor parallelism adds a few per layer), so this leaves more than 10x headroom
// while a refused graph costs little to parse.
inline constexpr size_t kMaxGraphTensors = size_t{1} << 16;
inline constexpr size_t kMaxGraphNodes = size_t{1} << 16;
// A server session keeps at most this many decoded graphs, holding at most this many tensors
// in all (least recently used dropped first; also within the session's memory limit). A
// client names a graph by its key alone only while it is among the last half of each that it
// sent (client/sent_graphs.h), so the server surely still holds it. Tensor parallelism sends
// one graph per device for each stretch of a step between collectives (a 1B llama's decode
// step: about 47 per device; 16 remembered graphs had each one sent whole every step), hence
// the count; the tensors bound the memory (about 450 bytes each decoded: 240 MB).
inline constexpr size_t kGraphCacheGraphs = 1024;
inline constexpr size_t kGraphCacheTensors = size_t{1} << 19;
static_assert(kMaxGraphTensors <= kGraphCacheTensors / 2);
// Graph tensors in one Session request (a batch may carry a few full graphs): the service
// refuses a request over it before parsing it, bounding what one message costs to parse.
inline constexpr size_t kMaxRequestGraphTensors = 2 * kMaxGraphTensors;
// Metadata key of the bearer token ("authorization: Bearer <token>").
inline constexpr char kAuthMetadataKey[] = "authorization";
// Trailing metadata of a Session refused RESOURCE_EXHAUSTED because the server is full: the
// sessions open and its --max-sessions, in decimal (the typed form of the refusal; clients
// read these, not the message).
inline constexpr char kServerFullSessionsKey[] = "tg-sessions";
inline constexpr char kServerFullMaxSessionsKey[] = "tg-max-sessions";

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_PROTOCOL_H_

#include "server/request_precheck.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "proto/protocol.h"
#include "server/graph_decoder.h"
#include "server/session.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// The counts of one request, as the scan goes.
struct Counts {
  uint64_t request_tensors = 0;
};

// A refusal of the limits the parsed path checks too, saying it came before the parse.
absl::Status BeforeParsing(const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(s.message(), " (refused before parsing)"));
}

// Enters the length-delimited field just read; false on malformed bytes.
bool Enter(CodedInputStream* in, CodedInputStream::Limit* limit) {
  uint32_t length;
  if (!in->ReadVarint32(&length)) return false;
  *limit = in->PushLimit(static_cast<int>(length));
  return true;
}

// A GraphDesc: counts tensors and nodes (packed or not), all of them, so that the error
// names the count (counting is cheap: nothing is allocated).
absl::Status ScanGraph(CodedInputStream* in, Counts* counts) {
  uint64_t tensors = 0, nodes = 0;
  while (uint32_t tag = in->ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto type = WireFormatLite::GetTagWireType(tag);
    if (field == pb::GraphDesc::kNodesFieldNumber &&
        type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      CodedInputStream::Limit limit;
      if (!Enter(in, &limit)) break;
      uint32_t id;
      while (in->BytesUntilLimit() > 0 && in->ReadVarint32(&id)) ++nodes;
      in->PopLimit(limit);
      continue;
    }
    if (field == pb::GraphDesc::kTensorsFieldNumber) ++tensors;
    if (field == pb::GraphDesc::kNodesFieldNumber) ++nodes;
    if (!WireFormatLite::SkipField(in, tag)) break;
  }
  if (absl::Status s = CheckGraphSize(tensors, nodes); !s.ok()) return BeforeParsing(s);
  counts->request_tensors += tensors;
  if (counts->request_tensors > rpc::kMaxRequestGraphTensors) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request carries %d graph tensors or more, more than the %d one request may carry; "
        "send the graphs in several requests (refused before parsing)",
        counts->request_tensors, rpc::kMaxRequestGraphTensors));
  }
  return absl::OkStatus();
}

// A Compute: its graph, if any.
absl::Status ScanCompute(CodedInputStream* in, Counts* counts) {
  while (uint32_t tag = in->ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == pb::Compute::kGraphFieldNumber &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      CodedInputStream::Limit limit;
      if (!Enter(in, &limit)) return absl::OkStatus();
      if (absl::Status s = ScanGraph(in, counts); !s.ok()) return s;
      in->PopLimit(limit);
    } else if (!WireFormatLite::SkipField(in, tag)) {
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status ScanRequest(CodedInputStream* in, bool top, uint64_t* id, Counts* counts);

// A Batch: counts its commands and scans each (a batch in a batch is refused later). Past
// the cap, the rest are only counted, for the error.
absl::Status ScanBatch(CodedInputStream* in, Counts* counts) {
  uint64_t commands = 0;
  while (uint32_t tag = in->ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == pb::Batch::kCommandsFieldNumber &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        ++commands <= static_cast<uint64_t>(kMaxBatchCommands)) {
      CodedInputStream::Limit limit;
      if (!Enter(in, &limit)) break;
      uint64_t ignored;
      if (absl::Status s = ScanRequest(in, /*top=*/false, &ignored, counts); !s.ok()) return s;
      in->PopLimit(limit);
    } else if (!WireFormatLite::SkipField(in, tag)) {
      break;
    }
  }
  if (absl::Status s = CheckBatchSize(commands); !s.ok()) return BeforeParsing(s);
  return absl::OkStatus();
}

absl::Status ScanRequest(CodedInputStream* in, bool top, uint64_t* id, Counts* counts) {
  while (uint32_t tag = in->ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (field == pb::SessionRequest::kIdFieldNumber &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT) {
      if (!in->ReadVarint64(id)) return absl::OkStatus();
    } else if ((field == pb::SessionRequest::kComputeFieldNumber ||
                (top && field == pb::SessionRequest::kBatchFieldNumber)) &&
               delimited) {
      CodedInputStream::Limit limit;
      if (!Enter(in, &limit)) return absl::OkStatus();
      absl::Status s = field == pb::SessionRequest::kBatchFieldNumber ? ScanBatch(in, counts)
                                                                      : ScanCompute(in, counts);
      if (!s.ok()) return s;
      in->PopLimit(limit);
    } else if (!WireFormatLite::SkipField(in, tag)) {
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace

Precheck PrecheckSessionRequest(google::protobuf::io::ZeroCopyInputStream* in) {
  CodedInputStream coded(in);
  Precheck result;
  Counts counts;
  result.status = ScanRequest(&coded, /*top=*/true, &result.id, &counts);
  return result;
}

}  // namespace tg::server

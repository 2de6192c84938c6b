// When a CUDA stream replays a captured CUDA graph instead of launching a graph's kernels one
// by one (a decode step then costs one launch): the decisions as plain C++, unit-tested
// without a GPU; cuda_stream.cc makes the CUDA calls.
//
// A graph's kernels and their arguments follow from each compute node's op, parameters and
// the views (address, type, shape, strides) of its result and sources; nothing reads tensor
// contents on the host. So a capture is a valid replay for any later run whose nodes all
// match those records: the same topology (uid), shapes and addresses. Inputs written into
// the same addresses each step (LlamaSession reuses its graph for 256 positions) change
// nothing. A changed op parameter or wiring (another uid), shape, or address (a buffer that
// was reallocated, a graph rebuilt elsewhere) fails the match and the capture is dropped.
//
// Per graph object (keyed by address, verified by the records):
//   first run          -> eager, remembered as warm (kernels loaded, scratch sized);
//   second matching run -> capture, then launch the capture;
//   later matching runs -> replay;
//   a run that does not match -> the capture is invalidated, and the run counts as a first.
// A graph that the dispatcher marks uncapturable (a prompt-sized product, or a node whose
// kernel reads device results on the host mid-graph) always runs eagerly; a capture that
// CUDA refuses marks that graph eager until it changes; after kMaxCaptureFailures refusals
// the stream stops capturing. At most max_graphs captures are kept (least recently used
// goes). Not thread-safe (one per stream).
#ifndef TENSORGRID_BACKENDS_CUDA_GRAPH_CAPTURE_H_
#define TENSORGRID_BACKENDS_CUDA_GRAPH_CAPTURE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/graph.h"
#include "core/tensor.h"

namespace tg::cuda {

// Captures a stream keeps. A tensor-parallel rank runs one small graph per collective step
// (two per layer: 65 for a 32-layer model), each of which must stay captured.
inline constexpr int kMaxCapturedGraphs = 256;
// CUDA refusals (capture or instantiation errors) after which a stream stops capturing.
inline constexpr int kMaxCaptureFailures = 4;

// The records of a graph's compute nodes (view ops and empty nodes launch nothing).
class GraphSignature {
 public:
  static GraphSignature Of(const Graph& graph);
  // True when `graph` has the same compute nodes with the same records (compared in place).
  bool Matches(const Graph& graph) const;
  size_t n_nodes() const { return records_.size(); }

 private:
  struct View {
    const void* data;
    int32_t type;
    int64_t ne[kMaxDims];
    size_t nb[kMaxDims];
  };
  struct Record {
    int32_t op;
    int32_t params[kMaxOpParams];
    View dst;
    View src[kMaxSrc];
  };
  static void Fill(const Tensor& node, Record* r);

  std::vector<Record> records_;
};

// True for nodes that launch kernels (not view ops, not empty).
bool LaunchesWork(const Tensor& node);

// The CUDA side of a capture (an instantiated graph and what it owns); destroyed when the
// capture is dropped.
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
};

class GraphCaptureCache {
 public:
  enum class Action { kEager, kCapture, kReplay };
  struct Decision {
    Action action = Action::kEager;
    CapturedGraph* captured = nullptr;  // kReplay: what to launch.
  };
  struct Stats {
    int64_t eager = 0;
    int64_t captures = 0;
    int64_t replays = 0;
    int64_t invalidations = 0;  // captures dropped because their graph changed.
    int64_t evictions = 0;      // captures dropped for room.
    int64_t failures = 0;       // captures CUDA refused.
  };

  explicit GraphCaptureCache(bool enabled, int max_graphs = kMaxCapturedGraphs)
      : enabled_(enabled), max_graphs_(max_graphs < 1 ? 1 : max_graphs) {}

  // What to do with `graph` now. capturable: false when a node must not be captured.
  Decision Decide(const Graph& graph, bool capturable);
  // After kCapture: the capture succeeded (captured is launched by the caller) or CUDA
  // refused it (nullptr: the graph runs eagerly until it changes).
  void Captured(const Graph& graph, std::unique_ptr<CapturedGraph> captured);
  // Drops every capture (the stream's state they relied on is going away).
  void Clear();

  bool enabled() const { return enabled_ && failures_ < kMaxCaptureFailures; }
  int n_captured() const;
  const Stats& stats() const { return stats_; }

 private:
  enum class State { kWarm, kCaptured, kRefused };
  struct Entry {
    GraphSignature signature;
    State state = State::kWarm;
    std::unique_ptr<CapturedGraph> captured;
    uint64_t last_use = 0;
  };
  void EvictOne(const Graph* keep);

  bool enabled_;
  int max_graphs_;
  int failures_ = 0;
  uint64_t clock_ = 0;
  absl::flat_hash_map<const Graph*, Entry> entries_;
  Stats stats_;
};

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_GRAPH_CAPTURE_H_

// The CUDA backend's speed choices that a GPU session may want to tune without a rebuild:
// each default is a named constant with its reason, and each can be overridden by an
// environment variable (read once, on first use). Pure data; CudaTuningFromEnv is pure and
// CurrentCudaTuning is thread-safe (computed once).
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_TUNING_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_TUNING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tg::cuda {

// MUL_MAT of quantized weights (every quantized type) with more activation columns than the
// matrix-vector kernel takes runs the int8 tile kernel (mmq.cu) up to this many columns, and
// dequantize-to-F16 plus a cuBLAS GEMM above. Up to a default prompt batch (512 tokens) the
// F16 copy of the weights (2 bytes per weight written and read again, 3.5x a Q4_0 weight's
// own bytes) costs more than the GEMM gains; beyond it cuBLAS's tuned tiles take over.
inline constexpr int64_t kDefaultMmqMaxBatch = 512;
// A decode-sized graph (no product of more tokens than this) is captured as a CUDA graph:
// the matrix-vector kernel's column limit, so a captured graph never holds cuBLAS calls or
// weights dequantized into scratch (prefill graphs are long-running kernels where one launch
// per node costs nothing, and their scratch would stay pinned to the captured graph).
inline constexpr int64_t kDefaultGraphMaxTokens = 8;
// FLASH_ATTN with at least this many queries (a prompt) and F16 K/V of head size 64 or 128
// runs the tensor-core kernel (flash_attn_mma.cu): below, its 64-query tiles would be mostly
// empty and the one-block-per-query kernel is as fast.
inline constexpr int64_t kDefaultFlashAttnMmaMinQueries = 32;

struct CudaTuning {
  int64_t mmq_max_batch = kDefaultMmqMaxBatch;                  // TG_CUDA_MMQ_MAX_BATCH (0: off)
  int64_t graph_max_tokens = kDefaultGraphMaxTokens;            // TG_CUDA_GRAPH_MAX_TOKENS
  int64_t fa_mma_min_queries = kDefaultFlashAttnMmaMinQueries;  // TG_CUDA_FA_MMA_MIN_QUERIES
  bool graphs = true;  // TG_CUDA_GRAPHS=0: never capture CUDA graphs.
  bool fusion = true;  // TG_CUDA_FUSION=0: one kernel per node, no fused kernels.
};

// The tuning with the variables `getenv` returns applied; a value that is not a number in
// range keeps the default and adds a line naming the variable, the value and the range to
// *notes (nullptr: dropped).
CudaTuning CudaTuningFromEnv(const std::function<const char*(const char*)>& getenv,
                             std::vector<std::string>* notes);

// The process's tuning, from the environment on first use (notes go to stderr once).
const CudaTuning& CurrentCudaTuning();

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_TUNING_H_

// TG_HD marks the small inline functions shared by the CUDA kernels (.cu, compiled by nvcc for
// host and device) and by the host code and unit tests (.cc, compiled by the C++ compiler):
// index math, block layouts and numerics are written once, so the tests that run without a
// GPU check the very code the kernels execute. Stateless; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_HOST_DEVICE_H_
#define TENSORGRID_BACKENDS_CUDA_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define TG_HD __host__ __device__ __forceinline__
#else
#define TG_HD inline
#endif

#endif  // TENSORGRID_BACKENDS_CUDA_HOST_DEVICE_H_

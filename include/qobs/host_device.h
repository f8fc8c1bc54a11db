// QOBS_HD marks the element arithmetic that compiles for the host and, under nvcc, for
// CUDA devices too (__host__ __device__): the rounding primitives of formats.h and the
// per-element steps the kernels share, so that the CPU and CUDA paths run the same
// source and give the same bits. Outside nvcc it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define QOBS_HD __host__ __device__
#else
#define QOBS_HD
#endif

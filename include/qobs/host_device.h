// QOBS_HD marks the element arithmetic that compiles for the host and, under nvcc, for
// CUDA devices too (__host__ __device__): the rounding primitives of formats.h and the
// per-element steps the kernels share, so that the CPU and CUDA paths run the same
// source and give the same bits. Outside nvcc it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define QOBS_HD __host__ __device__
/// Before a QOBS_HD function template whose argument decides where it may run (a functor
/// with a device-only atomic, or a host-only one in the tests): nvcc checks each
/// instantiation where it is used instead of rejecting the template.
#define QOBS_NO_EXEC_CHECK _Pragma("nv_exec_check_disable")
#else
#define QOBS_HD
#define QOBS_NO_EXEC_CHECK
#endif

# Fast kernels: Highway SIMD with runtime dispatch (AVX2 / AVX-512, the portable fused
# scalar path elsewhere). Included by src/CMakeLists.txt.
find_package(hwy 1.0 REQUIRED)
list(APPEND QOBS_KERNEL_SOURCES
     kernels/simd/simd_level.cc
     kernels/simd/libm_powf.cc
     kernels/simd/pow_simd.cc
     kernels/simd/block_errors_simd.cc
     kernels/simd/poly_sums_simd.cc
     kernels/simd/poly_batch_simd.cc
     kernels/simd/exact_batch_simd.cc
     kernels/simd/shrunk_qparams_simd.cc
     kernels/simd/minmax_simd.cc
     kernels/simd/error_sums_simd.cc
     kernels/simd/qdq_simd.cc
     kernels/simd/pack_simd.cc
     kernels/simd/lsq_error_simd.cc
     kernels/simd/lsq_candidates_simd.cc
     kernels/qdq_fast.cc
     kernels/qparams_fast.cc
     kernels/simd/pow_poly.cc
     kernels/search/plan.cc
     kernels/search/exact.cc
     kernels/search/certified.cc
     kernels/search/batch.cc
     kernels/search/grid_search.cc
     kernels/search/minmax.cc)
# dispatch.cc routes to the fast paths only when they are built (QOBS_FAST_KERNELS=OFF
# leaves the scalar references alone).
if(NOT TARGET qobs_fast_kernels_enabled)
  add_library(qobs_fast_kernels_enabled INTERFACE)
  target_compile_definitions(qobs_fast_kernels_enabled INTERFACE QOBS_HAVE_FAST_KERNELS=1)
endif()
list(APPEND QOBS_KERNEL_DEPS hwy::hwy ${CMAKE_DL_LIBS} qobs_fast_kernels_enabled)

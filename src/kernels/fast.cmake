# Fast kernels: Highway SIMD with runtime dispatch (AVX2 / AVX-512, the portable fused
# scalar path elsewhere). Included by src/CMakeLists.txt.
find_package(hwy 1.0 REQUIRED)
list(APPEND QOBS_KERNEL_SOURCES
     kernels/simd/simd_level.cc
     kernels/pow/libm_powf.cc
     kernels/pow/pow_simd.cc
     kernels/grid_search/block_errors_simd.cc
     kernels/grid_search/poly_sums_simd.cc
     kernels/grid_search/poly_batch_simd.cc
     kernels/grid_search/exact_batch_simd.cc
     kernels/qparams/qparams_simd.cc
     kernels/minmax/minmax_simd.cc
     kernels/stats/error_sums_simd.cc
     kernels/qdq/qdq_simd.cc
     kernels/pack/pack_simd.cc
     kernels/lsq/lsq_error_simd.cc
     kernels/lsq/lsq_candidates_simd.cc
     kernels/qdq/qdq_cpu.cc
     kernels/qparams/qparams_cpu.cc
     kernels/grid_search/pow_poly.cc
     kernels/grid_search/plan.cc
     kernels/grid_search/exact.cc
     kernels/grid_search/certified.cc
     kernels/grid_search/batch.cc
     kernels/grid_search/grid_search_cpu.cc
     kernels/minmax/minmax_cpu.cc)
# dispatch.cc routes to the fast paths only when they are built (QOBS_FAST_KERNELS=OFF
# leaves the scalar references alone).
if(NOT TARGET qobs_fast_kernels_enabled)
  add_library(qobs_fast_kernels_enabled INTERFACE)
  target_compile_definitions(qobs_fast_kernels_enabled INTERFACE QOBS_HAVE_FAST_KERNELS=1)
endif()
list(APPEND QOBS_KERNEL_DEPS hwy::hwy ${CMAKE_DL_LIBS} qobs_fast_kernels_enabled)

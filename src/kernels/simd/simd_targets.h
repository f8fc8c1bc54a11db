// The Highway targets every vector kernel file is compiled for: AVX2 and AVX-512 (the
// kernels' lane layouts assume 8 or 16 floats; machines without AVX2 run the fused
// scalar path). Included first, before <hwy/foreach_target.h> reads the list.
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif

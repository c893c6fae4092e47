// The column pass of a separable two-tap (linear) float32 Resize (ops/linalg.cpp's ResizeKernel):
// y[j] = w[2j] * v[o[2j]] + w[2j + 1] * v[o[2j + 1]] for the OW output columns of one row, v the
// row after the vertical pass. Written as a gather per output it cost ~3.4 cycles a value (an
// M-LSD-like line detector's align_corners 2x upsamplings of 64 x 40x40 and 16 x 80x80: ~370 us
// each, ~0.9 ns a value), since align_corners' weights change from column to column. Here, per
// block of 16 output columns, the taps are two lane permutes of a 32-float window of v starting at
// the block's first tap (built once at prepare: the window's start, both taps' lane indices and
// weights), then two multiplies: 16 values in ~8 instructions. Where a block's taps do not fit
// one 32-float window (downsampling by more than ~2x) setup says so and the caller keeps its loop.
// The resampling kernels share the pools' translation units (pool.cpp, x86/pool_avx512.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu.h"

namespace jiffy::kernels {

struct ResizeCols2 {
    int64_t OW = 0;
    std::vector<int32_t> base;  // per block of 16 columns: the window's first element of v
    std::vector<int32_t> idx;   // per block: 16 lane indices of tap 0, then 16 of tap 1 (0..31)
    std::vector<float> w;       // per block: 16 weights of tap 0, then 16 of tap 1 (0 past OW)
};
// off / w: two taps per output column (column indices into v, weights). False where some block's
// taps span more than 32 floats.
bool resize_cols2_setup(const int64_t* off, const float* w, int64_t OW, ResizeCols2* p);
// v must have 32 readable floats past the last tap's column (the caller pads its row buffer).
using ResizeCols2Fn = void (*)(const ResizeCols2& p, const float* v, float* y);
// The vector kernel for isa (AVX-512), else nullptr: the caller's per-column loop.
ResizeCols2Fn resize_cols2_for(Isa isa);
void resize_cols2_avx512(const ResizeCols2& p, const float* v, float* y);  // x86-64 only
// The reference (any ISA; the tests' oracle): the same products in the same order.
void resize_cols2_scalar(const ResizeCols2& p, const float* v, float* y);

}  // namespace jiffy::kernels

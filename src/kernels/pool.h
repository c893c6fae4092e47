// 2-D float32 MaxPool / AveragePool over NCHW planes (the pools' fast path). Separable: per
// output row, the valid input rows are reduced into a row buffer padded left and right with the
// reduction's identity (-inf / 0), then each output column reduces kw entries of that buffer at
// stride sw (compiled for kw 1-3, sw 1-2, and kw 5, sw 1; dilation 1; any other width through a
// generic loop).
// Padding, ceil_mode and dilation are resolved at prepare into per-row tables (Pool2d below), so
// every window shape ONNX allows runs here except MaxPool's Indices output. Max ignores NaN like
// the reference (a NaN never wins `v > best`); Average divides the float sum by the row count
// times the column count (padding counted or not, as count_include_pad says).
//   pool2d_for(isa)(p, x, y, planes, scratch)   scratch: pool2d_scratch_floats(p) floats
// Loops in kernels/pool_impl.h, auto-vectorized per ISA (pool.cpp baseline, x86/pool_avx2.cpp,
// x86/pool_avx512.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu.h"

namespace jiffy::kernels {

struct Pool2d {
    bool max = true;
    int64_t H = 1, W = 1, OH = 1, OW = 1;
    int64_t kw = 1, sw = 1, dw = 1, pw = 0;  // horizontal window, stride, dilation, left pad
    int64_t dh = 1;                          // vertical dilation
    int64_t Wp = 1;                          // padded row length (left pad + W + right pad)
    // Per output row: first valid input row, number of valid rows (taps), row count for Average.
    std::vector<int64_t> row_first, row_n;
    std::vector<float> row_cnt;
    // Per output column: column count for Average (valid taps, or taps inside the padded range).
    std::vector<float> col_cnt;
    // MaxPool windows that tile the input exactly (kernel = stride, no padding or dilation, H and
    // W multiples of the kernel): 2 for 2x2, 1 for 1x2, else 0. Such a pool runs as one flat loop
    // over all planes' output rows (no per-row set-up: the small planes of audio CNNs, e.g.
    // embedding_model's 96x6x2, spent most of their time there).
    int tile_rows = 0;
};

// Builds the tables. Per dim: input size, output size, kernel, stride, dilation, begin pad, end
// pad (as forward_geometry computes them). False when a window lies entirely in the padding.
bool pool2d_setup(bool max, bool count_include_pad, const int64_t in[2], const int64_t out[2],
                  const int64_t k[2], const int64_t s[2], const int64_t d[2], const int64_t pb[2],
                  const int64_t pe[2], Pool2d* p);
constexpr int64_t kPoolTileFloats = 2048;  // rows reduced per block of a 2x2 tiled pool (8 KiB)
inline int64_t pool2d_scratch_floats(const Pool2d& p) {
    return p.Wp + 16 > kPoolTileFloats + p.W ? p.Wp + 16 : kPoolTileFloats + p.W;
}

using Pool2dFn = void (*)(const Pool2d& p, const float* x, float* y, int64_t planes, float* scratch);
Pool2dFn pool2d_for(Isa isa);
void pool2d_scalar(const Pool2d&, const float*, float*, int64_t, float*);
void pool2d_avx2(const Pool2d&, const float*, float*, int64_t, float*);
void pool2d_avx512(const Pool2d&, const float*, float*, int64_t, float*);

// 2-D MaxPool / AveragePool over channels-last images (x: n x H x W x C, y: n x OH x OW x C):
// pools inside channels-last conv chains (BlazeFace's max-pooled skips, YuNet's stage pools;
// passes::layout_nhwc) run there instead of between two layout conversions. Per output pixel,
// the valid taps (padding, ceil_mode and dilation resolved at prepare into per-row and per-column
// tables) are reduced channel-vector by channel-vector: Max as `v > best` from -inf (a NaN never
// wins, as in the NCHW kernels), Average as a float sum times 1 / (row factor x column factor).
// pool_nhwc_run in kernels/pool_impl.h, auto-vectorized per ISA.
struct PoolNhwc {
    bool max = true;
    int64_t H = 1, W = 1, C = 1, OH = 1, OW = 1, dh = 1, dw = 1;
    std::vector<int64_t> row_first, row_n;  // per output row: first valid input row, valid taps
    std::vector<int64_t> col_first, col_n;  // per output column: the same for columns
    std::vector<float> row_div, col_div;    // Average: the divisor's row and column factors
};
// Builds the tables (arguments as pool2d_setup's; C channels). False when a window lies entirely
// in the padding.
bool pool_nhwc_setup(bool max, bool count_include_pad, const int64_t in[2], const int64_t out[2],
                     const int64_t k[2], const int64_t s[2], const int64_t d[2], const int64_t pb[2],
                     const int64_t pe[2], int64_t C, PoolNhwc* p);
// Output rows [r0, r1) of the n images' n x OH rows (x and y: the whole tensors; a thread's part).
using PoolNhwcFn = void (*)(const PoolNhwc& p, const float* x, float* y, int64_t r0, int64_t r1);
PoolNhwcFn pool_nhwc_for(Isa isa);
void pool_nhwc_scalar(const PoolNhwc&, const float*, float*, int64_t, int64_t);
void pool_nhwc_avx2(const PoolNhwc&, const float*, float*, int64_t, int64_t);
void pool_nhwc_avx512(const PoolNhwc&, const float*, float*, int64_t, int64_t);

// GlobalAveragePool over `planes` contiguous planes of `size` floats: y[q] = (sum of plane q) /
// size, summed in float. The vector kernels take a group of one vector's width of planes at once
// (16 on AVX-512, 8 on AVX2): each plane is read front to back into two accumulators (a masked
// load for its tail), then one transpose-and-add tree turns the group's accumulators into a
// vector of plane sums, scaled and stored at once. Before (double sums, one plane at a time),
// MobileNetV3's 672x14x14 pool took ~23 us, now ~7.5; see docs/benchmarks.md "MobileNetV3".
//   global_avg_for(isa)(x, y, planes, size)
using GlobalAvgFn = void (*)(const float* x, float* y, int64_t planes, int64_t size);
GlobalAvgFn global_avg_for(Isa isa);
void global_avg_scalar(const float*, float*, int64_t, int64_t);
void global_avg_avx2(const float*, float*, int64_t, int64_t);
void global_avg_avx512(const float*, float*, int64_t, int64_t);

// GlobalAveragePool of channels-last images (x: n x size x C): global_avg_nhwc_run in
// kernels/pool_impl.h, per ISA.
using GlobalAvgNhwcFn = void (*)(const float* x, float* y, int64_t n, int64_t size, int64_t C);
GlobalAvgNhwcFn global_avg_nhwc_for(Isa isa);
void global_avg_nhwc_scalar(const float*, float*, int64_t, int64_t, int64_t);
void global_avg_nhwc_avx2(const float*, float*, int64_t, int64_t, int64_t);
void global_avg_nhwc_avx512(const float*, float*, int64_t, int64_t, int64_t);

}  // namespace jiffy::kernels

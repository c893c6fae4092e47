// The 2-D float pool kernel (src/kernels/pool.h) on every ISA this CPU has, against a direct
// transcription of the ONNX MaxPool / AveragePool definition (double sums), on odd shapes with
// padding, strides, dilation, ceil_mode and count_include_pad both ways, NaN and +-inf inputs.
// Kernel-level only (no engine), so it also runs cross-compiled under qemu-aarch64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu.h"
#include "kernels/pool.h"
#include "kernels/resize.h"

using namespace jiffy::kernels;

namespace {

std::vector<Isa> pool_isas() {
    std::vector<Isa> r{Isa::kScalar};
    if (int(cpu_isa()) >= int(Isa::kAvx2)) r.push_back(Isa::kAvx2);
    if (int(cpu_isa()) >= int(Isa::kAvx512)) r.push_back(Isa::kAvx512);
    if (cpu_isa() == Isa::kNeon) r.push_back(Isa::kNeon);
    return r;
}

struct PoolCase {
    int64_t C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
    bool ceil;
};

std::string pc_str(const PoolCase& c) {
    char b[200];
    std::snprintf(b, sizeof(b), "C%ld %ldx%ld k%ldx%ld s%ld,%ld d%ld,%ld p%ld,%ld,%ld,%ld%s", long(c.C),
                  long(c.H), long(c.W), long(c.kh), long(c.kw), long(c.sh), long(c.sw), long(c.dh),
                  long(c.dw), long(c.pt), long(c.pl), long(c.pb), long(c.pr), c.ceil ? " ceil" : "");
    return b;
}

int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, bool ceil) {
    const int64_t num = in + pb + pe - ((k - 1) * d + 1);
    int64_t o = ceil ? (num + s - 1) / s + 1 : num / s + 1;
    if (ceil && (o - 1) * s >= in + pb) --o;
    return o;
}

// ONNX definition: the window of output (i, j) covers rows i*sh - pt + a*dh, cols j*sw - pl + b*dw;
// Max skips NaN (the engine's reference does); Average divides by the taps inside the input, or
// (count_include_pad) inside the padded input.
std::vector<float> pool_ref(const PoolCase& c, bool max, bool include_pad, const std::vector<float>& x,
                            int64_t OH, int64_t OW) {
    std::vector<float> y(size_t(c.C * OH * OW));
    for (int64_t ch = 0; ch < c.C; ++ch)
        for (int64_t i = 0; i < OH; ++i)
            for (int64_t j = 0; j < OW; ++j) {
                double acc = 0, best = -INFINITY;
                int64_t n = 0, npad = 0;
                for (int64_t a = 0; a < c.kh; ++a)
                    for (int64_t b = 0; b < c.kw; ++b) {
                        const int64_t r = i * c.sh - c.pt + a * c.dh, q = j * c.sw - c.pl + b * c.dw;
                        if (r < c.H + c.pb && q < c.W + c.pr) ++npad;
                        if (r < 0 || r >= c.H || q < 0 || q >= c.W) continue;
                        const float v = x[size_t((ch * c.H + r) * c.W + q)];
                        ++n;
                        acc += v;
                        if (v > best) best = v;
                    }
                y[size_t((ch * OH + i) * OW + j)] =
                    max ? float(best) : float(acc / double(include_pad ? npad : n));
            }
    return y;
}

void check_case(const PoolCase& c, bool max, bool include_pad, bool edge_values) {
    const int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb, c.ceil);
    const int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr, c.ceil);
    std::vector<float> x(size_t(c.C * c.H * c.W));
    uint32_t s = 12345u + uint32_t(c.H * 31 + c.W);
    for (auto& v : x) {
        s = s * 1664525u + 1013904223u;
        v = float(s >> 8) / float(1 << 24) * 4.0f - 2.0f;
    }
    if (edge_values && x.size() > 8) {
        x[1] = std::numeric_limits<float>::quiet_NaN();
        x[3] = INFINITY;
        x[x.size() - 2] = -INFINITY;
    }
    const int64_t in[2] = {c.H, c.W}, out[2] = {OH, OW}, k[2] = {c.kh, c.kw}, st[2] = {c.sh, c.sw},
                  d[2] = {c.dh, c.dw}, pb[2] = {c.pt, c.pl}, pe[2] = {c.pb, c.pr};
    Pool2d p;
    ASSERT_TRUE(pool2d_setup(max, include_pad, in, out, k, st, d, pb, pe, &p)) << pc_str(c);
    const std::vector<float> want = pool_ref(c, max, include_pad, x, OH, OW);
    for (Isa isa : pool_isas()) {
        std::vector<float> y(want.size() + 1, 7.0f), scratch(size_t(pool2d_scratch_floats(p)));
        pool2d_for(isa)(p, x.data(), y.data(), c.C, scratch.data());
        EXPECT_EQ(y.back(), 7.0f) << "wrote past the output";
        for (size_t i = 0; i < want.size(); ++i) {
            const float g = y[i], w = want[i];
            const std::string what = pc_str(c) + (max ? " max" : include_pad ? " avg incl" : " avg excl") +
                                     " isa " + isa_name(isa) + " element " + std::to_string(i);
            if (std::isnan(w) || std::isinf(w)) {
                ASSERT_TRUE((std::isnan(g) && std::isnan(w)) || g == w) << what << ": " << g << " vs " << w;
            } else {
                ASSERT_NEAR(g, w, 1e-5 * (1 + std::abs(w))) << what;
            }
        }
    }
}

const std::vector<PoolCase>& pool_cases() {
    static const std::vector<PoolCase> cases = {
        // the models' shapes: embedding_model, ppocr_cls, ResNet-50 stem (scaled down), ppocrv4_rec
        {3, 72, 32, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, false},
        {2, 32, 16, 1, 2, 1, 2, 1, 1, 0, 0, 0, 0, false},
        {5, 2, 96, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, false},
        {2, 23, 23, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, false},
        {3, 8, 40, 3, 2, 1, 2, 1, 1, 1, 0, 1, 0, false},
        // odd sizes, every kw 1-4 x stride 1-3, padding, ceil_mode, dilation, 1-D (H = 1)
        {1, 7, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, false},
        {2, 9, 35, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false},
        {2, 9, 35, 2, 2, 1, 1, 1, 1, 0, 0, 1, 1, false},
        {2, 11, 37, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, true},
        {2, 10, 36, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, true},
        {2, 13, 29, 1, 2, 1, 2, 1, 1, 0, 1, 0, 0, true},
        {1, 17, 33, 4, 4, 3, 3, 1, 1, 2, 1, 1, 2, false},
        {1, 17, 33, 5, 1, 2, 1, 1, 1, 2, 0, 2, 0, false},
        {1, 12, 31, 2, 3, 1, 3, 2, 2, 1, 2, 0, 1, true},
        {1, 12, 31, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, false},
        {3, 1, 50, 1, 3, 1, 2, 1, 1, 0, 1, 0, 1, false},
        {3, 1, 67, 1, 5, 1, 1, 1, 1, 0, 2, 0, 2, true},
        {2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false},
        // YOLO's SPPF (5x5, stride 1, pad 2: the compiled kw 5 and the 4- / 5-row vertical pass)
        {4, 10, 10, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, false},
        {3, 9, 21, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, true},
    };
    return cases;
}

TEST(PoolKernel, MaxMatchesDefinition) {
    for (const PoolCase& c : pool_cases()) check_case(c, true, false, false);
}

TEST(PoolKernel, AverageMatchesDefinitionBothPadCounts) {
    for (const PoolCase& c : pool_cases()) {
        check_case(c, false, false, false);
        check_case(c, false, true, false);
    }
}

TEST(PoolKernel, EdgeValues) {
    for (const PoolCase& c : pool_cases()) {
        check_case(c, true, false, true);
        check_case(c, false, true, true);
    }
}

// Exactly tiling 2x2 / 1x2 MaxPools (Pool2d::tile_rows) run as one flat loop over all planes'
// rows, in blocks of kPoolTileFloats: bitwise equal to the general row path (tile_rows forced
// to 0), with NaN, +-inf and both signed zeros in the input, on widths 2..34 and several blocks.
TEST(PoolKernel, TiledMaxEqualsRowPathBitwise) {
    struct S { int64_t C, H, W, kh; };
    const S shapes[] = {{96, 6, 2, 2}, {72, 28, 8, 2}, {96, 10, 4, 1}, {48, 32, 16, 1},
                        {70, 36, 16, 2}, {3, 4, 34, 2}, {5, 3, 6, 1}, {1, 2, 2, 2}};
    for (const S& c : shapes) {
        const int64_t n = c.C * c.H * c.W;
        std::vector<float> x(static_cast<size_t>(n));
        uint32_t s = 777u + uint32_t(n);
        for (auto& v : x) {
            s = s * 1664525u + 1013904223u;
            const uint32_t r = s >> 8;
            v = r % 13 == 0 ? -0.0f : r % 13 == 1 ? 0.0f : float(r) / float(1 << 24) * 4.0f - 2.0f;
        }
        for (size_t i = 5; i < x.size(); i += 97) x[i] = std::numeric_limits<float>::quiet_NaN();
        for (size_t i = 11; i < x.size(); i += 131) x[i] = i % 2 ? INFINITY : -INFINITY;
        const int64_t in[2] = {c.H, c.W}, out[2] = {c.H / c.kh, c.W / 2}, k[2] = {c.kh, 2}, st[2] = {c.kh, 2},
                      d[2] = {1, 1}, z[2] = {0, 0};
        Pool2d p;
        ASSERT_TRUE(pool2d_setup(true, false, in, out, k, st, d, z, z, &p));
        ASSERT_EQ(p.tile_rows, int(c.kh)) << c.C << "x" << c.H << "x" << c.W;
        Pool2d rowwise = p;
        rowwise.tile_rows = 0;
        const size_t ny = size_t(c.C * out[0] * out[1]);
        for (Isa isa : pool_isas()) {
            std::vector<float> want(ny + 1, 7.0f), got(ny + 1, 7.0f), scratch(size_t(pool2d_scratch_floats(p)));
            pool2d_for(isa)(rowwise, x.data(), want.data(), c.C, scratch.data());
            pool2d_for(isa)(p, x.data(), got.data(), c.C, scratch.data());
            EXPECT_EQ(std::memcmp(want.data(), got.data(), (ny + 1) * sizeof(float)), 0)
                << c.C << "x" << c.H << "x" << c.W << " k" << c.kh << "x2 isa " << isa_name(isa);
        }
    }
    // Not exact tilings: a ragged width, stride != kernel, padding.
    const int64_t in[2] = {4, 9}, out[2] = {2, 4}, k[2] = {2, 2}, st[2] = {2, 2}, d[2] = {1, 1}, z[2] = {0, 0};
    Pool2d p;
    ASSERT_TRUE(pool2d_setup(true, false, in, out, k, st, d, z, z, &p));
    EXPECT_EQ(p.tile_rows, 0);
    const int64_t in2[2] = {4, 8}, out2[2] = {3, 4}, s2[2] = {1, 2};
    ASSERT_TRUE(pool2d_setup(true, false, in2, out2, k, s2, d, z, z, &p));
    EXPECT_EQ(p.tile_rows, 0);
    ASSERT_TRUE(pool2d_setup(false, false, in2, out, k, st, d, z, z, &p));
    EXPECT_EQ(p.tile_rows, 0) << "AveragePool keeps the row path";
}

// A uniform value in [-2, 2) from a linear congruential sequence (the channels-last and global-average tests).
float lcg_pm2(uint32_t& seed) {
    seed = seed * 1664525u + 1013904223u;
    return float(seed >> 8) / float(1 << 24) * 4.0f - 2.0f;
}

// The channels-last pool (pool_nhwc_for, jiffy::MaxPoolNhwc / AveragePoolNhwc) on every ISA
// against the same definition, every case of the NCHW tests, at channel counts below one vector,
// one vector plus a tail (BlazeFace's 28) and past the AVX-512 kernel's 4-vector block (70), batch
// 2, Max and Average both pad counts, with NaN / +-inf inputs (a NaN never wins a Max, as in NCHW);
// nothing written past the output.
TEST(PoolKernel, ChannelsLastMatchesDefinitionEveryIsa) {
    for (const PoolCase& c0 : pool_cases())
        for (int64_t C : {5, 28, 70}) {
            PoolCase c = c0;
            c.C = C;
            const int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb, c.ceil);
            const int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr, c.ceil);
            const int64_t n = 2, plane = c.H * c.W, oplane = OH * OW;
            std::vector<float> x(size_t(n * C * plane));  // NCHW, then transposed per image
            uint32_t s = 99u + uint32_t(C * 7 + c.W);
            for (auto& v : x) v = lcg_pm2(s);
            x[3] = std::numeric_limits<float>::quiet_NaN();
            x[x.size() / 2] = INFINITY;
            x[x.size() - 5] = -INFINITY;
            std::vector<float> xt(x.size());
            for (int64_t i = 0; i < n; ++i)
                for (int64_t ch = 0; ch < C; ++ch)
                    for (int64_t q = 0; q < plane; ++q)
                        xt[size_t((i * plane + q) * C + ch)] = x[size_t((i * C + ch) * plane + q)];
            const int64_t in[2] = {c.H, c.W}, out[2] = {OH, OW}, k[2] = {c.kh, c.kw}, st[2] = {c.sh, c.sw},
                          d[2] = {c.dh, c.dw}, pb[2] = {c.pt, c.pl}, pe[2] = {c.pb, c.pr};
            for (int mode = 0; mode < 3; ++mode) {
                const bool max = mode == 0, incl = mode == 2;
                PoolNhwc p;
                ASSERT_TRUE(pool_nhwc_setup(max, incl, in, out, k, st, d, pb, pe, C, &p)) << pc_str(c);
                std::vector<float> want;
                for (int64_t i = 0; i < n; ++i) {
                    const std::vector<float> xi(x.begin() + i * C * plane, x.begin() + (i + 1) * C * plane);
                    const std::vector<float> yi = pool_ref(c, max, incl, xi, OH, OW);
                    want.insert(want.end(), yi.begin(), yi.end());
                }
                for (Isa isa : pool_isas()) {
                    std::vector<float> y(want.size() + 1, 7.0f);
                    // In two parts of output rows (a thread split), the cut inside the first image.
                    const int64_t cut = std::max<int64_t>(1, OH / 2);
                    pool_nhwc_for(isa)(p, xt.data(), y.data(), 0, cut);
                    pool_nhwc_for(isa)(p, xt.data(), y.data(), cut, n * OH);
                    ASSERT_EQ(y.back(), 7.0f) << pc_str(c) << " isa " << isa_name(isa) << " wrote past the output";
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t ch = 0; ch < C; ++ch)
                            for (int64_t q = 0; q < oplane; ++q) {
                                const float g = y[size_t((i * oplane + q) * C + ch)];
                                const float w = want[size_t((i * C + ch) * oplane + q)];
                                const std::string what = pc_str(c) + (max ? " max" : incl ? " avg incl" : " avg excl") +
                                                         " isa " + isa_name(isa) + " image " + std::to_string(i) +
                                                         " channel " + std::to_string(ch) + " pixel " + std::to_string(q);
                                if (std::isnan(w) || std::isinf(w))
                                    ASSERT_TRUE((std::isnan(g) && std::isnan(w)) || g == w) << what << ": " << g << " vs " << w;
                                else
                                    ASSERT_NEAR(g, w, 1e-5 * (1 + std::abs(w))) << what;
                            }
                }
            }
        }
    const int64_t in[2] = {1, 4}, out[2] = {1, 4}, k[2] = {1, 2}, s[2] = {1, 1}, d[2] = {1, 1}, pb[2] = {0, 2},
                  pe[2] = {0, 0};
    PoolNhwc p;
    EXPECT_FALSE(pool_nhwc_setup(true, false, in, out, k, s, d, pb, pe, 3, &p)) << "a window only in the padding";
}

// The two-tap resize column pass (kernels/resize.h) on every ISA that has one, against the
// per-column loop it replaces (w0 * v[o0] + w1 * v[o1], two products and one add): bitwise, for
// align_corners and half_pixel upsamplings (M-LSD's 40 -> 80, 80 -> 160), odd widths with a
// partial last block, a mild downsampling, and columns with one tap (the other padded at offset 0
// with weight 0). A downsampling whose 16 columns span more than 32 inputs is refused.
TEST(ResizeKernel, PermutedColumnsMatchTheTapLoopBitwise) {
    struct Case { int64_t in, out; bool align; };
    const Case cases[] = {{40, 80, true}, {80, 160, true}, {7, 23, true}, {13, 29, false}, {40, 80, false},
                          {100, 60, false}, {3, 50, true}, {1, 17, true}};
    for (const Case& c : cases) {
        std::vector<int64_t> off(size_t(2 * c.out));
        std::vector<float> w(size_t(2 * c.out));
        for (int64_t j = 0; j < c.out; ++j) {
            double x = c.align ? (c.out > 1 ? double(j) * double(c.in - 1) / double(c.out - 1) : 0.0)
                               : (double(j) + 0.5) * double(c.in) / double(c.out) - 0.5;
            x = std::min(std::max(x, 0.0), double(c.in - 1));
            const int64_t o0 = int64_t(std::floor(x));
            const float f = float(x - double(o0));
            if (f == 0.0f || o0 + 1 >= c.in) {  // one tap; the second padded as ResizeKernel pads it
                off[size_t(2 * j)] = o0, w[size_t(2 * j)] = 1.0f, off[size_t(2 * j + 1)] = 0, w[size_t(2 * j + 1)] = 0.0f;
            } else {
                off[size_t(2 * j)] = o0, w[size_t(2 * j)] = 1.0f - f, off[size_t(2 * j + 1)] = o0 + 1, w[size_t(2 * j + 1)] = f;
            }
        }
        ResizeCols2 p;
        ASSERT_TRUE(resize_cols2_setup(off.data(), w.data(), c.out, &p)) << c.in << " -> " << c.out;
        std::vector<float> v(size_t(c.in + 32));
        uint32_t seed = uint32_t(c.in * 7 + c.out);
        for (float& x : v) x = lcg_pm2(seed);
        std::vector<float> want(size_t(c.out));
        for (int64_t j = 0; j < c.out; ++j) {
            const float a = w[size_t(2 * j)] * v[size_t(off[size_t(2 * j)])];
            const float b = w[size_t(2 * j + 1)] * v[size_t(off[size_t(2 * j + 1)])];
            want[size_t(j)] = a + b;
        }
        std::vector<ResizeCols2Fn> fns = {resize_cols2_scalar};
        for (Isa isa : pool_isas())
            if (ResizeCols2Fn f = resize_cols2_for(isa)) fns.push_back(f);
        for (ResizeCols2Fn fn : fns) {
            std::vector<float> y(size_t(c.out) + 1, 7.0f);
            fn(p, v.data(), y.data());
            EXPECT_EQ(y.back(), 7.0f) << c.in << " -> " << c.out << " wrote past the row";
            for (int64_t j = 0; j < c.out; ++j)
                ASSERT_EQ(y[size_t(j)], want[size_t(j)]) << c.in << " -> " << c.out << " column " << j
                                                         << (fn == resize_cols2_scalar ? " (scalar)" : " (vector)");
        }
    }
    std::vector<int64_t> off(32);
    std::vector<float> w(32, 0.5f);
    for (int64_t j = 0; j < 16; ++j) off[size_t(2 * j)] = 5 * j, off[size_t(2 * j + 1)] = 5 * j + 1;  // 80 -> 16
    ResizeCols2 p;
    EXPECT_FALSE(resize_cols2_setup(off.data(), w.data(), 16, &p)) << "16 columns over 77 inputs";
}

TEST(PoolKernel, WindowOnlyInPaddingIsRejected) {
    // kernel 2, pad 2 at the begin: the first window lies entirely in the padding.
    const int64_t in[2] = {1, 4}, out[2] = {1, 4}, k[2] = {1, 2}, s[2] = {1, 1}, d[2] = {1, 1},
                  pb[2] = {0, 2}, pe[2] = {0, 0};
    Pool2d p;
    EXPECT_FALSE(pool2d_setup(true, false, in, out, k, s, d, pb, pe, &p));
}

// The channels-last global average (global_avg_nhwc_for, jiffy::GlobalAveragePoolNhwc) on every
// ISA against double sums: channel counts around the vector widths, one pixel, a keyword
// spotter's 25x5 x 64 and a 56x56 plane, batch 2; nothing written past the last mean; an inf or a
// NaN poisons its own channel only.
TEST(GlobalAvgPool, ChannelsLastMatchesDoubleSumsEveryIsa) {
    uint32_t seed = 9;
    auto next = [&] { return lcg_pm2(seed); };
    for (Isa isa : pool_isas()) {
        const GlobalAvgNhwcFn fn = global_avg_nhwc_for(isa);
        for (int64_t n : {1, 2})
            for (int64_t C : {1, 7, 16, 17, 40, 64, 100})
                for (int64_t size : {1, 2, 15, 125, 3136}) {
                    std::vector<float> x(size_t(n * size * C));
                    for (float& v : x) v = next();
                    std::vector<float> y(size_t(n * C) + 1, 7.0f);
                    fn(x.data(), y.data(), n, size, C);
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t c = 0; c < C; ++c) {
                            double s = 0;
                            for (int64_t p = 0; p < size; ++p) s += x[size_t((i * size + p) * C + c)];
                            ASSERT_NEAR(y[size_t(i * C + c)], s / double(size), 1e-6 * (1 + std::sqrt(double(size)) / 4))
                                << isa_name(isa) << " n " << n << " C " << C << " size " << size << " at " << i << "," << c;
                        }
                    ASSERT_EQ(y[size_t(n * C)], 7.0f) << isa_name(isa) << " wrote past the last mean";
                }
        std::vector<float> x(size_t(9 * 20), 1.0f), y(20);
        x[size_t(4 * 20 + 3)] = std::numeric_limits<float>::infinity();
        x[size_t(8 * 20 + 17)] = std::numeric_limits<float>::quiet_NaN();
        fn(x.data(), y.data(), 1, 9, 20);
        for (int64_t c = 0; c < 20; ++c) {
            if (c == 3) EXPECT_TRUE(std::isinf(y[3])) << isa_name(isa);
            else if (c == 17) EXPECT_TRUE(std::isnan(y[17])) << isa_name(isa);
            else EXPECT_FLOAT_EQ(y[size_t(c)], 1.0f) << isa_name(isa) << " channel " << c;
        }
    }
}

// GlobalAveragePool (global_avg_for) on every ISA against double sums: plane counts around the
// vector kernels' groups of 8 / 16 (partial last group), plane sizes below, at and past one and
// two vectors and MobileNetV3's 7x7 / 14x14 / 28x28; writes nothing past the last plane; an inf
// or NaN in a plane gives inf / NaN for that plane only.
TEST(GlobalAvgPool, MatchesDoubleSumsEveryIsa) {
    uint32_t seed = 5;
    auto next = [&] { return lcg_pm2(seed); };
    for (Isa isa : pool_isas()) {
        const GlobalAvgFn fn = global_avg_for(isa);
        for (int64_t planes : {1, 3, 7, 8, 9, 15, 16, 17, 33, 120})
            for (int64_t size : {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 49, 196, 784}) {
                std::vector<float> x(size_t(planes * size));
                for (float& v : x) v = next();
                std::vector<float> y(size_t(planes) + 1, 7.0f);
                fn(x.data(), y.data(), planes, size);
                for (int64_t q = 0; q < planes; ++q) {
                    double s = 0;
                    for (int64_t i = 0; i < size; ++i) s += x[size_t(q * size + i)];
                    ASSERT_NEAR(y[size_t(q)], s / double(size), 1e-6 * (1 + std::sqrt(double(size)) / 4))
                        << isa_name(isa) << " planes " << planes << " size " << size << " plane " << q;
                }
                ASSERT_EQ(y[size_t(planes)], 7.0f) << isa_name(isa) << " wrote past the last plane";
            }
        std::vector<float> x(size_t(20 * 33), 1.0f), y(20);
        x[size_t(3 * 33 + 32)] = std::numeric_limits<float>::infinity();
        x[size_t(17 * 33 + 5)] = std::numeric_limits<float>::quiet_NaN();
        fn(x.data(), y.data(), 20, 33);
        for (int64_t q = 0; q < 20; ++q) {
            if (q == 3) EXPECT_TRUE(std::isinf(y[3])) << isa_name(isa);
            else if (q == 17) EXPECT_TRUE(std::isnan(y[17])) << isa_name(isa);
            else EXPECT_FLOAT_EQ(y[size_t(q)], 1.0f) << isa_name(isa) << " plane " << q;
        }
    }
}

}  // namespace

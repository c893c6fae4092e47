#include "kernels/conv_cv.h"

#include <algorithm>

#include "kernels/weight_alloc.h"

namespace jiffy::kernels {

#if defined(__x86_64__)
void conv_cv_group_avx512(const ConvCvArgs&, const float*, const float*, const float*, const float*,
                          float*, float*, const ConvEpi&);
void conv_cv_group_avx2(const ConvCvArgs&, const float*, const float*, const float*, const float*,
                        float*, float*, const ConvEpi&);
#endif
#if defined(__aarch64__)
void conv_cv_group_neon(const ConvCvArgs&, const float*, const float*, const float*, const float*,
                        float*, float*, const ConvEpi&);
#endif
void conv_cv_group_portable(const ConvCvArgs&, const float*, const float*, const float*,
                            const float*, float*, float*, const ConvEpi&);

namespace {

ConvCvFn cv_fn(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return conv_cv_group_avx512;
    if (isa == Isa::kAvx2) return conv_cv_group_avx2;
#endif
#if defined(__aarch64__)
    if (isa == Isa::kNeon) return conv_cv_group_neon;
#endif
    (void)isa;
    return conv_cv_group_portable;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

bool ConvChanVec::fits(const Conv2DGeom& g) {
    const int64_t P = g.OH * g.OW;
    return g.sh == 1 && g.sw == 1 && g.OW == g.W && P >= 1 && P <= kMaxPixels && g.C >= 1 &&
           g.M >= 1 && g.kh >= 1 && g.kw >= 1 && g.C * g.kh * g.kw <= 8192 &&
           g.C * g.H * g.W < (int64_t(1) << 31);
}

// The GEMM conv fills P / round_up(P, NR) of its vector lanes (on AVX-512 its masked implicit
// mode reads padded images directly); this kernel M / round_up(M, VL) of them and adds a
// transposition of the output and, for padded taps, a copy of their rows. Measured on
// embedding_model's small-plane layers (docs/benchmarks.md): on AVX-512 it wins where it fills
// clearly more lanes (96 -> 96 on 10x4: 107 against 65 GFLOP/s; on 14x4, 56 pixels: 97 against
// 91); on AVX2 (no masked mode: padded 1x3 convs go through a buffered copy) it wins on every
// one of them, full lanes included (12x4: 95 against 62, 1x3 on 12x4: 94 against 38).
int64_t ConvChanVec::panel(Isa isa) { return 2 * isa_vector_floats(isa); }

bool ConvChanVec::preferred(Isa isa, const Conv2DGeom& g) {
    if (!fits(g)) return false;
    const int64_t P = g.OH * g.OW, vl = isa_vector_floats(isa), nr = 2 * vl;
    const double eff_n = double(P) / double(round_up(P, nr));
    const double eff_c = double(g.M) / double(round_up(g.M, vl));
    // Below 8 pixels the microkernel's rows are too few to hide the FMA latency (P = 1, a 3x1
    // 96 -> 96 conv: 2.2 us against 1.9 for SmallConv's GEMV).
    if (P < 8 || g.M < 2 * vl || g.C * g.kh * g.kw > 1024) return false;
    if (g.kh * g.kw == 1) {
        // 1x1 on 7x7 planes, AVX-512 (measured there only), reductions (M <= C) only:
        // MobileNetV2's 960 -> 160 and 576 -> 160 5-10% faster than the GEMM conv's transposed
        // mode (960 -> 160: 152-157 vs 173 us), 960 -> 320 equal; its expansions slower in the
        // model (160 -> 960: 212 vs 195 us, 320 -> 1280: 475 vs 453, three alternating runs on
        // Zen 4: this kernel re-reads all K pixel rows from L2 for every 32-channel panel, the
        // transposed mode keeps a K chunk of them in L1 across the panels); ResNet-50's
        // 512 -> 2048 (4 MiB of weights, re-read per 12-pixel block from L3) 15% slower: weights
        // up to 2 MiB only.
        return isa == Isa::kAvx512 && g.M <= g.C && g.C * g.M <= (int64_t(1) << 19);
    }
    return isa != Isa::kAvx512 || eff_c >= eff_n + 0.1;
}

ConvChanVec::ConvChanVec(Isa isa, const Conv2DGeom& g, const float* W) : isa_(isa) {
    ConvCvArgs& a = a_;
    a.g = g;
    a.K = g.C * g.kh * g.kw;
    a.P = g.OH * g.OW;
    const int64_t vl = isa_vector_floats(isa), nr = 2 * vl;
    a.Mp = round_up(g.M, vl);
    a.Pr = round_up(a.P, vl);
    for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t dy = ky * g.dh - g.ph, dx = kx * g.dw - g.pw;
            uint64_t bits = 0;
            for (int64_t p = 0; p < a.P; ++p) {
                const int64_t iy = p / g.OW + dy, ix = p % g.OW + dx;
                if (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W) bits |= uint64_t(1) << p;
            }
            const uint64_t all = a.P == 64 ? ~uint64_t(0) : (uint64_t(1) << a.P) - 1;
            tap_d_.push_back(dy * g.W + dx);
            tap_bits_.push_back(bits);
            tap_slot_.push_back(bits == all ? -1 : a.ncopy++);
        }
    a.tap_d = tap_d_.data();
    a.tap_slot = tap_slot_.data();
    a.tap_bits = tap_bits_.data();
    // Panels of NR output channels (the last one VL wide when that covers it), K x width each.
    const size_t wbytes = size_t(a.Mp * a.K) * sizeof(float);
    // 2 MiB pages from 1 MiB (MobileNetV2's 960 -> 320 and 320 -> 1280: most of the measured gain,
    // with at most half of each page unused).
    std::shared_ptr<unsigned char> wb = alloc_zeroed(wbytes, size_t(1) << 20);
    wp_ = std::shared_ptr<float>(wb, reinterpret_cast<float*>(wb.get()));
    for (int64_t n0 = 0; n0 < a.Mp; n0 += nr) {
        const int64_t nw = std::min(nr, a.Mp - n0);
        float* d = wp_.get() + n0 * a.K;
        for (int64_t k = 0; k < a.K; ++k)
            for (int64_t j = 0; j < nw && n0 + j < g.M; ++j) d[k * nw + j] = W[(n0 + j) * a.K + k];
    }
}

size_t ConvChanVec::scratch_floats() const {
    return size_t(2 * a_.K + a_.Mp + a_.P * a_.Mp + a_.g.C * a_.ncopy * a_.Pr);
}

void ConvChanVec::run(const float* x, const float* bias, const float* res, float* y, float* scratch,
                      const ConvEpi& epi) const {
    ConvCvArgs a = a_;  // the tables point into this object (safe across copies of it)
    a.tap_d = tap_d_.data();
    a.tap_slot = tap_slot_.data();
    a.tap_bits = tap_bits_.data();
    cv_fn(isa_)(a, x, wp_.get(), bias, res, y, scratch, epi);
}

std::string ConvChanVec::describe() const {
    const int64_t vl = isa_vector_floats(isa_);
    return "conv_chanvec " + std::to_string(isa_ == Isa::kAvx512 ? 12 : 6) + "x" +
           std::to_string(2 * vl) + " " + isa_name(isa_) + " (" + std::to_string(a_.ncopy) +
           " of " + std::to_string(a_.g.kh * a_.g.kw) + " taps copied)";
}

}  // namespace jiffy::kernels

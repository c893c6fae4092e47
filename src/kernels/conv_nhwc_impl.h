// The channels-last (NHWC) conv kernels (conv_nhwc.h), compiled per ISA: included right after
// kernels/conv_impl.h in the same translation unit, whose vector helpers (V, VL, NR, MR, ld, st,
// ld_n, st_n, bc, act_v, deferred_act, ld_pair, st_pair) they use. Exports
// conv_nhwc_pw_<JIFFY_CONV_SUFFIX>, conv_nhwc_pw_scale_<JIFFY_CONV_SUFFIX> and
// conv_nhwc_dw_<JIFFY_CONV_SUFFIX>.
//
// Pointwise: Y[P, M] = X[P, K] . W^T, the pixels as the microkernel's MR rows (each a broadcast
// of X[p, k], read in place: a pixel's K channels are contiguous) and NR output channels on the
// vector axis (W packed at prepare as K x NR column panels, zero past M); bias, residual and
// activation on the registers. The same MR x NR register block as the NCHW GEMM.
// Depthwise: every tap of R adjacent output pixels is one vector load of VL channels (a pixel's
// channels are contiguous) and one FMA with the tap's weight vector (packed tap-major, khw x Cp):
// no lane is wasted on short rows and no load straddles a row border, whatever the plane size —
// the reason for the layout (docs/layout.md).
#include "kernels/conv_nhwc.h"

namespace jiffy::kernels {
namespace {

// ------------------------------------------------------------------------- pointwise

#if JIFFY_CONV_VL == 16
// Half an AVX-512 vector (8 floats): the last 8 output channels of a panel whose width is 8 past
// a multiple of 16 (24 = 16 + 8, 40 = 32 + 8, 120 = 96 + 24 channels). On Zen 4 a 512-bit FMA
// takes both 256-bit FMA pipes and a 256-bit one takes one, so a half-width accumulator for
// those 8 channels costs half the FMA slots of a masked full one (MobileNets' 24- and 40-channel
// 1x1s, at 1.5 / 2.5 vectors of channels); with 512-bit pipes it costs the same.
typedef float VH __attribute__((vector_size(8 * sizeof(float))));
inline VH lo_half(V v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline V widen(VH h) { return __builtin_shufflevector(h, VH{}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
inline VH ld_h(const float* p) {
    VH v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
#endif

// Rows [0, mr) of C[., n0 .. n0 + nv) = act(A . B + bias (+ R)); A's rows lda apart (XT: A is
// stored transposed, K rows of pixels lda apart: an NCHW image), B one K x NR panel, C and R rows
// ldc apart. PART: nv < NR (masked stores); HALF: nv <= VL (one vector). NARROW (AVX-512, with
// PART): the last vector of columns holds at most 8 (nv <= 8 with HALF, nv <= VL + 8 without)
// and is summed 8 wide (VH above); the same products and sums lane by lane.
template <int mr, ConvAct A, bool PART, bool HALF, bool XT = false, bool NARROW = false>
inline void nhwc_pw_block(int64_t K, const float* __restrict a, int64_t lda, const float* __restrict b,
                          const float* bias, const float* R, float* C, int64_t ldc, int64_t nv, const ConvEpi& e) {
#if JIFFY_CONV_VL == 16
    if constexpr (NARROW) {
        // HALF: only h0 (columns 0..7); else c0 (0..15) and h1 (16..23).
        V c0[mr];
        VH h[mr];
        const V b0 = ld(bias);
        const VH bh = HALF ? lo_half(b0) : ld_h(bias + VL);
#pragma GCC unroll 16
        for (int i = 0; i < mr; ++i) c0[i] = b0, h[i] = bh;
        for (int64_t k = 0; k < K; ++k) {
            if constexpr (XT) __builtin_prefetch(a + k * lda + 128);
            const V w0 = HALF ? V{} : ld(b + k * NR);
            const VH wh = ld_h(b + k * NR + (HALF ? 0 : VL));
#pragma GCC unroll 16
            for (int i = 0; i < mr; ++i) {
                const V av = bc(XT ? a[k * lda + i] : a[i * lda + k]);
                if constexpr (!HALF) c0[i] += av * w0;
                h[i] += lo_half(av) * wh;
            }
        }
        V c1[mr];
#pragma GCC unroll 16
        for (int i = 0; i < mr; ++i) {
            if constexpr (HALF) c0[i] = widen(h[i]), c1[i] = V{};
            else c1[i] = widen(h[i]);
        }
        store_block<mr, A, PART>(c0, c1, C, ldc, R, e, nv);
        return;
    }
#endif
    V c0[mr], c1[mr];
    const V b0 = ld(bias), b1 = HALF ? V{} : ld(bias + VL);
#pragma GCC unroll 16
    for (int i = 0; i < mr; ++i) c0[i] = b0, c1[i] = b1;
    for (int64_t k = 0; k < K; ++k) {
        // NCHW X: K pixel rows a plane apart, too many streams for the hardware prefetchers to
        // run far enough ahead; 512 B ahead on each (face detector 16 -> 32 on 120x160: ~5-8%).
        if constexpr (XT) __builtin_prefetch(a + k * lda + 128);
        const V w0 = ld(b + k * NR);
        const V w1 = HALF ? V{} : ld(b + k * NR + VL);
#pragma GCC unroll 16
        for (int i = 0; i < mr; ++i) {
            const V av = bc(XT ? a[k * lda + i] : a[i * lda + k]);
            c0[i] += av * w0;
            if constexpr (!HALF) c1[i] += av * w1;
        }
    }
    store_block<mr, A, PART>(c0, c1, C, ldc, R, e, nv);
}

#if JIFFY_CONV_VL == 16 && defined(__AVX512F__) && defined(__x86_64__)
// The whole 12-pixel blocks of a pointwise conv with no residual and ReLU, Clip or no activation
// (nhwc_pw_range's loop; a 12 x 32 block per full panel, a 12 x 16 one for a last panel of 16), in
// inline assembly: the same sums as nhwc_pw_block (bias, then k ascending, one FMA each; max / min
// as vmax / vmin), bit for bit. GCC's code for the block spent ~70 cycles outside its 24 x K FMAs
// on Zen 4 (a call per block, 24 register copies of the bias, address setup spilled to vector
// registers, per-row tests in the epilogue). Pixels x channels hot in L2, one core (118 GFLOP/s
// peak): 16 -> 32 99.6 -> 108, 16 -> 16 99.5 -> 110, 16 -> 96 103 -> 109, 64 -> 64 113.4 -> 115.7,
// 128 -> 16 114 -> 117 GFLOP/s. Registers: sums zmm0-11 (first vector of row i) and zmm12-23
// (second), the panel row zmm24/25, the broadcast input zmm26, the activation's bounds zmm27/28.
// Rows i of A and C are addressed as a base (rows 0, 3, 6, 9) plus 0, 1 or 2 row strides.
#define JIFFY_PW_R0 "(%[a0])"
#define JIFFY_PW_R1 "(%[a0],%[L],1)"
#define JIFFY_PW_R2 "(%[a0],%[L],2)"
#define JIFFY_PW_R3 "(%[a3])"
#define JIFFY_PW_R4 "(%[a3],%[L],1)"
#define JIFFY_PW_R5 "(%[a3],%[L],2)"
#define JIFFY_PW_R6 "(%[a6])"
#define JIFFY_PW_R7 "(%[a6],%[L],1)"
#define JIFFY_PW_R8 "(%[a6],%[L],2)"
#define JIFFY_PW_R9 "(%[a9])"
#define JIFFY_PW_R10 "(%[a9],%[L],1)"
#define JIFFY_PW_R11 "(%[a9],%[L],2)"
#define JIFFY_PW_INIT(i, j) "vmovaps %%zmm24, %%zmm" #i "\n\tvmovaps %%zmm25, %%zmm" #j "\n\t"
#define JIFFY_PW_FMA(i, j)                                                   \
    "vbroadcastss " JIFFY_PW_R##i ", %%zmm26\n\t"                            \
    "vfmadd231ps %%zmm26, %%zmm24, %%zmm" #i "\n\t"                          \
    "vfmadd231ps %%zmm26, %%zmm25, %%zmm" #j "\n\t"
#define JIFFY_PW_MAX(i, j) "vmaxps %%zmm27, %%zmm" #i ", %%zmm" #i "\n\tvmaxps %%zmm27, %%zmm" #j ", %%zmm" #j "\n\t"
#define JIFFY_PW_MIN(i, j) "vminps %%zmm28, %%zmm" #i ", %%zmm" #i "\n\tvminps %%zmm28, %%zmm" #j ", %%zmm" #j "\n\t"
#define JIFFY_PW_ST(i, j) "vmovups %%zmm" #i ", " JIFFY_PW_R##i "\n\tvmovups %%zmm" #j ", 64" JIFFY_PW_R##i "\n\t"
// The half block (a last panel of exactly 16 channels: 12 x 16, sums zmm0-11): the input as an
// embedded broadcast of each FMA (one FMA per broadcast here; a separate broadcast per FMA ran at
// ~3/4 of the FMA rate on Zen 4).
#define JIFFY_PW_INIT_H(i, j) "vmovaps %%zmm24, %%zmm" #i "\n\t"
#define JIFFY_PW_FMA_H(i, j) "vfmadd231ps " JIFFY_PW_R##i "%{1to16%}, %%zmm24, %%zmm" #i "\n\t"
#define JIFFY_PW_MAX_H(i, j) "vmaxps %%zmm27, %%zmm" #i ", %%zmm" #i "\n\t"
#define JIFFY_PW_MIN_H(i, j) "vminps %%zmm28, %%zmm" #i ", %%zmm" #i "\n\t"
#define JIFFY_PW_ST_H(i, j) "vmovups %%zmm" #i ", " JIFFY_PW_R##i "\n\t"
#define JIFFY_PW_ROWS(X) \
    X(0, 12) X(1, 13) X(2, 14) X(3, 15) X(4, 16) X(5, 17) X(6, 18) X(7, 19) X(8, 20) X(9, 21) X(10, 22) X(11, 23)
// The end of a K step (K counted down), then, after the last, a0 / a3 / a6 / a9 and L re-pointed
// at C's rows.
#define JIFFY_PW_NEXT                                                                                   \
    "add $4, %[a0]\n\tadd $4, %[a3]\n\tadd $4, %[a6]\n\tadd $4, %[a9]\n\tadd $128, %[b]\n\t"         \
    "dec %[k]\n\tjnz 1b\n\t"                                                                          \
    "mov %[c], %[a0]\n\tmov %[lc], %[L]\n\tlea (%[a0],%[L],2), %[a3]\n\tadd %[L], %[a3]\n\t"         \
    "lea (%[a3],%[L],2), %[a6]\n\tadd %[L], %[a6]\n\tlea (%[a6],%[L],2), %[a9]\n\tadd %[L], %[a9]\n\t"
// Bias into the sums, then the K steps.
#define JIFFY_PW_BODY                                                                                   \
    "vmovups (%[bias]), %%zmm24\n\tvmovups 64(%[bias]), %%zmm25\n\t" JIFFY_PW_ROWS(JIFFY_PW_INIT)   \
    "1:\n\tvmovups (%[b]), %%zmm24\n\tvmovups 64(%[b]), %%zmm25\n\t" JIFFY_PW_ROWS(JIFFY_PW_FMA) JIFFY_PW_NEXT
#define JIFFY_PW_BODY_H                                                                                 \
    "vmovups (%[bias]), %%zmm24\n\t" JIFFY_PW_ROWS(JIFFY_PW_INIT_H)                                    \
    "1:\n\tvmovups (%[b]), %%zmm24\n\t" JIFFY_PW_ROWS(JIFFY_PW_FMA_H) JIFFY_PW_NEXT
#define JIFFY_PW_OPERANDS                                                                               \
    : [a0] "+r"(a0), [a3] "+r"(a3), [a6] "+r"(a6), [a9] "+r"(a9), [L] "+r"(L), [b] "+r"(b), [k] "+r"(k) \
    : [bias] "r"(bias), [c] "r"(C), [lc] "r"(lc), [lo] "m"(lo), [hi] "m"(hi)                            \
    : "memory", "cc", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9",    \
      "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm16", "zmm17", "zmm18", "zmm19", "zmm20", \
      "zmm21", "zmm22", "zmm23", "zmm24", "zmm25", "zmm26", "zmm27", "zmm28"
// The block with the activation A's epilogue on the sums (bounds in zmm27 / zmm28), then stored.
#define JIFFY_PW_ASM(BODY, MAX, MIN, ST)                                                               \
    if constexpr (A == ConvAct::kRelu)                                                                 \
        asm volatile(BODY "vxorps %%xmm27, %%xmm27, %%xmm27\n\t" JIFFY_PW_ROWS(MAX) JIFFY_PW_ROWS(ST)  \
                         JIFFY_PW_OPERANDS);                                                           \
    else if constexpr (A == ConvAct::kClip)                                                            \
        asm volatile(BODY "vbroadcastss %[lo], %%zmm27\n\tvbroadcastss %[hi], %%zmm28\n\t"             \
                         JIFFY_PW_ROWS(MAX) JIFFY_PW_ROWS(MIN) JIFFY_PW_ROWS(ST) JIFFY_PW_OPERANDS);   \
    else                                                                                               \
        asm volatile(BODY JIFFY_PW_ROWS(ST) JIFFY_PW_OPERANDS);
constexpr bool kPwAsm = true;
// HALF: the 12 x 16 block (a panel's first vector only; b's rows are still NR floats apart).
template <ConvAct A, bool HALF = false>
inline __attribute__((always_inline)) void nhwc_pw_block_asm(int64_t K, const float* a, int64_t lda,
                                                             const float* b, const float* bias, float* C,
                                                             int64_t ldc, const ConvEpi& e) {
    const float *a0 = a, *a3 = a + 3 * lda, *a6 = a + 6 * lda, *a9 = a + 9 * lda;
    int64_t L = lda * int64_t(sizeof(float)), lc = ldc * int64_t(sizeof(float)), k = K;
    const float lo = A == ConvAct::kClip ? e.alpha : 0.0f, hi = A == ConvAct::kClip ? e.beta : 0.0f;
    if constexpr (HALF) {
        JIFFY_PW_ASM(JIFFY_PW_BODY_H, JIFFY_PW_MAX_H, JIFFY_PW_MIN_H, JIFFY_PW_ST_H)
    } else {
        JIFFY_PW_ASM(JIFFY_PW_BODY, JIFFY_PW_MAX, JIFFY_PW_MIN, JIFFY_PW_ST)
    }
}
#undef JIFFY_PW_R0
#undef JIFFY_PW_R1
#undef JIFFY_PW_R2
#undef JIFFY_PW_R3
#undef JIFFY_PW_R4
#undef JIFFY_PW_R5
#undef JIFFY_PW_R6
#undef JIFFY_PW_R7
#undef JIFFY_PW_R8
#undef JIFFY_PW_R9
#undef JIFFY_PW_R10
#undef JIFFY_PW_R11
#undef JIFFY_PW_INIT
#undef JIFFY_PW_FMA
#undef JIFFY_PW_MAX
#undef JIFFY_PW_MIN
#undef JIFFY_PW_ST
#undef JIFFY_PW_ROWS
#undef JIFFY_PW_BODY
#undef JIFFY_PW_OPERANDS
#undef JIFFY_PW_ASM
#undef JIFFY_PW_NEXT
#undef JIFFY_PW_BODY_H
#undef JIFFY_PW_ST_H
#undef JIFFY_PW_MIN_H
#undef JIFFY_PW_MAX_H
#undef JIFFY_PW_FMA_H
#undef JIFFY_PW_INIT_H
#else
constexpr bool kPwAsm = false;
template <ConvAct A, bool HALF = false>
void nhwc_pw_block_asm(int64_t, const float*, int64_t, const float*, const float*, float*, int64_t, const ConvEpi&) {}
#endif

// The 8-wide tail accumulators (nhwc_pw_block's NARROW) where the ISA has them (AVX-512).
constexpr bool kNarrowPw = JIFFY_CONV_VL == 16;

// mr pixel rows of one output channel panel (b: its K x NR floats) of nv <= NR channels.
template <ConvAct A, int mr, bool XT>
void nhwc_pw_panel(int64_t K, int64_t nv, const float* a, int64_t lda, const float* b, const float* bias,
                   const float* r, float* C, int64_t ldc, const ConvEpi& e) {
    if (nv == NR)
        nhwc_pw_block<mr, A, false, false, XT>(K, a, lda, b, bias, r, C, ldc, nv, e);
    else if (kNarrowPw && nv <= VL / 2)
        nhwc_pw_block<mr, A, true, true, XT, true>(K, a, lda, b, bias, r, C, ldc, nv, e);
    else if (nv <= VL)
        nhwc_pw_block<mr, A, true, true, XT>(K, a, lda, b, bias, r, C, ldc, nv, e);
    else if (kNarrowPw && nv <= VL + VL / 2)
        nhwc_pw_block<mr, A, true, false, XT, true>(K, a, lda, b, bias, r, C, ldc, nv, e);
    else
        nhwc_pw_block<mr, A, true, false, XT>(K, a, lda, b, bias, r, C, ldc, nv, e);
}

// mr pixel rows, every output channel panel (XT: A is NCHW, channel planes lda apart).
template <ConvAct A, int mr, bool XT>
void nhwc_pw_rows(int64_t K, int64_t M, const float* a, int64_t lda, const float* wp, const float* bias,
                  const float* R, float* C, const ConvEpi& e) {
    for (int64_t n0 = 0; n0 < M; n0 += NR)
        nhwc_pw_panel<A, mr, XT>(K, std::min<int64_t>(NR, M - n0), a, lda, wp + n0 * K, bias + n0,
                                 R ? R + n0 : nullptr, C + n0, M, e);
}

using NhwcPwFn = void (*)(int64_t, int64_t, const float*, int64_t, const float*, const float*, const float*,
                          float*, const ConvEpi&);
template <ConvAct A, bool XT, int... I>
constexpr std::array<NhwcPwFn, sizeof...(I)> make_nhwc_pw_table(std::integer_sequence<int, I...>) {
    return {&nhwc_pw_rows<A, I + 1, XT>...};
}

// x_plane > 0: X is NCHW (pixel p of channel k at x[k * x_plane + p]).
template <ConvAct A, bool XT>
void nhwc_pw_range(int64_t K, int64_t M, const float* x, const float* wp, const float* bias, const float* res,
                   float* y, const ConvEpi& e, int64_t p0, int64_t p1, int64_t x_plane) {
    static constexpr auto table = make_nhwc_pw_table<A, XT>(std::make_integer_sequence<int, MR>{});
    const int64_t lda = XT ? x_plane : K, ps = XT ? 1 : K;
    int64_t p = p0;
    // Whole blocks by the assembly ones (their loop here: a call per block cost ~5% at K = 16);
    // a last panel of other than 16 channels by nhwc_pw_block.
    if constexpr (kPwAsm && !XT && (A == ConvAct::kNone || A == ConvAct::kRelu || A == ConvAct::kClip))
        if (!res && K > 0 && (A == ConvAct::kNone || (!e.clamp && !e.affine)))
            for (; p + MR <= p1; p += MR) {
                const float* a = x + p * K;
                float* c = y + p * M;
                int64_t n0 = 0;
                for (; n0 + NR <= M; n0 += NR) nhwc_pw_block_asm<A>(K, a, K, wp + n0 * K, bias + n0, c + n0, M, e);
                if (M - n0 == VL)
                    nhwc_pw_block_asm<A, true>(K, a, K, wp + n0 * K, bias + n0, c + n0, M, e);
                else if (n0 < M)
                    nhwc_pw_panel<A, MR, false>(K, M - n0, a, K, wp + n0 * K, bias + n0, nullptr, c + n0, M, e);
            }
    for (; p + MR <= p1; p += MR)
        nhwc_pw_rows<A, MR, XT>(K, M, x + p * ps, lda, wp, bias, res ? res + p * M : nullptr, y + p * M, e);
    if (p < p1) table[size_t(p1 - p - 1)](K, M, x + p * ps, lda, wp, bias, res ? res + p * M : nullptr, y + p * M, e);
    deferred_act<A>(y + p0 * M, (p1 - p0) * M, e);
}

void nhwc_pw(int64_t K, int64_t M, const float* x, const float* wp, const float* bias, const float* res, float* y,
             const ConvEpi& e, int64_t p0, int64_t p1, int64_t x_plane) {
    with_act(e.act, [&](auto a) {
        if (x_plane > 0)
            nhwc_pw_range<decltype(a)::value, true>(K, M, x, wp, bias, res, y, e, p0, p1, x_plane);
        else
            nhwc_pw_range<decltype(a)::value, false>(K, M, x, wp, bias, res, y, e, p0, p1, 0);
    });
}

// ------------------------------------------------------------------------- depthwise

// Geometry of the depthwise loops, in floats.
struct NdSteps {
    int64_t rstep;  // one kernel row down the input (dh rows)
    int64_t cstep;  // one kernel column right (dw pixels)
    int64_t pstep;  // one output pixel right (sw pixels)
    int64_t wrow;   // one kernel row of packed weights (kw taps of Cp)
    int64_t Cp;     // one tap of packed weights
    int64_t C;      // one output pixel
};

// R adjacent output pixels x NB channel vectors (the last one the first nc lanes with TAIL), every
// kernel column inside the row, kernel rows [0, nky) (`in` and `wt` at the first valid kernel row
// and the block's first channel). R x NB independent sums hide the FMA latency; the channel
// vectors are immediate offsets from one pointer. KW > 0: kw known at compile time.
template <int KW, int R, int NB, bool TAIL, ConvAct A>
inline __attribute__((always_inline)) void nd_strip(const float* in, const float* wt, int64_t nky, int64_t kw,
                                                    const NdSteps& s, const float* bias, const float* res,
                                                    float* out, int64_t nc, const ConvEpi& e) {
    auto LD = [&](const float* p, int v) __attribute__((always_inline)) {
        return TAIL && v == NB - 1 ? ld_n(p, nc) : ld(p);
    };
    V acc[R][NB];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NB; ++v) acc[r][v] = ld(bias + v * VL);
    // Pixel r of the strip is base r / 4 plus offset o[r % 4]: two base pointers and three offset
    // registers whatever R, and the asm barrier keeps GCC from turning every (pixel, tap) address
    // into an induction variable of its own (it ran out of registers and spilled them all).
    const int64_t nkx = KW > 0 ? KW : kw;
    const int64_t o1 = s.pstep, o2 = 2 * s.pstep, o3 = 3 * s.pstep, o4 = 4 * s.pstep;
    for (int64_t ky = 0; ky < nky; ++ky) {
        const float* p = in + ky * s.rstep;
        const float* w = wt + ky * s.wrow;
#pragma GCC unroll 1
        for (int64_t kx = 0; kx < nkx; ++kx) {
            asm("" : "+r"(p), "+r"(w));
            const float* q = p + o4;
#pragma GCC unroll 4
            for (int v = 0; v < NB; ++v) {
                const V wv = ld(w + v * VL);
#pragma GCC unroll 16
                for (int r = 0; r < R; ++r) {
                    const float* b = (r < 4 ? p : q) + v * VL;
                    const int rr = r % 4;
                    const float* a = rr == 0 ? b : rr == 1 ? b + o1 : rr == 2 ? b + o2 : b + o3;
                    acc[r][v] += wv * LD(a, v);
                }
            }
            p += s.cstep;
            w += s.Cp;
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NB; ++v) {
            V x = acc[r][v];
            if (res) x += LD(res + r * s.C + v * VL, v);
            x = act_v<A>(x, e);
            if (TAIL && v == NB - 1) st_n(out + r * s.C + v * VL, x, nc);
            else st(out + r * s.C + v * VL, x);
        }
}

// One output pixel whose kernel columns [kx0, kx1) are inside the row, NB channel vectors.
template <int NB, bool TAIL, ConvAct A>
inline void nd_pixel(const float* in, const float* wt, int64_t nky, int64_t kx0, int64_t kx1, const NdSteps& s,
                     const float* bias, const float* res, float* out, int64_t nc, const ConvEpi& e) {
    auto LD = [&](const float* p, int v) __attribute__((always_inline)) {
        return TAIL && v == NB - 1 ? ld_n(p, nc) : ld(p);
    };
    V acc[NB];
#pragma GCC unroll 4
    for (int v = 0; v < NB; ++v) acc[v] = ld(bias + v * VL);
    for (int64_t ky = 0; ky < nky; ++ky)
        for (int64_t kx = kx0; kx < kx1; ++kx) {
            const float* p = in + ky * s.rstep + kx * s.cstep;
            const float* w = wt + ky * s.wrow + kx * s.Cp;
#pragma GCC unroll 4
            for (int v = 0; v < NB; ++v) acc[v] += ld(w + v * VL) * LD(p + v * VL, v);
        }
#pragma GCC unroll 4
    for (int v = 0; v < NB; ++v) {
        V x = acc[v];
        if (res) x += LD(res + v * VL, v);
        x = act_v<A>(x, e);
        if (TAIL && v == NB - 1) st_n(out + v * VL, x, nc);
        else st(out + v * VL, x);
    }
}

// Strips of fewer than R pixels (a row's last interior pixels).
template <int KW, int R, int NB, bool TAIL, ConvAct A>
inline void nd_strip_n(int64_t n, const float* in, const float* wt, int64_t nky, int64_t kw, const NdSteps& s,
                       const float* bias, const float* res, float* out, int64_t nc, const ConvEpi& e) {
    if constexpr (R > 1) {
        if (n >= R / 2) {
            nd_strip<KW, R / 2, NB, TAIL, A>(in, wt, nky, kw, s, bias, res, out, nc, e);
            n -= R / 2;
            in += R / 2 * s.pstep;
            res = res ? res + R / 2 * s.C : nullptr;
            out += R / 2 * s.C;
        }
        if (n > 0) nd_strip_n<KW, R / 2, NB, TAIL, A>(n, in, wt, nky, kw, s, bias, res, out, nc, e);
    }
}

// Output rows [oy0, oy1) of channels [c0, c0 + (NB - 1) * VL + nc).
template <int KW, int SW, int NB, bool TAIL, ConvAct A>
void nd_block(const Conv2DGeom& g, const float* x, const float* wp, const float* bias, const float* res, float* y,
              const ConvEpi& e, int64_t oy0, int64_t oy1, int64_t c0, int64_t nc) {
    constexpr int R = NB >= 4 ? 4 : 8;
    const int64_t C = g.C, Cp = (C + 15) / 16 * 16;
    const int64_t sw = SW > 0 ? SW : g.sw;
    NdSteps s;
    s.rstep = g.dh * g.W * C;
    s.cstep = g.dw * C;
    s.pstep = sw * C;
    s.wrow = g.kw * Cp;
    s.Cp = Cp;
    s.C = C;
    // Output columns [lo, hi) read every kernel column inside the row.
    const int64_t lo = std::min(g.OW, (g.pw + sw - 1) / sw);
    const int64_t span = g.W - 1 - (g.kw - 1) * g.dw + g.pw;
    const int64_t hi = std::max(lo, std::min(g.OW, span < 0 ? 0 : span / sw + 1));
    const float* bs = bias + c0;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
        const int64_t iy0 = oy * g.sh - g.ph;
        const int64_t ky0 = iy0 >= 0 ? 0 : (-iy0 + g.dh - 1) / g.dh;
        const int64_t ky1 = std::min(g.kh, g.H - iy0 <= 0 ? 0 : (g.H - iy0 + g.dh - 1) / g.dh);
        const int64_t nky = std::max<int64_t>(0, ky1 - ky0);
        const float* xr = x + (iy0 + ky0 * g.dh) * g.W * C + c0;  // input row of kernel row ky0, column 0
        const float* wt = wp + ky0 * s.wrow + c0;
        float* yr = y + oy * g.OW * C + c0;
        const float* rr = res ? res + oy * g.OW * C + c0 : nullptr;
        auto pixel = [&](int64_t ox) {
            const int64_t ix0 = ox * sw - g.pw;
            const int64_t kx0 = ix0 >= 0 ? 0 : (-ix0 + g.dw - 1) / g.dw;
            const int64_t kx1 = std::min(g.kw, g.W - ix0 <= 0 ? 0 : (g.W - ix0 + g.dw - 1) / g.dw);
            nd_pixel<NB, TAIL, A>(xr + ix0 * C, wt, nky, kx0, std::max(kx0, kx1), s, bs, rr ? rr + ox * C : nullptr,
                                  yr + ox * C, nc, e);
        };
        for (int64_t ox = 0; ox < lo; ++ox) pixel(ox);
        int64_t ox = lo;
        for (; ox + R <= hi; ox += R)
            nd_strip<KW, R, NB, TAIL, A>(xr + (ox * sw - g.pw) * C, wt, nky, g.kw, s, bs, rr ? rr + ox * C : nullptr,
                                         yr + ox * C, nc, e);
        if (ox < hi)
            nd_strip_n<KW, R, NB, TAIL, A>(hi - ox, xr + (ox * sw - g.pw) * C, wt, nky, g.kw, s, bs,
                                           rr ? rr + ox * C : nullptr, yr + ox * C, nc, e);
        for (ox = hi; ox < g.OW; ++ox) pixel(ox);
    }
}

template <int KW, int SW, ConvAct A>
void nd_rows(const Conv2DGeom& g, const float* x, const float* wp, const float* bias, const float* res, float* y,
             const ConvEpi& e, int64_t oy0, int64_t oy1) {
    // Row bands of a few output rows, every channel block per band: the band's input rows stay
    // in L1/L2 while each channel block sweeps them. Blocks of 4 channel vectors, then 2, then 1
    // (the last one partial where C is not a multiple of VL).
    const int64_t band = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, g.OW * g.C));
    const int64_t full = g.C / VL * VL, rest = g.C - full;
    for (int64_t r0 = oy0; r0 < oy1; r0 += band) {
        const int64_t r1 = std::min(oy1, r0 + band);
        int64_t c0 = 0;
        for (; c0 + 4 * VL <= full; c0 += 4 * VL) nd_block<KW, SW, 4, false, A>(g, x, wp, bias, res, y, e, r0, r1, c0, VL);
        for (; c0 + 2 * VL <= full; c0 += 2 * VL) nd_block<KW, SW, 2, false, A>(g, x, wp, bias, res, y, e, r0, r1, c0, VL);
        for (; c0 < full; c0 += VL) nd_block<KW, SW, 1, false, A>(g, x, wp, bias, res, y, e, r0, r1, c0, VL);
        if (rest) nd_block<KW, SW, 1, true, A>(g, x, wp, bias, res, y, e, r0, r1, c0, rest);
    }
    deferred_act<A>(y + oy0 * g.OW * g.C, (oy1 - oy0) * g.OW * g.C, e);
}

// ---- channels-last sums stored channels-first (Y NCHW)

#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
// v[i] holds 16 values (lanes j); stores the 8 values v[0..7][j] of lane j at y + j * ld (32
// bytes each, only the elements of `m`), for the first n lanes: an 8 x 16 transpose in
// registers (unpack pairs, then quads within each 128-bit lane: lane q of u[j] (v 0-3) and
// u[4 + j] (v 4-7) is lane 4q + j; then the two halves paired). The RGB stem's channels-last
// store (8 channels of 16 pixels -> 16 pixel rows) and the depthwise strips' channels-first one
// (8 pixels of 16 channels -> 16 channel rows).
inline __attribute__((always_inline)) void store_8x16t(const __m512 (&v)[8], float* y, int64_t ld, int64_t n,
                                                       __mmask8 m) {
    __m512 t[8], u[8];
#pragma GCC unroll 4
    for (int h = 0; h < 8; h += 4) {
        t[h + 0] = _mm512_unpacklo_ps(v[h + 0], v[h + 1]);  // v0 v1 v0 v1: lanes 4q, 4q + 1
        t[h + 1] = _mm512_unpackhi_ps(v[h + 0], v[h + 1]);  // lanes 4q + 2, 4q + 3
        t[h + 2] = _mm512_unpacklo_ps(v[h + 2], v[h + 3]);
        t[h + 3] = _mm512_unpackhi_ps(v[h + 2], v[h + 3]);
        u[h + 0] = _mm512_shuffle_ps(t[h + 0], t[h + 2], 0x44);  // lane 4q: v0 v1 v2 v3
        u[h + 1] = _mm512_shuffle_ps(t[h + 0], t[h + 2], 0xee);  // lane 4q + 1
        u[h + 2] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0x44);  // 4q + 2
        u[h + 3] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0xee);  // 4q + 3
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        // lo: lanes j (low 256 bits) and 4 + j; hi: 8 + j and 12 + j.
        const __m512 lo = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);  // u.l0 u.l1 u4.l0 u4.l1
        const __m512 hi = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xee);  // u.l2 u.l3 u4.l2 u4.l3
        const __m512 a = _mm512_shuffle_f32x4(lo, lo, 0xd8);           // u.l0 u4.l0 u.l1 u4.l1
        const __m512 b = _mm512_shuffle_f32x4(hi, hi, 0xd8);
        const __m512 q[2] = {a, b};
#pragma GCC unroll 2
        for (int k = 0; k < 2; ++k) {
            const int64_t p0 = 8 * k + j, p1 = 8 * k + 4 + j;
            const __m256 r0 = _mm512_castps512_ps256(q[k]), r1 = _mm512_extractf32x8_ps(q[k], 1);
            if (m == 0xff) {
                if (p0 < n) _mm256_storeu_ps(y + p0 * ld, r0);
                if (p1 < n) _mm256_storeu_ps(y + p1 * ld, r1);
            } else {
                if (p0 < n) _mm256_mask_storeu_ps(y + p0 * ld, m, r0);
                if (p1 < n) _mm256_mask_storeu_ps(y + p1 * ld, m, r1);
            }
        }
    }
}
#endif

// v[r] holds channels [0, VL) of pixel r (R adjacent pixels of a row); stores channel c's first n
// pixels at y + c * ld for c < nc (Y channels-first: ld is the plane). AVX-512: in registers
// (store_8x16t, R <= 8); elsewhere through a buffer on the stack.
template <int R>
inline __attribute__((always_inline)) void store_nchw(const V (&v)[R], float* y, int64_t ld, int64_t n, int64_t nc) {
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    if constexpr (R <= 8) {
        __m512 w[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) w[r] = r < R ? (__m512)v[r] : _mm512_setzero_ps();
        store_8x16t(w, y, ld, nc, __mmask8((1u << n) - 1));
        return;
    }
#endif
    alignas(64) float t[R][VL];
    for (int r = 0; r < R; ++r) std::memcpy(t[r], &v[r], sizeof(V));
    for (int64_t c = 0; c < nc; ++c)
        for (int64_t r = 0; r < n; ++r) y[c * ld + r] = t[r][c];
}

// ---- kernels 3x3 / 5x5, stride 1 / 2, dilation 1: a register window per kernel row.
// R adjacent output pixels of NB channel vectors: each input vector of a kernel row is loaded once
// into a register and feeds every kernel column's FMA that reads it (stride 1, 3x3, R = 8: 10 loads
// for 24 FMAs instead of 24 + 3), the KW weights of the row are loaded once too. The input is
// walked with a pointer bumped by C per pixel (keep_ptr): with the (R - 1) * S + KW offsets
// j * C precomputed instead, GCC spilled them and reloaded one from the stack per vector load
// (10-15% of the strip's time). CHECK: input columns outside [0, W) are skipped (they read as zero:
// the border pixels); only the first n <= R pixels are stored. TAIL: the first nc channels of the
// vector. FULLK: all KW kernel rows inside the image (nky == KW), their loop unrolled. Each sum
// gets its terms in the same order whatever R and NB: kernel rows, then columns, ascending. YT: the
// output is channels-first (yplane floats per channel; no residual), stored through store_nchw.
// NB = 2 (two channel vectors, session 17): 2R independent sums instead of R, so the FMAs of one
// strip no longer wait on each other's latency (8 chains of 9 dependent FMAs each barely cover
// the 2 FMAs / cycle x 4 cycles in flight); 2 x 8 sums + 2 x KW weights + 2 inputs fit the 32
// registers for 5x5 too. Hot A/B against NB = 1 (one process, alternating calls): 64 x 30x40
// 12.1 -> 9.9 us, 128 x 15x20 6.4 -> 4.8, 32 x 120x160 s2 63 -> 59, 672 x 14x14 5x5 85 -> 63,
// 72 x 56x56 5x5 s2 53 -> 43, 144 x 56x56 80 -> 79; none slower beyond noise.
inline __attribute__((always_inline)) void keep_ptr(const float*& p) { asm("" : "+r"(p)); }

template <int KW, int S, int R, bool CHECK, bool TAIL, ConvAct A, bool FULLK = false, bool YT = false, int NB = 1>
inline __attribute__((always_inline)) void nw_strip(const float* in, const float* wt, int64_t nky, int64_t ix0,
                                                    int64_t W, int64_t rstep, int64_t C, int64_t Cp, const V (&b)[NB],
                                                    const float* res, float* out, int64_t n, int64_t nc,
                                                    const ConvEpi& e, int64_t yplane = 0) {
    static_assert(NB == 1 || !TAIL, "the channel tail is one vector");
    constexpr int NI = (R - 1) * S + KW;
    V acc[NB][R];
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
        for (int v = 0; v < NB; ++v) acc[v][r] = b[v];
    const int64_t nk = FULLK ? KW : nky;
#pragma GCC unroll 5
    for (int64_t ky = 0; ky < nk; ++ky) {
        const float* row = in + ky * rstep;  // input column ix0 of the kernel row
        const float* w = wt + ky * KW * Cp;
        V wv[NB][KW];
#pragma GCC unroll 5
        for (int kx = 0; kx < KW; ++kx)
#pragma GCC unroll 2
            for (int v = 0; v < NB; ++v) wv[v][kx] = ld(w + kx * Cp + v * VL);
        const float* p = row;
#pragma GCC unroll 64
        for (int j = 0; j < NI; ++j, p += C) {
            keep_ptr(p);
            if (CHECK && (ix0 + j < 0 || ix0 + j >= W)) continue;
            V xj[NB];
#pragma GCC unroll 2
            for (int v = 0; v < NB; ++v) {
                xj[v] = TAIL ? ld_n(p, nc) : ld(p + v * VL);
                keep_in_reg(xj[v]);  // one load feeds every kernel column's FMA (else folded into each)
            }
#pragma GCC unroll 5
            for (int kx = KW - 1; kx >= 0; --kx) {
                const int d = j - kx;
                if (d < 0 || d % S != 0 || d / S >= R) continue;
#pragma GCC unroll 2
                for (int v = 0; v < NB; ++v) acc[v][d / S] += wv[v][kx] * xj[v];
            }
        }
    }
    if constexpr (YT) {
#pragma GCC unroll 2
        for (int v = 0; v < NB; ++v) {
#pragma GCC unroll 32
            for (int r = 0; r < R; ++r) acc[v][r] = act_v<A>(acc[v][r], e);
            store_nchw<R>(acc[v], out + v * VL * yplane, yplane, CHECK ? n : R, TAIL ? nc : VL);
        }
        return;
    }
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
        if (CHECK && r >= n) break;
#pragma GCC unroll 2
        for (int v = 0; v < NB; ++v) {
            V y = acc[v][r];
            if (res) y += TAIL ? ld_n(res + r * C, nc) : ld(res + r * C + v * VL);
            y = act_v<A>(y, e);
            if (TAIL) st_n(out + r * C, y, nc);
            else st(out + r * C + v * VL, y);
        }
    }
}

// Output rows [oy0, oy1): each strip of R pixels through every channel vector before the next
// strip, so that the input and output are swept front to back (the prefetchers follow; one channel
// vector at a time over a row read every C-th line: 32 x 112x112 ~106 against ~76 us in NCHW).
// YT: Y channels-first, planes of OH * OW floats (no residual).
// Channels [c0, c1) only (the two-thread split of a channels-first output: each thread whole
// planes, the same halves as the NCHW readers' own splits).
template <int KW, int S, ConvAct A, bool YT>
void nw_act(const Conv2DGeom& g, const float* x, const float* wp, const float* bias, const float* res, float* y,
            const ConvEpi& e, int64_t oy0, int64_t oy1, int64_t c0, int64_t c1) {
    // R = 8 pixels per strip (6 for 5x5 stride 2). 3x3 stride 1 ran R = 16 until session 16:
    // R = 8 is 15-28% faster on planes of 30x40 and up (hot in L2, A/B in one process: 16 x
    // 120x160 70 -> 50 us, 32 x 60x80 31 -> 22, 144 x 56x56 97 -> 77), equal on smaller ones; 10
    // and 12 are as fast as 8, 14 as slow as 16 (the fully unrolled strip outgrows the op cache).
    constexpr int R = KW == 5 && S == 2 ? 6 : 8;
    const int64_t C = g.C, Cp = (C + 15) / 16 * 16, W = g.W, OW = g.OW, rstep = W * C;
    const int64_t full = c0 + (c1 - c0) / VL * VL, rest = c1 - full;
    const int64_t yplane = g.OH * OW, ypix = YT ? 1 : C, ych = YT ? yplane : 1;  // Y's strides
    const int64_t lo = std::min(OW, (g.pw + S - 1) / S);  // first pixel whose window starts inside
    const int64_t span = W - KW + g.pw;                    // last window start inside: ox * S - pw <= W - KW
    const int64_t hi = span < 0 ? 0 : std::min(OW, span / S + 1);  // pixels [lo, hi) read inside the row
    for (int64_t oy = oy0; oy < oy1; ++oy) {
        const int64_t iy0 = oy * g.sh - g.ph;
        const int64_t ky0 = iy0 >= 0 ? 0 : -iy0;
        const int64_t nky = std::max<int64_t>(0, std::min<int64_t>(g.kh, g.H - iy0) - ky0);
        const float* xr = x + (iy0 + ky0) * rstep;
        const float* wt = wp + ky0 * KW * Cp;
        float* yr = y + oy * OW * ypix;
        const float* rr = res ? res + oy * OW * C : nullptr;
        // RR pixels from ox through every channel vector (CHECK: a border pixel, RR = 1; FULLK: all
        // KW kernel rows inside the image, their loop unrolled).
        auto strip = [&]<int RR, bool CHECK, bool FULLK>(int64_t ox, int64_t n) {
            const int64_t ix0 = ox * S - g.pw;
            const float* xs = xr + ix0 * C;
            float* ys = yr + ox * ypix;
            const float* rs = rr ? rr + ox * C : nullptr;
            // NB channel vectors from channel c (TAIL: the last nc < VL channels).
            auto vectors = [&]<int NB, bool TAIL>(int64_t c, const V(&b)[NB], int64_t nc) {
                nw_strip<KW, S, RR, CHECK, TAIL, A, FULLK, YT, NB>(xs + c, wt + c, nky, ix0, W, rstep, C, Cp, b,
                                                                   rs ? rs + c : nullptr, ys + c * ych, n, nc, e,
                                                                   yplane);
            };
            int64_t c = c0;
            for (; c + 2 * VL <= full; c += 2 * VL)
                vectors.template operator()<2, false>(c, {ld(bias + c), ld(bias + c + VL)}, VL);
            if (c < full) vectors.template operator()<1, false>(c, {ld(bias + c)}, VL);
            if (rest) vectors.template operator()<1, true>(full, {ld_n(bias + full, rest)}, rest);
        };
        // A checked strip of R pixels over the left border, strips of R inside, checked strips of R
        // (the last one partial) over the right border.
        auto row = [&]<bool FULLK>() {
            int64_t ox = 0;
            if (lo > 0) strip.template operator()<R, true, FULLK>(0, std::min<int64_t>(R, OW)), ox = R;
            for (; ox + R <= hi; ox += R) strip.template operator()<R, false, FULLK>(ox, R);
            for (; ox < OW; ox += R) strip.template operator()<R, true, FULLK>(ox, std::min<int64_t>(R, OW - ox));
        };
        // 3x3 rows with all three kernel rows inside: their loop unrolled (5x5 unrolled measured
        // 5-10% slower: its strip's code no longer fits the loop buffers).
        if constexpr (KW == 3)
            if (nky == KW) {
                row.template operator()<true>();
                continue;
            }
        row.template operator()<false>();
    }
    if constexpr (YT)
        for (int64_t c = c0; c < c1; ++c) deferred_act<A>(y + c * yplane + oy0 * OW, (oy1 - oy0) * OW, e);
    else if (c1 - c0 == C)
        deferred_act<A>(y + oy0 * OW * C, (oy1 - oy0) * OW * C, e);
    else
        for (int64_t p = oy0 * OW; p < oy1 * OW; ++p) deferred_act<A>(y + p * C + c0, c1 - c0, e);
}

// y_nchw: Y channels-first (nhwc_dw_writes_nchw(g) holds; no residual).
// Channels [c0, c1): only where nhwc_dw_writes_nchw(g) (else all, NhwcDepthwise::run checks).
template <ConvAct A>
void nd_act(const Conv2DGeom& g, const float* x, const float* wp, const float* bias, const float* res, float* y,
            const ConvEpi& e, int64_t oy0, int64_t oy1, bool y_nchw, int64_t c0, int64_t c1) {
    if (nhwc_dw_writes_nchw(g)) {
        auto go = [&]<bool YT>(int64_t ca, int64_t cb) {
            if (g.kw == 3 && g.sw == 1)
                return nw_act<3, 1, A, YT>(g, x, wp, bias, res, y, e, oy0, oy1, ca, cb);
            if (g.kw == 3 && g.sw == 2)
                return nw_act<3, 2, A, YT>(g, x, wp, bias, res, y, e, oy0, oy1, ca, cb);
            if (g.kw == 5 && g.sw == 1)
                return nw_act<5, 1, A, YT>(g, x, wp, bias, res, y, e, oy0, oy1, ca, cb);
            return nw_act<5, 2, A, YT>(g, x, wp, bias, res, y, e, oy0, oy1, ca, cb);
        };
        if (!y_nchw) return go.template operator()<false>(c0, c1);
        // Channels-first output: 4 VL channels at a time through all the rows, so that the stores
        // fill 4 VL planes front to back. With the rows outermost every row's strips stored into
        // all C planes at once: MobileNetV3's 672 x 14x14 3x3 took 105 us against 41 channels-last,
        // now 60; its eight such steps 471 -> 388 us, EfficientNet-B0's twelve 974 -> 884 (2 VL:
        // 390 / 905, 8 VL: 381 / 913; the 7x7 planes the same).
        const int64_t c_end = c1 < 0 ? g.C : c1;
        for (int64_t c = c0; c < c_end; c += 4 * VL)
            go.template operator()<true>(c, std::min<int64_t>(c + 4 * VL, c_end));
        return;
    }
    if (g.kw == 3 && g.sw == 1) return nd_rows<3, 1, A>(g, x, wp, bias, res, y, e, oy0, oy1);
    if (g.kw == 3 && g.sw == 2) return nd_rows<3, 2, A>(g, x, wp, bias, res, y, e, oy0, oy1);
    if (g.kw == 5 && g.sw == 1) return nd_rows<5, 1, A>(g, x, wp, bias, res, y, e, oy0, oy1);
    if (g.kw == 5 && g.sw == 2) return nd_rows<5, 2, A>(g, x, wp, bias, res, y, e, oy0, oy1);
    nd_rows<0, 0, A>(g, x, wp, bias, res, y, e, oy0, oy1);
}

void nhwc_dw(const Conv2DGeom& g, const float* x, const float* wp, const float* bias, const float* res, float* y,
             const ConvEpi& e, int64_t oy0, int64_t oy1, bool y_nchw, int64_t c0, int64_t c1) {
    with_act(e.act, [&](auto a) { nd_act<decltype(a)::value>(g, x, wp, bias, res, y, e, oy0, oy1, y_nchw, c0, c1); });
}

// ------------------------------------------------------------------------- few outputs (dot)

// A dense conv with fewer output channels than a vector holds (detection heads: 256 -> 12 3x3 on
// 4x5, 128 -> 8 1x1 on 15x20), channels-last: each output is a dot product over K = taps x C,
// summed along the input channels and reduced across lanes at the end. An accumulator holds G
// outputs (nhwc_dot_group: 4, 2 or 1, dividing M) of L = VL / G lanes each: X's L channels are
// loaded repeated G times (one broadcast load) and multiplied by a weight vector holding those L
// channels of G outputs, so that the reduction's first log2(G) rounds cost nothing (6 outputs
// with G = 2, 12 with G = 4). Blocks of PB pixels x M / G accumulators in registers (PB + M / G loads a block's
// M / G x PB FMAs); their sums, in the channels-last output's order, are reduced L accumulators at
// a time (reduce_acc) into VL consecutive outputs, stored as one vector: in registers where a
// block holds a multiple of L accumulators, else parked in a 16-pixel chunk's buffer first.
// Weights packed [tap][L channels][M / G][G x L] (zero past C), then the bias tiled over 16 x M.
// x: the image zero-padded where it has padding (NhwcDot::pad_input), rows of g.W pixels (the
// padded width; g.ph / g.pw unused).

// L consecutive floats, repeated VL / L times (L = VL: one plain load): one broadcast load.
template <int L, int... I>
inline V rep_impl(const float* p, std::integer_sequence<int, I...>) {
    typedef float VS __attribute__((vector_size(L * sizeof(float))));
    VS s;
    std::memcpy(&s, p, sizeof(s));
    return __builtin_shufflevector(s, s, (I % L)...);
}
template <int L>
inline V ld_rep(const float* p) {
    if constexpr (L == VL) return ld(p);
    else if constexpr (L == 1) return bc(*p);
#if JIFFY_CONV_VL == 16 && defined(__AVX512F__)
    else if constexpr (L == 4) return (V)_mm512_broadcast_f32x4(_mm_loadu_ps(p));
    else if constexpr (L == 8) return (V)_mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double*)p)));
#elif JIFFY_CONV_VL == 8 && defined(__AVX2__)
    else if constexpr (L == 4) return (V)_mm256_broadcast_ps((const __m128*)p);
    else if constexpr (L == 2) return (V)_mm256_castpd_ps(_mm256_broadcast_sd((const double*)p));
#endif
    else return rep_impl<L>(p, std::make_integer_sequence<int, VL>{});
}

// The reduction's rounds: pairs of vectors (x, y) whose lanes hold groups of 2h lanes (each group
// one output's partial sums) -> one vector of groups of h: lo + hi lane by lane, the masks picking
// each group's halves. Groups of 8 or 16 lanes (whole 128-bit blocks): x's halved groups then y's
// (block shuffles); groups of 4 or 2: within each 128-bit block, x's halved groups then y's
// (in-lane shuffles, vshufps: cross-block two-source permutes cost ~2x on Zen 4). The order this
// leaves is undone by one permute at the end (dot_order).
constexpr void dot_round(int h, int* lo, int* hi) {
    if (2 * h >= 8) {
        for (int g = 0; g < VL / (2 * h); ++g)
            for (int i = 0; i < h; ++i) {
                lo[g * h + i] = g * 2 * h + i, hi[g * h + i] = g * 2 * h + h + i;
                lo[VL / 2 + g * h + i] = VL + g * 2 * h + i, hi[VL / 2 + g * h + i] = VL + g * 2 * h + h + i;
            }
    } else {
        const int bl = VL < 4 ? VL : 4;  // a 128-bit block (VL < 4: the whole vector)
        for (int b = 0; b < VL; b += bl)
            for (int g = 0; g < bl / (2 * h); ++g)
                for (int i = 0; i < h; ++i) {
                    lo[b + g * h + i] = b + g * 2 * h + i, hi[b + g * h + i] = b + g * 2 * h + h + i;
                    lo[b + bl / 2 + g * h + i] = VL + b + g * 2 * h + i;
                    hi[b + bl / 2 + g * h + i] = VL + b + g * 2 * h + h + i;
                }
    }
}

// Lane k of the rounds' result holds output order[k] of the L accumulators (accumulator a's output
// j is a * VL / L + j): the rounds run on labels.
template <int L>
constexpr std::array<int, VL> dot_order() {
    int lab[L][VL] = {};
    for (int a = 0; a < L; ++a)
        for (int l = 0; l < VL; ++l) lab[a][l] = a * (VL / L) + l / L;
    int n = L;
    for (int h = L / 2; h >= 1; h /= 2, n /= 2) {
        int lo[VL] = {}, hi[VL] = {};
        dot_round(h, lo, hi);
        for (int j = 0; j < n / 2; ++j) {
            int out[VL] = {};
            for (int k = 0; k < VL; ++k) out[k] = lo[k] < VL ? lab[2 * j][lo[k]] : lab[2 * j + 1][lo[k] - VL];
            for (int k = 0; k < VL; ++k) lab[j][k] = out[k];
        }
    }
    std::array<int, VL> r{};
    for (int k = 0; k < VL; ++k) r[size_t(k)] = lab[0][k];
    return r;
}

template <int H>
constexpr std::array<int, 2 * VL> dot_masks() {  // lo then hi (compile-time: the shuffles' immediates)
    int lo[VL] = {}, hi[VL] = {};
    dot_round(H, lo, hi);
    std::array<int, 2 * VL> m{};
    for (int k = 0; k < VL; ++k) m[size_t(k)] = lo[k], m[size_t(VL + k)] = hi[k];
    return m;
}
template <int H, int... I>
inline __attribute__((always_inline)) V dot_pair(V x, V y, std::integer_sequence<int, I...>) {
    constexpr std::array<int, 2 * VL> m = dot_masks<H>();
    return __builtin_shufflevector(x, y, m[I]...) + __builtin_shufflevector(x, y, m[VL + I]...);
}
// Rounds from groups of 2H lanes on N vectors.
template <int H, int N>
inline __attribute__((always_inline)) void dot_rounds(V* v) {
    if constexpr (H >= 1) {
#pragma GCC unroll 16
        for (int j = 0; j < N / 2; ++j) v[j] = dot_pair<H>(v[2 * j], v[2 * j + 1], std::make_integer_sequence<int, VL>{});
        dot_rounds<H / 2, N / 2>(v);
    }
}
template <int L, int... I>
inline __attribute__((always_inline)) V dot_unorder(V v, std::integer_sequence<int, I...>) {
    constexpr std::array<int, VL> order = dot_order<L>();
    constexpr std::array<int, VL> back = [&] {
        std::array<int, VL> b{};  // output o sits at lane k where order[k] == o
        for (int k = 0; k < VL; ++k) b[size_t(order[size_t(k)])] = k;
        return b;
    }();
    return __builtin_shufflevector(v, v, back[I]...);
}

// v[0 .. L): accumulators of VL / L outputs, L lanes each -> one vector of their VL sums in order
// (accumulator a's output j at lane a * VL / L + j); v is overwritten.
template <int L>
inline __attribute__((always_inline)) V reduce_acc(V* v) {
    dot_rounds<L / 2, L>(v);
    if constexpr (L == 1) return v[0];
    else return dot_unorder<L>(v[0], std::make_integer_sequence<int, VL>{});
}

struct DotArgs {
    int64_t C, T;           // channels, taps
    const int64_t* toff;    // each tap's offset in floats from the pixel's first input
    int64_t OW, sh, sw, Wp;  // output row width, strides, the padded input's row width in pixels
};

// The output grouping of M outputs: G outputs an accumulator, PB pixels a block, DIRECT: a
// block's PB x M / G accumulators are whole reduction groups of L (reduced in registers).
template <int M>
struct DotShape {
    static constexpr int G = nhwc_dot_group(M, VL);
    static constexpr int MG = M / G, L = VL / G, kMaxAcc = VL == 16 ? 24 : 12;
    static constexpr int pb_direct() {
        for (int p = 1; p <= 16; p *= 2)
            if (p * MG % L == 0 && p * MG <= kMaxAcc) return p;
        return 0;
    }
    static constexpr int PB_D = pb_direct();
    static constexpr bool DIRECT = PB_D > 0;
    static constexpr int PB = DIRECT ? PB_D : std::max(1, std::min(16, kMaxAcc / MG));
};

// The last crem < L channels of a tap (C not a multiple of L): zeros past C (their weights are
// zero too). Out of line: its copies would crowd the main loop's registers.
template <int PB, int MG, int L>
__attribute__((noinline)) void dot_tail(V (&acc)[PB][MG], const float* const* base, int64_t off, int64_t crem,
                                        const float* w) {
    for (int i = 0; i < PB; ++i) {
        V xv;
        if constexpr (L == VL) {
            xv = ld_n(base[i] + off, crem);
        } else {
            float tl[L] = {};
            for (int64_t c = 0; c < crem; ++c) tl[c] = base[i][off + c];
            xv = ld_rep<L>(tl);
        }
        for (int g = 0; g < MG; ++g) acc[i][g] += xv * ld(w + g * VL);
    }
}

// The sums of PB output pixels (their first inputs at base[0 .. PB)) x M / G accumulators: into
// s[i * MG + g] (one vector each), or DIRECT: reduced here, plus the bias (bias_t: tiled from the
// block's first output), stored to y (PB x M floats).
// Out of line: inlined into dot_rows with its other blocks GCC kept the sums on the stack.
template <int M, int PB, bool DIRECT>
__attribute__((noinline)) void dot_block(const DotArgs& a, const float* const* base, const float* wp, V* s, float* y,
                      const float* bias_t) {
    using S = DotShape<M>;
    constexpr int MG = S::MG, L = S::L;
    V acc[PB][MG];
#pragma GCC unroll 16
    for (int i = 0; i < PB; ++i)
#pragma GCC unroll 16
        for (int g = 0; g < MG; ++g) acc[i][g] = V{};
    const int64_t ncl = a.C / L, crem = a.C % L;
    const float* w = wp;
    for (int64_t t = 0; t < a.T; ++t) {
        const int64_t off = a.toff[t];
        for (int64_t cl = 0; cl < ncl; ++cl, w += MG * VL) {
            // MG weight vectors live, then one pixel's X at a time (PB x MG sums + MG + 1 registers)
            V wv[MG];
#pragma GCC unroll 16
            for (int g = 0; g < MG; ++g) {
                wv[g] = ld(w + g * VL);
                if constexpr (PB > 1) keep_in_reg(wv[g]);  // one load, PB FMAs
            }
#pragma GCC unroll 16
            for (int i = 0; i < PB; ++i) {
                V xv = ld_rep<L>(base[i] + off + cl * L);
                if constexpr (MG > 1) keep_in_reg(xv);
#pragma GCC unroll 16
                for (int g = 0; g < MG; ++g) acc[i][g] += xv * wv[g];
            }
        }
        if (crem) dot_tail<PB, MG, L>(acc, base, off + ncl * L, crem, w), w += MG * VL;
    }
    if constexpr (DIRECT) {
        static_assert(PB * MG % L == 0);
#pragma GCC unroll 16
        for (int j = 0; j < PB * MG; j += L) {
            V r[L];
#pragma GCC unroll 16
            for (int k = 0; k < L; ++k) r[k] = acc[(j + k) / MG][(j + k) % MG];
            st(y + j * S::G, reduce_acc<L>(r) + ld(bias_t + j * S::G));
        }
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < PB; ++i)
#pragma GCC unroll 16
            for (int g = 0; g < MG; ++g) s[i * MG + g] = acc[i][g];
    }
}

// Output pixels [p0, p1): 16-pixel chunks.
template <int M>
void dot_rows(const DotArgs& a, const float* x, const float* wp, const float* bias_t, const float* res, float* y,
              const ConvEpi& e, int64_t p0, int64_t p1) {
    using S = DotShape<M>;
    constexpr int Q = 16, MG = S::MG, L = S::L, G = S::G, PB = S::PB;
    alignas(64) V s[Q * MG + L];
    const float* base[Q];  // each pixel's first input
    int64_t oy = p0 / a.OW, ox = p0 % a.OW;
    for (int64_t c0 = p0; c0 < p1; c0 += Q) {
        const int64_t q = std::min<int64_t>(Q, p1 - c0);
        for (int64_t i = 0; i < q; ++i) {
            base[i] = x + (oy * a.sh * a.Wp + ox * a.sw) * a.C;
            if (++ox == a.OW) ox = 0, ++oy;
        }
        float* yc = y + c0 * M;
        int64_t i = 0;
        if constexpr (S::DIRECT)
            for (; i + PB <= q; i += PB) dot_block<M, PB, true>(a, base + i, wp, nullptr, yc + i * M, bias_t);
        const int64_t i0 = i;  // pixels [i0, q) through the parked sums
        // the rest in blocks of PB (or 8), 4, 2, 1 (the 4 pixels past 16 of a 4x5 head: one block)
        auto rest = [&](auto pc) {
            constexpr int P = decltype(pc)::value;
            if constexpr (P <= PB)
                for (; i + P <= q; i += P) dot_block<M, P, false>(a, base + i, wp, s + (i - i0) * MG, nullptr, nullptr);
        };
        if constexpr (!S::DIRECT) rest(std::integral_constant<int, PB>{});
        rest(std::integral_constant<int, 8>{});
        rest(std::integral_constant<int, 4>{});
        rest(std::integral_constant<int, 2>{});
        rest(std::integral_constant<int, 1>{});
        const int64_t n = (q - i0) * MG;  // accumulators; past them the reduction reads zeros
        for (int64_t j = n; j < (n + L - 1) / L * L; ++j) s[j] = V{};
        for (int64_t j = 0; j < n; j += L) {
            V r[L];
#pragma GCC unroll 16
            for (int k = 0; k < L; ++k) r[k] = s[j + k];
            const V v = reduce_acc<L>(r) + ld(bias_t + j * G);
            const int64_t left = (n - j) * G;
            if (left >= VL) st(yc + i0 * M + j * G, v);
            else st_n(yc + i0 * M + j * G, v, left);
        }
        if (res || e.act != ConvAct::kNone || e.clamp || e.affine)
            epi_row(yc, res ? res + c0 * M : nullptr, q * M, e);
    }
}

template <int... I>
void nhwc_dot_m(int64_t M, const DotArgs& a, const float* x, const float* wp, const float* bias_t, const float* res,
                float* y, const ConvEpi& e, int64_t p0, int64_t p1, std::integer_sequence<int, I...>) {
    ((M == I + 1 ? dot_rows<I + 1>(a, x, wp, bias_t, res, y, e, p0, p1) : void()), ...);
}

void nhwc_dot(const Conv2DGeom& g, const float* x, const float* wp, const float* bias_t, const float* res, float* y,
              const ConvEpi& e, int64_t p0, int64_t p1) {
    int64_t toff[64];
    const int64_t T = g.kh * g.kw, Wp = g.W;  // g.W: the padded width (NhwcDot::run)
    if (!NhwcDot::supports(g)) return;        // NhwcDot::run checks
    for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx) toff[ky * g.kw + kx] = (ky * g.dh * Wp + kx * g.dw) * g.C;
    const DotArgs a{g.C, T, toff, g.OW, g.sh, g.sw, Wp};
    nhwc_dot_m(g.M, a, x, wp, bias_t, res, y, e, p0, p1, std::make_integer_sequence<int, int(NhwcDot::kMaxM)>{});
}

// ------------------------------------------------------------------------- transpose

// y[j][i] = x[i][j] for i in [i0, i1), j in [j0, j1) of a rows x cols matrix (4-byte elements,
// moved bit for bit): VL x VL blocks transposed in registers (transpose_block), masked at the edges.
void transpose32(const float* x, float* y, int64_t rows, int64_t cols, int64_t i0, int64_t i1, int64_t j0,
                 int64_t j1) {
    for (int64_t ib = i0; ib < i1; ib += VL) {
        const int64_t nr = std::min<int64_t>(VL, i1 - ib);
        for (int64_t jb = j0; jb < j1; jb += VL) {
            const int64_t nc = std::min<int64_t>(VL, j1 - jb);
            V r[VL];
            const float* src = x + ib * cols + jb;
#pragma GCC unroll 16
            for (int i = 0; i < VL; ++i) r[i] = i < nr ? (nc == VL ? ld(src + i * cols) : ld_n(src + i * cols, nc)) : V{};
            transpose_block(r);
            float* dst = y + jb * rows + ib;
#pragma GCC unroll 16
            for (int j = 0; j < VL; ++j) {
                if (j >= nc) break;
                if (nr == VL) st(dst + j * rows, r[j]);
                else st_n(dst + j * rows, r[j], nr);
            }
        }
    }
}

}  // namespace

void JIFFY_CONV_CAT(conv_nhwc_pw_, JIFFY_CONV_SUFFIX)(int64_t K, int64_t M, const float* x, const float* wp,
                                                      const float* bias, const float* res, float* y, const ConvEpi& e,
                                                      int64_t p0, int64_t p1, int64_t x_plane) {
    nhwc_pw(K, M, x, wp, bias, res, y, e, p0, p1, x_plane);
}

void JIFFY_CONV_CAT(conv_nhwc_pw_scale_, JIFFY_CONV_SUFFIX)(int64_t K, int64_t Mp, const float* wp, const float* s,
                                                            float* dst) {
    // Mp / NR panels of K x NR: row k of each times s[k]; then the bias (Mp floats) as it is.
    for (int64_t q = 0; q < Mp; q += NR) {
        const float* src = wp + q * K;
        float* d = dst + q * K;
        for (int64_t k = 0; k < K; ++k) {
            const V sk = bc(s[k]);
#pragma GCC unroll 4
            for (int j = 0; j < NR; j += VL) st(d + k * NR + j, ld(src + k * NR + j) * sk);
        }
    }
    std::memcpy(dst + K * Mp, wp + K * Mp, size_t(Mp) * sizeof(float));
}

void JIFFY_CONV_CAT(transpose32_, JIFFY_CONV_SUFFIX)(const float* x, float* y, int64_t rows, int64_t cols,
                                                      int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    transpose32(x, y, rows, cols, i0, i1, j0, j1);
}

void JIFFY_CONV_CAT(conv_nhwc_dot_, JIFFY_CONV_SUFFIX)(const Conv2DGeom& g, const float* x, const float* wp,
                                                       const float* bias_t, const float* res, float* y,
                                                       const ConvEpi& e, int64_t p0, int64_t p1) {
    nhwc_dot(g, x, wp, bias_t, res, y, e, p0, p1);
}

void JIFFY_CONV_CAT(conv_nhwc_dw_, JIFFY_CONV_SUFFIX)(const Conv2DGeom& g, const float* x, const float* wp,
                                                      const float* bias, const float* res, float* y, const ConvEpi& e,
                                                      int64_t oy0, int64_t oy1, bool y_nchw, int64_t c0,
                                                      int64_t c1) {
    nhwc_dw(g, x, wp, bias, res, y, e, oy0, oy1, y_nchw, c0, c1);
}

}  // namespace jiffy::kernels

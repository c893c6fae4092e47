// AmxGemm's and AmxConv's preparation (any build) and the AMX capability check; the run paths
// are kernels/x86/amx_gemm.cpp and amx_conv.cpp (compiled with the AMX flags), stubs elsewhere.
#include "kernels/amx.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace jiffy::kernels {

bool amx_usable() {
#if defined(__x86_64__)
    static const bool ok = [] {
        const char* env = std::getenv("JIFFY_AMX");
        if (active_isa() != Isa::kAvx512 || (env && std::strcmp(env, "0") == 0)) return false;
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
        const bool tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
        if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
        const bool avx512bf16 = (a >> 5) & 1;
        if (!tile || !bf16 || !avx512bf16) return false;
        // The OS must enable the tile state (XCR0 bits 17 and 18) and grant it to this process
        // (Linux 5.16 and later: ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA).
        unsigned lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        if ((lo & (3u << 17)) != (3u << 17)) return false;
        constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
        return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
    }();
    return ok;
#else
    return false;
#endif
}

int amx_parts() {
    static const int parts = [] {
        const char* e = std::getenv("JIFFY_AMX");
        return e && std::strcmp(e, "x2") == 0 ? 2 : 3;
    }();
    return parts;
}

bool amx_exact_weights() {
    const char* e = std::getenv("JIFFY_AMX");
    return e && std::strcmp(e, "x3") == 0;
}

namespace {

// Round to nearest even BF16 (NaN kept quiet), as VCVTNE2PS2BF16 does.
uint16_t bf16_rne(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
float bf16_f(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// v split into `parts` BF16 parts at d[0], d[stride], ... (each rounding what the ones before it
// left, as the kernels' vector split does); false where the parts cannot carry v (NaN, an
// infinity, or a value that rounds to one).
bool split_value(float v, int parts, uint16_t* d, int64_t stride = 512) {
    bool ok = true;
    for (int part = 0; part < parts; ++part) {
        const uint16_t h = bf16_rne(v);
        d[part * stride] = h;
        v -= bf16_f(h);
        if (part == 0 && !std::isfinite(v)) ok = false;
    }
    return ok;
}

}  // namespace

AmxGemm::AmxGemm(int64_t M, int64_t K, int64_t N, int parts) : M_(M), K_(K), N_(N), parts_(parts == 3 ? 3 : 2) {
    Mp_ = (M + 31) / 32 * 32;
    Kp_ = (K + 31) / 32 * 32;
    Np_ = (N + 31) / 32 * 32;
    // The split A whole where it is at most kAmxWholeA bytes (every column block of B then
    // passes over all of it: B read once); past that in chunks of ~kAmxChunkA bytes of rows,
    // which stay in L2 while B's column blocks pass (B read once per chunk). ConvNeXt-T's
    // 3136 x 384 x 96 read a 7 MB split A three times from L3 (150 GFLOP/s); its MatMuls 44.4 ->
    // 32-35 ms (256 KiB to 1 MiB chunks within the noise).
    const int64_t row_bytes = Kp_ * parts_ * 2;
    mc_ = Mp_;
    if (Mp_ * row_bytes > kAmxWholeA) mc_ = std::clamp<int64_t>(kAmxChunkA / row_bytes / 32 * 32, 32, Mp_);
}

bool AmxGemm::pack_b(const float* B, int64_t ldb, bool trans_b, uint16_t* dst) const {
    bool ok = true;
    // hi and mid of B[kb * 32 + kk][nb * 16 + c] at dst[((nb * KB + kb) * 2 + part) * 512 + (kk /
    // 2) * 32 + c * 2 + kk % 2], lo (BF16x3) at the same place in lo[(nb * KB + kb) * 512 + ...]
    // after all of them: a run without the lo parts reads one contiguous stream.
    const int64_t KB = Kp_ / 32;
    uint16_t* lo = dst + Np_ * Kp_ * 2;
    for (int64_t nb = 0; nb < Np_ / 16; ++nb)
        for (int64_t kb = 0; kb < KB; ++kb)
            for (int64_t kk = 0; kk < 32; ++kk)
                for (int64_t c = 0; c < 16; ++c) {
                    const int64_t k = kb * 32 + kk, n = nb * 16 + c, at = (kk / 2) * 32 + c * 2 + kk % 2;
                    const float v = k < K_ && n < N_ ? (trans_b ? B[n * ldb + k] : B[k * ldb + n]) : 0.0f;
                    uint16_t p[3];
                    ok &= split_value(v, parts_, p, 1);
                    uint16_t* d = dst + (nb * KB + kb) * 2 * 512 + at;
                    d[0] = p[0];
                    d[512] = p[1];
                    if (parts_ == 3) lo[(nb * KB + kb) * 512 + at] = p[2];
                }
    return ok;
}

AmxConv::AmxConv(const Conv2DGeom& g, int parts) : g_(g), parts_(parts == 3 ? 3 : 2) {
    K_ = g.C * g.kh * g.kw;
    Kp_ = (K_ + 31) / 32 * 32;
    Mp_ = (g.M + 31) / 32 * 32;
    P_ = g.OH * g.OW;
    pointwise_ = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 &&
                 g.OH == g.H && g.OW == g.W;
    // Pixel tile: its split input (2 x parts bytes per value) within ~768 KiB of L2, in units of
    // 32 pixels; planes of up to 128 pixels in one tile (their weights then stream once).
    const int64_t p_up = (P_ + 31) / 32 * 32;
    ptile_ = std::clamp<int64_t>((786432 / (Kp_ * 2 * parts_)) / 32 * 32, 32, 512);
    if (p_up <= 128) ptile_ = std::max(ptile_, p_up);
    ptile_ = std::min(ptile_, p_up);
}

bool AmxConv::pack_w(const float* W, uint16_t* dst) const {
    // dst[((mb * KB + kb) * parts + part) * 512 + r * 32 + kk] = part of W[mb * 16 + r][kb * 32 + kk].
    const int64_t KB = Kp_ / 32;
    bool ok = true;
    for (int64_t mb = 0; mb < Mp_ / 16; ++mb)
        for (int64_t kb = 0; kb < KB; ++kb)
            for (int64_t r = 0; r < 16; ++r)
                for (int64_t kk = 0; kk < 32; ++kk) {
                    const int64_t m = mb * 16 + r, k = kb * 32 + kk;
                    const float v = m < g_.M && k < K_ ? W[m * K_ + k] : 0.0f;
                    ok &= split_value(v, parts_, dst + (mb * KB + kb) * parts_ * 512 + r * 32 + kk);
                }
    return ok;
}

#if !defined(__x86_64__)
bool AmxConv::run(const float*, const uint16_t*, const float*, const float*, float*, float*, const ConvEpi&, int64_t,
                  int64_t, int64_t, int64_t) const {
    return false;
}
bool AmxGemm::run(const float*, int64_t, const uint16_t*, const float*, float*, int64_t, float*, int64_t, int64_t,
                  const float*, const ConvEpi*, int64_t, int64_t) const {
    return false;
}
#endif

}  // namespace jiffy::kernels

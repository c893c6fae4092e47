// Winograd F(2,3) / F(4,3) against the direct conv (ConvGemm) on the 3x3 stride-1 layers of
// ResNet-50 and PP-OCR, timed interleaved (the machine is shared and noisy: each round runs every
// variant once, the medians of thread CPU time are compared), plus each variant's max error against a float64
// direct conv relative to the output's largest magnitude, in both orientations (normal and
// transposed), with the cost model's estimated speedups.
//   jiffy_winograd_bench [rounds] [isa: avx512|avx2|scalar]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "kernels/conv.h"
#include "kernels/winograd.h"

using namespace jiffy::kernels;

namespace {

// This thread's CPU time: the machine is shared by many processes, and a multi-millisecond conv
// is almost always preempted once (a ~10 ms time slice of another process) in wall time.
double now_us() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
}

struct Shape {
    const char* what;
    int64_t C, M, HW;
    int64_t W = 0;          // 0: HW (square)
    int64_t kh = 3, kw = 3;  // 1x3: pad 1 along W only (openWakeWord); 3x1: no pad
};

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
    Isa isa = active_isa();
    if (argc > 2)
        isa = !std::strcmp(argv[2], "avx2")     ? Isa::kAvx2
              : !std::strcmp(argv[2], "scalar") ? Isa::kScalar
                                                : isa;
    const Shape shapes[] = {
        {"resnet50 stage1", 64, 64, 56},   {"resnet50 stage2", 128, 128, 28},
        {"resnet50 stage3", 256, 256, 14}, {"resnet50 stage4", 512, 512, 7},
        {"ppocr 16ch 160", 16, 16, 160},   {"ppocr 32ch 80", 32, 32, 80},
        {"ppocr 64->96 40", 64, 96, 40},   {"ppocr 96ch 20", 96, 96, 20},
        {"det 96->24 160", 96, 24, 160},   {"det 96->24 40", 96, 24, 40},
        {"small 32ch 28", 32, 32, 28},     {"wide 256->64 56", 256, 64, 56},
        {"256ch 7", 256, 256, 7},          {"128ch 14", 128, 128, 14},
        {"64ch 28", 64, 64, 28},
        {"line 32ch 160", 32, 32, 160},    {"line 64->32 160", 64, 32, 160},
        {"line 64ch 80", 64, 64, 80},      {"line 64ch 40", 64, 64, 40},
        {"yolo 32ch 40", 32, 32, 40},      {"yolo 64ch 20", 64, 64, 20},
        {"yolo 128ch 10", 128, 128, 10},
        // openWakeWord's embedding_model (H x W planes, 1x3 pads 0,1,0,1 / 3x1 unpadded)
        {"emb 1x3 24 74x32", 24, 24, 74, 32, 1, 3}, {"emb 3x1 24 74x32", 24, 24, 74, 32, 3, 1},
        {"emb 1x3 24>48 36x16", 24, 48, 36, 16, 1, 3}, {"emb 3x1 48 36x16", 48, 48, 36, 16, 3, 1},
        {"emb 1x3 48 34x16", 48, 48, 34, 16, 1, 3}, {"emb 3x1 48 34x16", 48, 48, 34, 16, 3, 1},
        {"emb 1x3 48>72 32x8", 48, 72, 32, 8, 1, 3}, {"emb 3x1 72 32x8", 72, 72, 32, 8, 3, 1},
        {"emb 1x3 72 30x8", 72, 72, 30, 8, 1, 3}, {"emb 3x1 72 30x8", 72, 72, 30, 8, 3, 1},
        {"emb 1x3 72>96 14x4", 72, 96, 14, 4, 1, 3}, {"emb 3x1 96 14x4", 96, 96, 14, 4, 3, 1},
        {"emb 1x3 96 12x4", 96, 96, 12, 4, 1, 3}, {"emb 3x1 96 12x4", 96, 96, 12, 4, 3, 1},
        {"emb 1x3 96 10x2", 96, 96, 10, 2, 1, 3}, {"emb 3x1 96 10x2", 96, 96, 10, 2, 3, 1},
        // 3x3 stride (2, 1) convs of an SVTR-like recognizer as 1x3 convs over their row stacks
        // (ops/conv.cpp SubsampledConvKernel: 3 C channels, OH x W planes)
        {"rows 1x3 96>64 12x160", 96, 64, 12, 160, 1, 3}, {"rows 1x3 192>120 6x160", 192, 120, 6, 160, 1, 3},
        {"rows 1x3 360>120 3x160", 360, 120, 3, 160, 1, 3}, {"rows 1x3 96>64 8x100", 96, 64, 8, 100, 1, 3},
        {"rows 1x3 192>128 4x80", 192, 128, 4, 80, 1, 3},  {"rows 1x3 384>256 2x40", 384, 256, 2, 40, 1, 3},
    };
    const char* only = std::getenv("WINO_BENCH_ONLY");  // a substring of the shapes to run
    std::printf("ISA %s, %d rounds, medians (us), GFLOP/s of the direct-conv FLOPs, err vs float64\n",
                isa_name(isa), rounds);
    const WinoPick picks[] = {{2, false}, {4, false}, {2, true}, {4, true}};
    const char* const pname[] = {"F(2,3)", "F(4,3)", "F(2,3)t", "F(4,3)t"};
    std::printf("%-16s %4s %4s %3s | %6s %5s |", "shape", "C", "M", "HW", "direct", "GF/s");
    for (const char* n : pname) std::printf(" %7s %5s %7s |", n, "GF/s", "err");
    std::printf(" choice (model's estimates)\n");
    for (const Shape& s : shapes) {
        if (only && !std::strstr(s.what, only)) continue;
        Conv2DGeom g;
        g.C = s.C, g.M = s.M, g.H = s.HW, g.W = s.W ? s.W : s.HW, g.kh = s.kh, g.kw = s.kw;
        g.ph = s.kh == 3 && s.kw == 3 ? 1 : 0;
        g.pw = s.kw == 3 ? 1 : 0;
        g.OH = g.H + 2 * g.ph - g.kh + 1, g.OW = g.W + 2 * g.pw - g.kw + 1;
        const int64_t ks = g.kh * g.kw;
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> u(0.0f, 1.0f), wu(-0.1f, 0.1f);  // post-ReLU-like x
        std::vector<float> x(size_t(g.C * g.H * g.W)), w(size_t(g.M * g.C * ks)), b(size_t(g.M));
        for (float& v : x) v = u(rng);
        for (float& v : w) v = wu(rng);
        for (float& v : b) v = wu(rng);
        const int64_t P = g.OH * g.OW;
        ConvGemm cg(isa, g, 1);
        std::vector<float> wpd(cg.packed_w_floats()), sd(cg.scratch_floats()), yd(size_t(g.M * P));
        cg.pack_w(w.data(), wpd.data());
        constexpr int NV = 4;
        std::vector<Winograd> wg;
        std::vector<std::vector<float>> wp(NV), sc(NV), yv(NV, std::vector<float>(yd.size()));
        for (int v = 0; v < NV; ++v) {
            wg.emplace_back(isa, g, picks[v].m, picks[v].trans);
            wp[size_t(v)].resize(wg.back().packed_w_floats());
            sc[size_t(v)].resize(wg.back().scratch_floats());
            wg.back().pack_w(w.data(), wp[size_t(v)].data());
        }
        const ConvEpi epi{ConvAct::kRelu};
        std::vector<double> td, tv[NV];
        for (int r = 0; r < rounds + 1; ++r) {  // interleaved; round 0 warms up
            double t0 = now_us();
            cg.run(x.data(), wpd.data(), b.data(), nullptr, yd.data(), sd.data(), epi);
            double t1 = now_us();
            if (r > 0) td.push_back(t1 - t0);
            for (int v = 0; v < NV; ++v) {
                const size_t k = size_t(v);
                t0 = now_us();
                wg[k].run(x.data(), wp[k].data(), b.data(), nullptr, yv[k].data(), sc[k].data(), epi);
                t1 = now_us();
                if (r > 0) tv[v].push_back(t1 - t0);
            }
        }
        auto med = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        // Errors against a float64 direct conv (no activation: compare pre-ReLU values).
        const ConvEpi none{};
        cg.run(x.data(), wpd.data(), b.data(), nullptr, yd.data(), sd.data(), none);
        for (int v = 0; v < NV; ++v)
            wg[size_t(v)].run(x.data(), wp[size_t(v)].data(), b.data(), nullptr, yv[size_t(v)].data(),
                              sc[size_t(v)].data(), none);
        double ev[NV] = {}, ed = 0, mag = 0;
        for (int64_t mo = 0; mo < g.M; mo += std::max<int64_t>(1, g.M / 16))  // a sample of channels
            for (int64_t oy = 0; oy < g.OH; ++oy)
                for (int64_t ox = 0; ox < g.OW; ++ox) {
                    double acc = b[size_t(mo)];
                    for (int64_t c = 0; c < g.C; ++c)
                        for (int ky = 0; ky < g.kh; ++ky)
                            for (int kx = 0; kx < g.kw; ++kx) {
                                const int64_t iy = oy + ky - g.ph, ix = ox + kx - g.pw;
                                if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) continue;
                                acc += double(w[size_t((mo * g.C + c) * ks + ky * g.kw + kx)]) *
                                       x[size_t((c * g.H + iy) * g.W + ix)];
                            }
                    const size_t o = size_t(mo * P + oy * g.OW + ox);
                    mag = std::max(mag, std::abs(acc));
                    ed = std::max(ed, std::abs(yd[o] - acc));
                    for (int v = 0; v < NV; ++v) ev[v] = std::max(ev[v], std::abs(yv[size_t(v)][o] - acc));
                }
        const double fl = 2.0 * double(g.M * g.C * ks * P) / 1e3;
        const double md = med(td);
        std::printf("%-16s %4lld %4lld %3lld | %6.0f %5.1f |", s.what, (long long)g.C, (long long)g.M,
                    (long long)s.HW, md, fl / md);
        for (int v = 0; v < NV; ++v) {
            const double mv = med(tv[v]);
            std::printf(" %7.0f %5.1f %7.1e |", mv, fl / mv, ev[v] / mag);
        }
        const WinoPick c = winograd_choice(isa, g);
        std::printf(" F%d%s (", c.m, c.trans ? "t" : "");
        for (int v = 0; v < NV; ++v) std::printf("%s%.2f", v ? " " : "", winograd_speedup(isa, g, picks[v]));
        std::printf("; direct err %.1e)\n", ed / mag);
        std::fflush(stdout);
    }
    return 0;
}

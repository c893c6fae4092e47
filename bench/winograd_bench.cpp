// Winograd F(2,3) / F(4,3) against the direct conv (ConvGemm) on the 3x3 stride-1 layers of
// ResNet-50 and PP-OCR, timed interleaved (the machine is shared and noisy: each round runs every
// variant once, the medians of thread CPU time are compared), plus each variant's max error against a float64
// direct conv relative to the output's largest magnitude.
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
    };
    std::printf("ISA %s, %d rounds, medians (us) and GFLOP/s of the direct-conv FLOPs\n", isa_name(isa),
                rounds);
    std::printf("%-18s %5s %5s %4s | %9s %6s | %9s %6s %8s | %9s %6s %8s | %s\n", "shape", "C", "M", "HW",
                "direct", "GF/s", "F(2,3)", "GF/s", "err", "F(4,3)", "GF/s", "err", "choice");
    for (const Shape& s : shapes) {
        Conv2DGeom g;
        g.C = s.C, g.M = s.M, g.H = g.W = s.HW, g.kh = g.kw = 3, g.ph = g.pw = 1, g.OH = g.OW = s.HW;
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> u(0.0f, 1.0f), wu(-0.1f, 0.1f);  // post-ReLU-like x
        std::vector<float> x(size_t(g.C * g.H * g.W)), w(size_t(g.M * g.C * 9)), b(size_t(g.M));
        for (float& v : x) v = u(rng);
        for (float& v : w) v = wu(rng);
        for (float& v : b) v = wu(rng);
        const int64_t P = g.OH * g.OW;
        ConvGemm cg(isa, g, 1);
        std::vector<float> wpd(cg.packed_w_floats()), sd(cg.scratch_floats()), yd(size_t(g.M * P));
        cg.pack_w(w.data(), wpd.data());
        Winograd w2(isa, g, 2), w4(isa, g, 4);
        std::vector<float> wp2(w2.packed_w_floats()), s2(w2.scratch_floats()), y2(yd.size());
        std::vector<float> wp4(w4.packed_w_floats()), s4(w4.scratch_floats()), y4(yd.size());
        w2.pack_w(w.data(), wp2.data());
        w4.pack_w(w.data(), wp4.data());
        const ConvEpi epi{ConvAct::kRelu};
        std::vector<double> td, t2, t4;
        for (int r = 0; r < rounds + 1; ++r) {
            double t0 = now_us();
            cg.run(x.data(), wpd.data(), b.data(), nullptr, yd.data(), sd.data(), epi);
            double t1 = now_us();
            w2.run(x.data(), wp2.data(), b.data(), nullptr, y2.data(), s2.data(), epi);
            double t2_ = now_us();
            w4.run(x.data(), wp4.data(), b.data(), nullptr, y4.data(), s4.data(), epi);
            double t3 = now_us();
            if (r == 0) continue;  // warm-up
            td.push_back(t1 - t0), t2.push_back(t2_ - t1), t4.push_back(t3 - t2_);
        }
        auto med = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        // Errors against a float64 direct conv (no activation: compare pre-ReLU values).
        const ConvEpi none{};
        cg.run(x.data(), wpd.data(), b.data(), nullptr, yd.data(), sd.data(), none);
        w2.run(x.data(), wp2.data(), b.data(), nullptr, y2.data(), s2.data(), none);
        w4.run(x.data(), wp4.data(), b.data(), nullptr, y4.data(), s4.data(), none);
        double e2 = 0, e4 = 0, ed = 0, mag = 0;
        for (int64_t mo = 0; mo < g.M; mo += std::max<int64_t>(1, g.M / 16))  // a sample of channels
            for (int64_t oy = 0; oy < g.OH; ++oy)
                for (int64_t ox = 0; ox < g.OW; ++ox) {
                    double acc = b[size_t(mo)];
                    for (int64_t c = 0; c < g.C; ++c)
                        for (int ky = 0; ky < 3; ++ky)
                            for (int kx = 0; kx < 3; ++kx) {
                                const int64_t iy = oy + ky - 1, ix = ox + kx - 1;
                                if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) continue;
                                acc += double(w[size_t((mo * g.C + c) * 9 + ky * 3 + kx)]) *
                                       x[size_t((c * g.H + iy) * g.W + ix)];
                            }
                    const size_t o = size_t(mo * P + oy * g.OW + ox);
                    mag = std::max(mag, std::abs(acc));
                    ed = std::max(ed, std::abs(yd[o] - acc));
                    e2 = std::max(e2, std::abs(y2[o] - acc));
                    e4 = std::max(e4, std::abs(y4[o] - acc));
                }
        const double fl = 2.0 * double(g.M * g.C * 9 * P) / 1e3;
        const double md = med(td), m2 = med(t2), m4 = med(t4);
        std::printf(
            "%-18s %5lld %5lld %4lld | %9.0f %6.1f | %9.0f %6.1f %8.1e | %9.0f %6.1f %8.1e | F%d (direct err "
            "%.1e)\n",
            s.what, (long long)g.C, (long long)g.M, (long long)s.HW, md, fl / md, m2, fl / m2, e2 / mag, m4,
            fl / m4, e4 / mag, winograd_choice(isa, g), ed / mag);
        std::fflush(stdout);
    }
    return 0;
}

// GEMM-conv shape microbenchmark: the 1x1 and GEMM-mode conv layers of MobileNetV2 and ResNet-50
// (plus a few others) run through kernels::ConvGemm alone, each mode the shape allows, interleaved
// round-robin with an FMA peak loop so every figure can be read against the peak the shared core
// gives in the same minute. Prints, per shape and mode, the best and median GFLOP/s over the
// rounds and the best as % of the best FMA peak.
//   build/jiffy_conv_bench [--filter SUBSTR] [--rounds N] [--ms MS] [--isa avx512|avx2|scalar]
//                          [--modes]   (also every forced mode, not only the automatic choice)
//                          [--cold]    (before each run: caches flushed, then the input and the
//                                       residual read once, as in a model where weights come from
//                                       DRAM and the input was just written by the previous layer)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "kernels/conv.h"
#include "kernels/conv_cv.h"
#include "machine_probe.h"
#include "kernels/cpu.h"

using namespace jiffy::kernels;

namespace {

struct Shape {
    const char* name;
    int64_t C, M, H, W, k, s;
    ConvAct act = ConvAct::kClip;  // the epilogue (Clip: ReLU6, MobileNetV2's; 0..6)
    bool res = false;              // a residual added before the activation
};

// Pads k / 2 (the models' convs).
const Shape kShapes[] = {
    {"mnv2 1x1 16>96 112", 16, 96, 112, 112, 1, 1},
    {"mnv2 1x1 32>16 112", 32, 16, 112, 112, 1, 1},
    {"mnv2 1x1 96>24 56", 96, 24, 56, 56, 1, 1},
    {"mnv2 1x1 24>144 56", 24, 144, 56, 56, 1, 1},
    {"mnv2 1x1 144>24 56", 144, 24, 56, 56, 1, 1},
    {"mnv2 1x1 144>32 28", 144, 32, 28, 28, 1, 1},
    {"mnv2 1x1 32>192 28", 32, 192, 28, 28, 1, 1},
    {"mnv2 1x1 192>32 28", 192, 32, 28, 28, 1, 1},
    {"mnv2 1x1 192>64 14", 192, 64, 14, 14, 1, 1},
    {"mnv2 1x1 64>384 14", 64, 384, 14, 14, 1, 1},
    {"mnv2 1x1 384>64 14", 384, 64, 14, 14, 1, 1},
    {"mnv2 1x1 384>96 14", 384, 96, 14, 14, 1, 1},
    {"mnv2 1x1 96>576 14", 96, 576, 14, 14, 1, 1},
    {"mnv2 1x1 576>96 14", 576, 96, 14, 14, 1, 1},
    {"mnv2 1x1 576>160 7", 576, 160, 7, 7, 1, 1},
    {"mnv2 1x1 160>960 7", 160, 960, 7, 7, 1, 1},
    {"mnv2 1x1 960>160 7", 960, 160, 7, 7, 1, 1},
    {"mnv2 1x1 960>320 7", 960, 320, 7, 7, 1, 1},
    {"mnv2 1x1 320>1280 7", 320, 1280, 7, 7, 1, 1},
    {"mnv2 3x3s2 3>32 224", 3, 32, 224, 224, 3, 2},
    // MobileNetV3-Large's first layers: 16 channels on 112x112.
    {"mnv3 3x3s2 3>16 224 hswish", 3, 16, 224, 224, 3, 2, ConvAct::kHardSwish},
    {"mnv3 1x1 16>16 112 +res", 16, 16, 112, 112, 1, 1, ConvAct::kNone, true},
    {"mnv3 1x1 16>64 112 relu", 16, 64, 112, 112, 1, 1, ConvAct::kRelu},
    {"rn50 1x1 64>64 56", 64, 64, 56, 56, 1, 1},
    {"rn50 1x1 64>256 56", 64, 256, 56, 56, 1, 1},
    {"rn50 1x1 256>64 56", 256, 64, 56, 56, 1, 1},
    {"rn50 1x1 256>128 56", 256, 128, 56, 56, 1, 1},
    {"rn50 1x1s2 256>512 56", 256, 512, 56, 56, 1, 2},
    {"rn50 1x1 128>512 28", 128, 512, 28, 28, 1, 1},
    {"rn50 1x1 512>128 28", 512, 128, 28, 28, 1, 1},
    {"rn50 1x1 512>256 28", 512, 256, 28, 28, 1, 1},
    {"rn50 1x1s2 512>1024 28", 512, 1024, 28, 28, 1, 2},
    {"rn50 1x1 256>1024 14", 256, 1024, 14, 14, 1, 1},
    {"rn50 1x1 1024>256 14", 1024, 256, 14, 14, 1, 1},
    {"rn50 1x1 1024>512 14", 1024, 512, 14, 14, 1, 1},
    {"rn50 1x1s2 1024>2048 14", 1024, 2048, 14, 14, 1, 2},
    {"rn50 1x1 512>2048 7", 512, 2048, 7, 7, 1, 1},
    {"rn50 1x1 2048>512 7", 2048, 512, 7, 7, 1, 1},
    {"rn50 7x7s2 3>64 224", 3, 64, 224, 224, 7, 2},
    {"rn50 3x3 64>64 56", 64, 64, 56, 56, 3, 1},
    {"rn50 3x3 128>128 28", 128, 128, 28, 28, 3, 1},
    {"rn50 3x3 256>256 14", 256, 256, 14, 14, 3, 1},
    {"rn50 3x3 512>512 7", 512, 512, 7, 7, 3, 1},
    {"rn50 3x3s2 128>128 56", 128, 128, 56, 56, 3, 2},
    {"rn50 3x3s2 256>256 28", 256, 256, 28, 28, 3, 2},
    {"rn50 3x3s2 512>512 14", 512, 512, 14, 14, 3, 2},
    // The generated face detector (UltraFace-slim shape, 240x320 input): Relu epilogues.
    {"yolo 3x3s2 16>32 160 silu", 16, 32, 160, 160, 3, 2, ConvAct::kSilu},
    {"yolo 3x3s2 32>64 80 silu", 32, 64, 80, 80, 3, 2, ConvAct::kSilu},
    {"yolo 3x3s2 64>128 40 silu", 64, 128, 40, 40, 3, 2, ConvAct::kSilu},
    {"yolo 3x3s2 128>256 20 silu", 128, 256, 20, 20, 3, 2, ConvAct::kSilu},
    {"face 3x3s2 3>16 240x320", 3, 16, 240, 320, 3, 2, ConvAct::kRelu},
    {"face 1x1 16>32 120x160", 16, 32, 120, 160, 1, 1, ConvAct::kRelu},
    {"face 1x1 32>32 60x80", 32, 32, 60, 80, 1, 1, ConvAct::kRelu},
    {"face 1x1 64>64 30x40", 64, 64, 30, 40, 1, 1, ConvAct::kRelu},
    {"face 1x1 128>256 8x10", 128, 256, 8, 10, 1, 1, ConvAct::kRelu},
    {"face 1x1 256>256 8x10", 256, 256, 8, 10, 1, 1, ConvAct::kRelu},
    {"face 1x1 256>64 8x10", 256, 64, 8, 10, 1, 1, ConvAct::kRelu},
    {"face 1x1 64>12 30x40", 64, 12, 30, 40, 1, 1, ConvAct::kNone},
    // SqueezeNet 1.1's squeeze 1x1s (few output channels; Relu).
    {"sqz 1x1 64>16 55", 64, 16, 55, 55, 1, 1, ConvAct::kRelu},
    {"sqz 1x1 128>16 55", 128, 16, 55, 55, 1, 1, ConvAct::kRelu},
    {"sqz 1x1 256>32 27", 256, 32, 27, 27, 1, 1, ConvAct::kRelu},
    {"sqz 1x1 384>48 13", 384, 48, 13, 13, 1, 1, ConvAct::kRelu},
    // An UltraFace-like detector's 3x3 heads (18 outputs: 6 anchors x 3, no activation).
    {"ultra head 3x3 64>18 30x40", 64, 18, 30, 40, 3, 1},
    {"ultra head 3x3 128>18 15x20", 128, 18, 15, 20, 3, 1},
    {"face head 3x3 256>12 4x5", 256, 12, 4, 5, 3, 1, ConvAct::kNone},
    {"face head 3x3 256>6 4x5", 256, 6, 4, 5, 3, 1, ConvAct::kNone},
    // Planes between 32x32 and 48x48 (the 1x1-direct cut-off), large and small K.
    {"mid 1x1 64>64 40x40", 64, 64, 40, 40, 1, 1, ConvAct::kRelu},
    {"mid 1x1 384>64 40x40", 384, 64, 40, 40, 1, 1, ConvAct::kRelu},
    {"mid 1x1 64>384 40x40", 64, 384, 40, 40, 1, 1, ConvAct::kRelu},
    {"mid 1x1 256>256 44x44", 256, 256, 44, 44, 1, 1, ConvAct::kRelu},
    {"k5 5x5 64>32 80", 64, 32, 80, 80, 5, 1, ConvAct::kRelu},
    {"k5 5x5 64>64 40", 64, 64, 40, 40, 5, 1, ConvAct::kRelu},
};

Conv2DGeom geom(const Shape& s) {
    Conv2DGeom g;
    g.C = s.C;
    g.M = s.M;
    g.H = s.H;
    g.W = s.W;
    g.kh = g.kw = s.k;
    g.sh = g.sw = s.s;
    g.ph = g.pw = s.k / 2;
    g.OH = (s.H + 2 * (s.k / 2) - s.k) / s.s + 1;
    g.OW = (s.W + 2 * (s.k / 2) - s.k) / s.s + 1;
    return g;
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double fma_peak(double ms) { return jiffy::bench::fma_peak_gflops(ms); }

bool g_huge = false;

// Buffers on 2 MiB boundaries, transparent huge pages asked for with --huge.
template <typename T>
struct BufAlloc {
    using value_type = T;
    BufAlloc() = default;
    template <typename U>
    BufAlloc(const BufAlloc<U>&) {}
    T* allocate(size_t n) {
        const size_t bytes = (n * sizeof(T) + (2u << 20) - 1) / (2u << 20) * (2u << 20);
        void* p = std::aligned_alloc(2u << 20, bytes);
        if (g_huge) madvise(p, bytes, MADV_HUGEPAGE);
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) { std::free(p); }
    bool operator==(const BufAlloc&) const { return true; }
};
using Buf = std::vector<float, BufAlloc<float>>;

struct Run {
    std::string label;
    Conv2DGeom g;
    ConvGemm cg;
    const ConvChanVec* cv = nullptr;  // the channel-vector kernel instead of cg
    ConvEpi epi;
    Buf x, wp, b, r, y, scratch;  // r: the residual (empty: none)
    std::vector<double> gflops;  // best of each round
};

}  // namespace

int main(int argc, char** argv) {
    std::string filter;
    int rounds = 5;
    double ms = 20;
    bool modes = false, cold = false;
    Isa isa = cpu_isa();
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--filter") filter = next();
        else if (a == "--rounds") rounds = std::max(1, std::atoi(next().c_str()));
        else if (a == "--ms") ms = std::atof(next().c_str());
        else if (a == "--modes") modes = true;
        else if (a == "--cold") cold = true;
        else if (a == "--huge") g_huge = true;
        else if (a == "--isa") {
            const std::string v = next();
            isa = v == "avx512" ? Isa::kAvx512 : v == "avx2" ? Isa::kAvx2 : Isa::kScalar;
        } else {
            std::fprintf(stderr, "usage: %s [--filter S] [--rounds N] [--ms MS] [--modes] [--isa I]\n", argv[0]);
            return 2;
        }
    }
    if (int(isa) > int(cpu_isa())) {
        std::fprintf(stderr, "ISA %s not available here\n", isa_name(isa));
        return 77;
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<Run> runs;
    std::vector<std::unique_ptr<ConvChanVec>> cvs;
    for (const Shape& s : kShapes) {
        if (!filter.empty() && std::string(s.name).find(filter) == std::string::npos) continue;
        const Conv2DGeom g = geom(s);
        std::vector<ConvGemmMode> ms_list = {ConvGemmMode::kAuto};
        if (modes)
            for (ConvGemmMode m : kConvGemmModes) ms_list.push_back(m);
        const ConvGemm auto_cg(isa, g, 1);
        // Random x, b and weights for one run of shape g; the output sized (the weights returned).
        auto fill = [&](Run& r) {
            std::vector<float> w(size_t(g.M * g.C * g.kh * g.kw));
            r.x.resize(size_t(g.C * g.H * g.W));
            r.b.resize(size_t(g.M));
            r.y.resize(size_t(g.M * g.OH * g.OW));
            r.r.resize(s.res ? r.y.size() : 0);
            r.epi.act = s.act;
            r.epi.alpha = 0;
            r.epi.beta = 6;
            for (float& v : r.r) v = u(rng);
            for (float& v : r.x) v = u(rng);
            for (float& v : w) v = u(rng);
            for (float& v : r.b) v = u(rng);
            return w;
        };
        for (ConvGemmMode m : ms_list) {
            ConvGemm cg(isa, g, 1, m);
            if (m != ConvGemmMode::kAuto && (cg.mode() != m || cg.mode() == auto_cg.mode())) continue;
            Run r;
            r.label = std::string(s.name) + (m == ConvGemmMode::kAuto ? " *" : "  ") + cg.name();
            r.g = g;
            r.cg = cg;
            const std::vector<float> w = fill(r);
            r.wp.resize(cg.packed_w_floats());
            cg.pack_w(w.data(), r.wp.data());
            r.scratch.resize(cg.scratch_floats());
            runs.push_back(std::move(r));
        }
        // The channel-vector conv (conv_cv.h) where it fits (* where the engine prefers it).
        if (ConvChanVec::fits(g) && (modes || ConvChanVec::preferred(isa, g))) {
            Run r;
            r.label = std::string(s.name) + (ConvChanVec::preferred(isa, g) ? " *" : "  ") + "chanvec";
            r.g = g;
            const std::vector<float> w = fill(r);
            cvs.push_back(std::make_unique<ConvChanVec>(isa, g, w.data()));
            r.cv = cvs.back().get();
            r.scratch.resize(r.cv->scratch_floats());
            runs.push_back(std::move(r));
        }
    }
    std::vector<float> flush(cold ? size_t(8) << 20 : 0);  // 32 MiB
    float sink = 0;
    auto prepare = [&](const Run& r) {
        if (!cold) return;
        for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.0f;
        for (size_t i = 0; i < r.x.size(); i += 16) sink += r.x[i];
        for (size_t i = 0; i < r.r.size(); i += 16) sink += r.r[i];
    };
    std::vector<double> peaks;
    for (int round = 0; round < rounds; ++round) {
        peaks.push_back(fma_peak(ms));
        for (Run& r : runs) {
            const double flop = 2.0 * double(r.g.M * r.g.C * r.g.kh * r.g.kw * r.g.OH * r.g.OW);
            double best = 0;
            const double t_end = now_s() + ms / 1e3;
            do {
                prepare(r);
                const double t0 = now_s();
                const float* res = r.r.empty() ? nullptr : r.r.data();
                if (r.cv)
                    r.cv->run(r.x.data(), r.b.data(), res, r.y.data(), r.scratch.data(), r.epi);
                else
                    r.cg.run(r.x.data(), r.wp.data(), r.b.data(), res, r.y.data(), r.scratch.data(), r.epi);
                best = std::max(best, flop / (now_s() - t0) / 1e9);
            } while (now_s() < t_end);
            r.gflops.push_back(best);
        }
    }
    const double peak = *std::max_element(peaks.begin(), peaks.end());
    std::printf("isa %s, %d rounds of %.0f ms%s; FMA peak best %.1f GFLOP/s%s\n", isa_name(isa), rounds, ms,
                cold ? ", cold caches" : "", peak, sink == 12345.0f ? " " : "");
    std::printf("%-44s %9s %9s %7s %8s\n", "shape (* = automatic choice)  mode", "best", "median", "%peak", "us");
    for (Run& r : runs) {
        std::vector<double> v = r.gflops;
        std::sort(v.begin(), v.end());
        const double best = v.back(), med = v[v.size() / 2];
        const double flop = 2.0 * double(r.g.M * r.g.C * r.g.kh * r.g.kw * r.g.OH * r.g.OW);
        std::printf("%-44s %9.1f %9.1f %7.0f %8.1f\n", r.label.c_str(), best, med,
                    peak > 0 ? 100.0 * best / peak : 0.0, flop / best / 1e3);
    }
    return 0;
}

// Two-thread scaling of single Conv ops (docs/threading.md): ResNet-50's and MobileNetV2's conv
// shapes compiled as one-node plans with 1 and with 2 threads, run interleaved round-robin (the
// host is shared and noisy: compare the best times of the same minute). Prints per shape the
// kernel (and split) of the 2-thread plan, the best and median time of each and best1 / best2.
// Set JIFFY_CONV_SPLIT=channels to compare against the channel split everywhere.
// --parts: instead, each split's two halves timed one after the other on the calling thread
// (kernels API, the ranges conv.cpp's set_parallel uses): the estimated speedup T1 / max(half)
// counts duplicated work and imbalance but not contention, and needs no free second core.
// --cold: the caches flushed (192 MiB read) before each timed run, as in a model whose weights
// stream from DRAM (JIFFY_SPIN_US=100000 keeps the second thread awake meanwhile).
//   build/jiffy_conv_threads_bench [--filter SUBSTR] [--rounds N] [--threads T] [--parts] [--cold]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "kernels/conv.h"
#include "kernels/cpu.h"
#include "kernels/winograd.h"
#include "runtime/plan.h"
#include "runtime/threadpool.h"
#include "attr_util.h"  // tests/unit: aints
#include "isa_util.h"   // tests/unit: rnd

using namespace jiffy;
using jiffy::testattr::aints;
using jiffy::testisa::rnd;

namespace {

struct ConvShape {
    const char* name;
    int64_t C, M, H, W, k, s;  // pads k / 2
    int64_t kw = 0;            // set: a k x kw kernel (1x3 / 3x1), pads kw / 2 along W only
};

const ConvShape kShapes[] = {
    {"rn50 7x7s2 3>64 224 (stem)", 3, 64, 224, 224, 7, 2},
    {"rn50 3x3 64>64 56", 64, 64, 56, 56, 3, 1},
    {"rn50 3x3 128>128 28", 128, 128, 28, 28, 3, 1},
    {"rn50 3x3 256>256 14", 256, 256, 14, 14, 3, 1},
    {"rn50 3x3 512>512 7", 512, 512, 7, 7, 3, 1},
    {"rn50 3x3s2 128>128 56", 128, 128, 56, 56, 3, 2},
    {"rn50 3x3s2 256>256 28", 256, 256, 28, 28, 3, 2},
    {"rn50 3x3s2 512>512 14", 512, 512, 14, 14, 3, 2},
    {"rn50 1x1 64>64 56", 64, 64, 56, 56, 1, 1},
    {"rn50 1x1 64>256 56", 64, 256, 56, 56, 1, 1},
    {"rn50 1x1 256>64 56", 256, 64, 56, 56, 1, 1},
    {"rn50 1x1 256>128 56", 256, 128, 56, 56, 1, 1},
    {"rn50 1x1 512>128 28", 512, 128, 28, 28, 1, 1},
    {"rn50 1x1 512>2048 7", 512, 2048, 7, 7, 1, 1},
    {"rn50 1x1 2048>512 7", 2048, 512, 7, 7, 1, 1},
    {"rn50 1x1 1024>256 14", 1024, 256, 14, 14, 1, 1},
    {"rn50 1x1 256>1024 14", 256, 1024, 14, 14, 1, 1},
    {"rn50 1x1 1024>512 14", 1024, 512, 14, 14, 1, 1},
    {"mnv2 3x3s2 3>32 224 (stem)", 3, 32, 224, 224, 3, 2},
    {"mnv2 1x1 16>96 112", 16, 96, 112, 112, 1, 1},
    {"mnv2 1x1 32>16 112", 32, 16, 112, 112, 1, 1},
    {"mnv2 1x1 24>144 56", 24, 144, 56, 56, 1, 1},
    {"mnv2 1x1 144>24 56", 144, 24, 56, 56, 1, 1},
    {"emb 1x3 24>24 74x32", 24, 24, 74, 32, 1, 1, 3},
    {"emb 3x1 48>48 36x16", 48, 48, 36, 16, 3, 1, 1},
    {"emb 1x3 72>72 30x8", 72, 72, 30, 8, 1, 1, 3},
    {"emb 3x1 72>72 30x8", 72, 72, 30, 8, 3, 1, 1},
    {"emb 3x1 96>96 14x4", 96, 96, 14, 4, 3, 1, 1},
};

struct Bench {
    std::shared_ptr<const Plan> plan;
    std::unique_ptr<Session> session;
    std::vector<double> us;
};

Bench make(const ConvShape& c, int threads) {
    Graph g;
    g.opset = 17;
    Node n;
    n.op = "Conv";
    n.name = "conv";
    auto value = [&](const std::string& name, std::vector<int64_t> dims) {
        const int id = g.add_value(name);
        Value& v = g.values[size_t(id)];
        v.dtype = DType::kF32;
        v.has_shape = true;
        for (int64_t d : dims) v.dims.push_back(Dim{d, ""});
        return id;
    };
    const int x = value("x", {1, c.C, c.H, c.W});
    g.inputs.push_back(x);
    n.inputs.push_back(x);
    uint32_t seed = 1;
    for (const Shape& s : {Shape{c.M, c.C, c.k, c.kw ? c.kw : c.k}, Shape{c.M}}) {
        const int id = g.add_value("c" + std::to_string(seed));
        Tensor t(DType::kF32, s);
        const auto v = rnd(t.numel(), seed++);
        std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
        g.values[size_t(id)].dtype = DType::kF32;
        g.values[size_t(id)].constant = std::make_shared<Tensor>(std::move(t));
        n.inputs.push_back(id);
    }
    n.num_explicit_inputs = int(n.inputs.size());
    const int64_t p = c.k / 2;
    n.attrs["kernel_shape"] = aints({c.k, c.kw ? c.kw : c.k});
    n.attrs["strides"] = aints({c.s, c.s});
    n.attrs["pads"] = c.kw ? aints({0, c.kw / 2, 0, c.kw / 2}) : aints({p, p, p, p});
    const int y = g.add_value("y");
    g.values[size_t(y)].producer = 0;
    n.outputs.push_back(y);
    g.outputs.push_back(y);
    g.nodes.push_back(std::move(n));
    CompileOptions opt;
    opt.threads = threads;
    Bench b;
    Status st = compile_graph(g, opt, &b.plan);
    if (!st.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name, st.message().c_str());
        std::exit(1);
    }
    b.session = std::make_unique<Session>(b.plan);
    const auto in = rnd(c.C * c.H * c.W, 7);
    std::memcpy(b.session->input_data(0), in.data(), in.size() * sizeof(float));
    return b;
}

// --cold: before each timed run, 192 MiB are read (the caches then hold none of the conv's
// weights, input or scratch, as in a model whose weights stream from DRAM every run; 64 MiB were
// not enough on session 22's Intel host, whose L3 kept ~64-80 MiB of one process).
bool g_cold = false;
std::vector<float> g_flush;
float g_sink = 0;
void flush_caches() {
    if (g_flush.empty()) g_flush.assign(size_t(48) << 20, 1.0f);
    float s = 0;
    for (size_t i = 0; i < g_flush.size(); i += 16) s += g_flush[i];
    g_sink += s;
}

double run_us(Bench& b, int reps) {
    if (g_cold) {
        double t = 0;
        for (int i = 0; i < reps; ++i) {
            flush_caches();
            const auto t0 = std::chrono::steady_clock::now();
            (void)b.session->run();
            t += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        }
        return t / reps;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) (void)b.session->run();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
}

double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <typename F>
double time_us(F&& f, int reps, int rounds) {
    std::vector<double> v;
    f();
    for (int r = 0; r < rounds; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) f();
        v.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps);
    }
    return best(v);
}

// --parts: the whole conv, then the two halves of each split kind, timed serially.
void parts(const ConvShape& c, int rounds) {
    using namespace jiffy::kernels;
    const Isa isa = active_isa();
    Conv2DGeom g;
    const int64_t kw = c.kw ? c.kw : c.k, ks = c.k * kw;
    g.C = c.C, g.M = c.M, g.H = c.H, g.W = c.W, g.kh = c.k, g.kw = kw, g.sh = g.sw = c.s;
    g.ph = c.kw ? 0 : c.k / 2;
    g.pw = kw / 2;
    g.OH = (c.H + 2 * g.ph - c.k) / c.s + 1, g.OW = (c.W + 2 * g.pw - kw) / c.s + 1;
    const int64_t P = g.OH * g.OW, nr = conv_nr(isa), mr = conv_mr(isa);
    const auto x = rnd(c.C * c.H * c.W, 7), w = rnd(c.M * c.C * ks, 1), b = rnd(c.M, 2);
    std::vector<float> y(size_t(c.M * P));
    const double flops = 2.0 * double(c.M * c.C * ks) * double(P);
    const int reps = std::clamp(int(2e8 / flops), 1, 50);
    const ConvEpi epi{};
    const WinoPick wp = winograd_choice(isa, g);
    std::string kernel;
    double t1 = 0, tc = 0, to = 0;  // whole, max half by channels, max half by pixels / tiles
    // Channel halves (aligned as set_parallel does).
    int64_t c0, c1, c2;
    if (wp.m) {
        const Winograd wk(isa, g, wp.m, wp.trans);
        kernel = wk.name();
        std::vector<float> pw(wk.packed_w_floats()), sc(wk.scratch_floats()), yt(wk.yt_floats());
        wk.pack_w(w.data(), pw.data());
        t1 = time_us([&] { wk.run(x.data(), pw.data(), b.data(), nullptr, y.data(), sc.data(), epi); }, reps, rounds);
        const int64_t T = wk.args().T;
        int64_t t0_, tm, te;
        chunk_range(T, 2, 0, 1, &t0_, &tm);
        chunk_range(T, 2, 1, 1, &tm, &te);
        const int64_t shared = wk.shared_row(tm);  // -1: none
        for (int h = 0; h < 2; ++h) {
            const int64_t a = h ? tm : 0, e = h ? te : tm;
            to = std::max(to, time_us([&] {
                wk.run_tiles(x.data(), pw.data(), b.data(), nullptr, y.data(), sc.data(), epi, a, e, yt.data());
                // The caller's part also writes the shared tile rows (ConvFastKernel::run_parallel).
                if (h == 0 && shared >= 0) wk.finish_rows(yt.data(), b.data(), nullptr, y.data(), epi, shared, shared + 1);
            }, reps, rounds));
        }
        chunk_range(c.M, 2, 0, c.M >= 2 * mr ? mr : 8, &c0, &c1);
        chunk_range(c.M, 2, 1, c.M >= 2 * mr ? mr : 8, &c1, &c2);
        for (int h = 0; h < 2; ++h) {
            Conv2DGeom gh = g;
            gh.M = h ? c2 - c1 : c1;
            const Winograd wh(isa, gh, wp.m, wp.trans);
            std::vector<float> ph(wh.packed_w_floats()), sh(wh.scratch_floats());
            wh.pack_w(w.data() + (h ? c1 : 0) * c.C * ks, ph.data());
            tc = std::max(tc, time_us([&] { wh.run(x.data(), ph.data(), b.data(), nullptr, y.data(), sh.data(), epi); },
                                      reps, rounds));
        }
    } else {
        const ConvGemm gk(isa, g, 1);
        kernel = gk.name();
        std::vector<float> pw(gk.packed_w_floats()), sc(gk.scratch_floats());
        gk.pack_w(w.data(), pw.data());
        t1 = time_us([&] { gk.run(x.data(), pw.data(), b.data(), nullptr, y.data(), sc.data(), epi); }, reps, rounds);
        if (const int64_t pal = gk.pixel_align(); pal > 0) {  // the modes the engine splits by pixels
            int64_t pm, pe, p0;
            chunk_range(P, 2, 0, pal, &p0, &pm);
            chunk_range(P, 2, 1, pal, &pm, &pe);
            for (int h = 0; h < 2; ++h)
                to = std::max(to, time_us([&] {
                    gk.run_pixels(x.data(), pw.data(), b.data(), nullptr, y.data(), sc.data(), epi, h ? pm : 0, h ? pe : pm);
                }, reps, rounds));
        }
        const int64_t al = gk.args().trans ? nr : c.M >= 2 * mr ? mr : 8;
        chunk_range(c.M, 2, 0, al, &c0, &c1);
        chunk_range(c.M, 2, 1, al, &c1, &c2);
        for (int h = 0; h < 2; ++h) {
            Conv2DGeom gh = g;
            gh.M = h ? c2 - c1 : c1;
            const ConvGemm ghk(isa, gh, 1, gk.mode());
            std::vector<float> ph(ghk.packed_w_floats()), sh(ghk.scratch_floats());
            ghk.pack_w(w.data() + (h ? c1 : 0) * c.C * ks, ph.data());
            tc = std::max(tc, time_us([&] { ghk.run(x.data(), ph.data(), b.data(), nullptr, y.data(), sh.data(), epi); },
                                      reps, rounds));
        }
    }
    std::printf("| %s | %s | %.0f | %.2f | %s |\n", c.name, kernel.c_str(), t1, t1 / tc,
                to > 0 ? (std::to_string(t1 / to).substr(0, 4) + (wp.m ? " (tiles)" : " (pixels)")).c_str() : "-");
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    std::string filter;
    int rounds = 15, threads = 2;
    bool split_parts = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--filter" && i + 1 < argc) filter = argv[++i];
        else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
        else if (a == "--threads" && i + 1 < argc) threads = std::max(2, std::atoi(argv[++i]));
        else if (a == "--parts") split_parts = true;
        else if (a == "--cold") g_cold = true;
        else {
            std::fprintf(stderr, "usage: %s [--filter SUBSTR] [--rounds N] [--threads T] [--parts] [--cold]\n", argv[0]);
            return 2;
        }
    }
    if (split_parts) {
        std::printf("| shape | kernel | 1 thread us (best) | est. speedup by channels | est. speedup by pixels / tiles |\n");
        std::printf("|---|---|---|---|---|\n");
        for (const ConvShape& c : kShapes)
            if (filter.empty() || std::string(c.name).find(filter) != std::string::npos) parts(c, rounds);
        return 0;
    }
    std::printf("| shape | kernel (%d threads) | 1 thread best / median us | %d threads best / median us | speedup (best) |\n",
                threads, threads);
    std::printf("|---|---|---|---|---|\n");
    for (const ConvShape& c : kShapes) {
        if (!filter.empty() && std::string(c.name).find(filter) == std::string::npos) continue;
        Bench one = make(c, 1), many = make(c, threads);
        const double flops = 2.0 * double(c.M * c.C * c.k * (c.kw ? c.kw : c.k)) * double((c.H / c.s) * (c.W / c.s));
        const int reps = std::clamp(int(2e9 / flops), 8, 100);  // ~2-20 ms per timing, the workers kept awake
        run_us(one, 2);
        run_us(many, 2);
        for (int r = 0; r < rounds; ++r) {
            one.us.push_back(run_us(one, reps));
            many.us.push_back(run_us(many, reps));
        }
        std::printf("| %s | %s | %.0f / %.0f | %.0f / %.0f | %.2f |\n", c.name,
                    many.plan->steps[0].kernel->describe().c_str(), best(one.us), median(one.us), best(many.us),
                    median(many.us), best(one.us) / best(many.us));
        std::fflush(stdout);
    }
    return 0;
}

// The intra-op thread pool (src/runtime/threadpool.h): every chunk runs exactly once, start/stop
// with spinning and with sleeping workers, concurrent callers, and Conv / Gemm / MatMul compiled
// with 2 threads give bitwise the same outputs as with 1 (the splits keep each output's summation
// order).
#include "runtime/threadpool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "attr_util.h"
#include "isa_util.h"
#include "kernels/activation.h"
#include "kernels/amx.h"
#include "kernels/binary.h"
#include "one_node.h"
#include "runtime/plan.h"

using namespace jiffy;
using namespace jiffy::testattr;
using jiffy::testisa::rnd;

namespace {

TEST(ThreadPool, EveryChunkRunsOnce) {
    for (int spin : {0, 50}) {
        ThreadPool pool(2, spin);
        EXPECT_EQ(pool.threads(), 2);
        std::vector<std::atomic<int>> hits(17);
        for (int rep = 0; rep < 2000; ++rep) {
            const int n = 1 + rep % 17;
            pool.parallel_for(n, [&](int i) { hits[size_t(i)].fetch_add(1); });
        }
        int total = 0;
        for (auto& h : hits) total += h.load();
        int want = 0;
        for (int rep = 0; rep < 2000; ++rep) want += 1 + rep % 17;
        EXPECT_EQ(total, want) << "spin " << spin;
        EXPECT_EQ(hits[16].load(), 2000 / 17) << "spin " << spin;
    }
}

// Chunks of 200 two-chunk jobs that ran on a thread other than the caller.
int chunks_elsewhere(ThreadPool& pool) {
    std::atomic<int> other{0};
    const auto me = std::this_thread::get_id();
    for (int rep = 0; rep < 200; ++rep)
        pool.parallel_for(2, [&](int) {
            volatile double s = 0;
            for (int k = 0; k < 20000; ++k) s = s + k;
            if (std::this_thread::get_id() != me) other.fetch_add(1);
        });
    return other.load();
}

TEST(ThreadPool, WorkersTakeChunks) {
    // With a long spin the worker is awake; over many jobs it must run some chunks.
    ThreadPool pool(2, 2000);
    EXPECT_GT(chunks_elsewhere(pool), 0);
}

// Caller-only mode (Session's measured threads choice): every chunk of every job runs on the
// calling thread, in order; off again, the workers take chunks.
TEST(ThreadPool, SerialModeRunsEveryChunkOnTheCaller) {
    ThreadPool pool(2, 2000);
    const auto me = std::this_thread::get_id();
    pool.set_serial(true);
    EXPECT_TRUE(pool.serial());
    for (int rep = 0; rep < 50; ++rep) {
        std::vector<int> order;
        bool elsewhere = false;
        pool.parallel_for(5, [&](int i) {
            order.push_back(i);  // only the caller runs chunks: no race
            if (std::this_thread::get_id() != me) elsewhere = true;
        });
        ASSERT_FALSE(elsewhere);
        ASSERT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
        int64_t b[ThreadPool::kMaxThreads + 1];
        pool.split(100, 4, b);
        int parts = 0;
        pool.parallel_balanced(b, [&](int) {
            if (std::this_thread::get_id() != me) elsewhere = true;
            ++parts;
        });
        ASSERT_FALSE(elsewhere);
        ASSERT_EQ(parts, 2);
    }
    pool.set_serial(false);
    EXPECT_GT(chunks_elsewhere(pool), 0);
}

TEST(ThreadPool, StartStopNoHang) {
    for (int i = 0; i < 50; ++i) {
        ThreadPool pool(1 + i % 4, i % 2 ? 0 : 20);
        std::atomic<int> c{0};
        pool.parallel_for(3, [&](int) { c.fetch_add(1); });
        EXPECT_EQ(c.load(), 3);
    }  // destructors join sleeping and spinning workers
}

// A caller that runs on its worker's CPU (the scheduler put it there; here it pins itself) gets
// the worker moved off that CPU: jobs run on two CPUs again. Fails when workers stay on their
// CPU whatever the caller does (a worker there only runs when the caller is preempted).
TEST(ThreadPool, WorkerLeavesTheCallersCpu) {
    cpu_set_t before;
    CPU_ZERO(&before);
    ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
    int cpus[2], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; ++c)
        if (CPU_ISSET(c, &before)) cpus[n++] = c;
    if (n < 2) GTEST_SKIP() << "one CPU in the affinity mask";
    const char* pin = std::getenv("JIFFY_PIN");
    if (pin && pin[0] == '0') GTEST_SKIP() << "JIFFY_PIN=0";
    ThreadPool pool(2, 1000);  // its worker pinned to cpus[1]
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[1], &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    std::atomic<int> elsewhere{-1};
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (elsewhere.load() < 0 && std::chrono::steady_clock::now() < end)
        pool.parallel_for(2, [&](int) {
            const int c = sched_getcpu();
            if (c != cpus[1]) elsewhere.store(c);
        });
    sched_setaffinity(0, sizeof(before), &before);
    EXPECT_GE(elsewhere.load(), 0) << "every chunk ran on the caller's CPU " << cpus[1] << " for 5 s";
}

TEST(ThreadPool, ConcurrentCallersFallBackToSerial) {
    ThreadPool pool(2, 10);
    std::atomic<long> sum{0};
    auto caller = [&] {
        for (int rep = 0; rep < 3000; ++rep) pool.parallel_for(4, [&](int i) { sum.fetch_add(i + 1); });
    };
    std::thread a(caller), b(caller);
    a.join();
    b.join();
    EXPECT_EQ(sum.load(), 2L * 3000 * 10);
}

TEST(ThreadPool, ChunkRangeCoversAligned) {
    for (int64_t total : {1, 7, 16, 64, 100, 1000})
        for (int n : {1, 2, 3, 5})
            for (int64_t align : {1, 8, 12}) {
                int64_t prev = 0;
                for (int i = 0; i < n; ++i) {
                    int64_t b, e;
                    chunk_range(total, n, i, align, &b, &e);
                    EXPECT_EQ(b, prev);
                    EXPECT_LE(b, e);
                    if (e != total) EXPECT_EQ(e % align, 0);
                    prev = e;
                }
                EXPECT_EQ(prev, total);
            }
}

// Balance: a thread that takes twice as long for the same fraction gets about a third of the
// next split; the speeds are clamped to [0.5, 1.5] x the mean; an op's shares stay equal until
// it has measured.
TEST(ThreadPool, BalanceFollowsMeasuredSpeeds) {
    Balance b(2, 0.85);
    EXPECT_FALSE(b.measured());
    EXPECT_DOUBLE_EQ(b.share(0), 0.5);
    double frac[2] = {0.5, 0.5};
    const int who[2] = {0, 1};
    for (int r = 0; r < 60; ++r) {
        // Thread 1 runs at half thread 0's speed: its part ends at f1 / 0.5, thread 0's at f0 / 1.
        const uint64_t cyc[2] = {uint64_t(1e6 * frac[0]), uint64_t(1e6 * frac[1] / 0.5)};
        b.update(frac, who, cyc, 2);
        frac[0] = b.share(0);
        frac[1] = 1 - frac[0];
    }
    EXPECT_TRUE(b.measured());
    EXPECT_NEAR(b.share(0), 2.0 / 3, 0.01);
    EXPECT_NEAR(b.share(1), 1.0 / 3, 0.01);
    // Ten times slower: clamped at 0.5 x the mean against 1.5 x (shares 3 / 4, 1 / 4).
    Balance c(2, 0.85);
    const double half[2] = {0.5, 0.5};
    const uint64_t slow[2] = {1000, 10000};
    for (int r = 0; r < 20; ++r) c.update(half, who, slow, 2);
    EXPECT_NEAR(c.share(0), 0.75, 1e-9);
    // The caller covering a late worker (ran both parts): one thread measured, shares stay even.
    Balance d(2, 0.85);
    const int both[2] = {0, 0};
    const uint64_t seq[2] = {1000, 2000};
    d.update(half, both, seq, 2);
    EXPECT_NEAR(d.share(0), 0.5, 1e-9);
}

// split(): boundaries in proportion to the shares, interior ones aligned, covering [0, total);
// JIFFY_SPLIT_SHARE fixes the caller's share; run_balanced runs every part once, part 0 on the
// caller.
TEST(ThreadPool, BalancedSplitsCoverTheRange) {
    setenv("JIFFY_SPLIT_SHARE", "0.3", 1);
    ThreadPool pool(3, 2000);
    unsetenv("JIFFY_SPLIT_SHARE");
    int64_t b[4];
    pool.split(1000, 8, b);
    EXPECT_EQ(b[0], 0);
    EXPECT_EQ(b[1], 304);  // 300 rounded to a multiple of 8
    EXPECT_EQ(b[2], 648);  // 650 -> 648
    EXPECT_EQ(b[3], 1000);
    pool.split(5, 8, b);  // fewer than one aligned unit: parts may be empty, the last takes all
    EXPECT_EQ(b[0], 0);
    EXPECT_LE(b[1], b[2]);
    EXPECT_EQ(b[3], 5);
    ThreadPool even(2, 2000);
    even.split(101, 1, b);
    EXPECT_EQ(b[1], 51);
    EXPECT_EQ(b[2], 101);
    const std::thread::id caller = std::this_thread::get_id();
    for (int rep = 0; rep < 200; ++rep) {
        std::atomic<int> runs[3] = {0, 0, 0};
        std::atomic<bool> zero_on_caller{false};
        pool.split(999, 1, b);
        pool.parallel_balanced(b, [&](int i) {
            runs[i].fetch_add(1);
            if (i == 0) zero_on_caller.store(std::this_thread::get_id() == caller);
        });
        for (auto& r : runs) EXPECT_EQ(r.load(), 1);
        EXPECT_TRUE(zero_on_caller.load());
    }
    EXPECT_TRUE(pool.balance().measured());
}

// One node with a non-constant input "x" (and optional "r") and constant others; run compiled
// with `threads` (every op parallel regardless of size); returns the output.
struct OneNode {
    std::string op;
    Shape xs;
    std::vector<std::pair<Shape, bool>> consts;  // constant inputs after x (shape, present)
    std::vector<Tensor> fixed;                   // constant inputs after those, with given values
    bool residual = false;
    Shape rs;
    Attrs attrs;
    std::string domain;  // "" (ai.onnx) or "jiffy"
    mutable std::string kernel;  // the last run's kernel description (e.g. "... x2 threads by tiles")

    std::vector<float> run(int threads) const {
        // x and the residual are inputs (seeds 1, 2), the constants seeds 100, 101, ...
        auto tensor = [](const Shape& s, uint32_t seed) { return testnode::f32(s, rnd(shape_numel(s), seed)); };
        std::vector<testnode::NodeIn> ins{{tensor(xs, 1), false}};
        uint32_t seed = 100;
        for (const auto& [s, present] : consts)
            ins.push_back(present ? testnode::NodeIn{tensor(s, seed++), true} : testnode::NodeIn{Tensor(), false, true});
        for (const Tensor& t : fixed) ins.push_back({t, true});
        if (residual) ins.push_back({tensor(rs, 2), false});
        CompileOptions opt;
        opt.threads = threads;
        opt.parallel_min_flops = 0;
        // Repeated runs reuse the per-thread scratch.
        testnode::NodeRun n = testnode::run_one_node(op, ins, attrs, 17, {true}, 3, opt, domain);
        EXPECT_TRUE(n.st.ok()) << n.st.message();
        if (!n.st.ok()) return {};
        EXPECT_EQ(n.plan->pool != nullptr, threads > 1);
        kernel = n.plan->steps.empty() || !n.plan->steps[0].kernel ? "" : n.plan->steps[0].kernel->describe();
        const Tensor& y = n.outs.at(0);
        std::vector<float> out(size_t(y.numel()));
        std::memcpy(out.data(), y.data(), out.size() * sizeof(float));
        return out;
    }
};

// The conv split choices these tests name (by pixels / by channels, the GEMM mode) were measured
// for AVX-512's 12 x 32 tiles; under JIFFY_ISA=avx2 / scalar other splits are chosen, so there the
// tests check only that every split gives one thread's bits.
bool avx512_splits() { return jiffy::kernels::active_isa() == jiffy::kernels::Isa::kAvx512; }

// `split` (if set): the kernel description with 2 and 3 threads must contain it (the split kind
// the case is meant to cover, e.g. "threads by tiles").
// Balanced splits (pixels, tiles, GEMM channels) are cut per run from the threads' speeds: also
// with the caller given 17% and 71% of each split (JIFFY_SPLIT_SHARE).
void expect_same_threaded(const OneNode& c, const std::string& what, const std::string& split = "") {
    const auto one = c.run(1);
    ASSERT_FALSE(one.empty()) << what;
    for (const char* share : {"", "0.17", "0.71"})
        for (int threads : {2, 3}) {
            if (*share) setenv("JIFFY_SPLIT_SHARE", share, 1);
            const auto many = c.run(threads);
            unsetenv("JIFFY_SPLIT_SHARE");
            ASSERT_EQ(one.size(), many.size()) << what;
            EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
                << what << " with " << threads << " threads (caller's share " << (*share ? share : "measured")
                << ") differs from 1 thread (" << c.kernel << ")";
            if (!split.empty())
                EXPECT_NE(c.kernel.find(split), std::string::npos)
                    << what << " with " << threads << " threads: kernel '" << c.kernel << "' lacks '" << split << "'";
        }
}

// A fused elementwise chain (a pre-activation net's BatchNorm + ReLU: x * scale[c] + shift[c],
// then ReLU, then + a full-shape operand) splits by channel planes, planes of more than one
// 512-float block and batch 2; the same bits as one thread. One-value planes stay whole.
TEST(Threaded, ElementwiseChainByPlanesMatchesOneThreadBitwise) {
    using kernels::ActKind;
    using kernels::BinOp;
    OneNode o;
    o.op = "ElementwiseChain";
    o.domain = "jiffy";
    o.xs = {2, 24, 9, 70};
    o.consts = {{{24, 1, 1}, true}, {{1, 24, 1, 1}, true}, {{2, 24, 9, 70}, true}};
    o.attrs = {{"ops", aints({200 + int(BinOp::kMul), 200 + int(BinOp::kAdd), 100 + int(ActKind::kRelu),
                              300 + int(BinOp::kAdd)})},
               {"operands", aints({1, 2, -1, 3})},
               {"alphas", afloats({0, 0, 0, 0})},
               {"betas", afloats({0, 0, 0, 0})}};
    expect_same_threaded(o, "chain 2x24x9x70", "threads by planes");
    OneNode row = o;  // [2, 300]: one value per channel, no split
    row.xs = {2, 300};
    row.consts = {{{300}, true}, {{1, 300}, true}, {{2, 300}, true}};
    expect_same_threaded(row, "chain 2x300");
    EXPECT_EQ(row.kernel.find("threads"), std::string::npos) << row.kernel;
}

// Concat splits by byte ranges of its output (cut mid-piece at the shares 0.17 / 0.71 too): on
// the channel axis (DenseNet's), on H (several outer indices) and on the last axis (many short
// pieces); the same bytes as one thread.
TEST(Threaded, ConcatByBytesMatchesOneThreadBitwise) {
    struct Case {
        int64_t axis;
        Shape x, a, b;
    };
    const Case cases[] = {{1, {1, 64, 28, 28}, {1, 32, 28, 28}, {1, 96, 28, 28}},
                          {2, {2, 16, 20, 40}, {2, 16, 13, 40}, {2, 16, 7, 40}},
                          {3, {1, 32, 60, 17}, {1, 32, 60, 40}, {1, 32, 60, 3}}};
    for (const Case& c : cases) {
        OneNode o;
        o.op = "Concat";
        o.xs = c.x;
        o.consts = {{c.a, true}, {c.b, true}};
        o.attrs = {{"axis", ai(c.axis)}};
        expect_same_threaded(o, "concat axis " + std::to_string(c.axis), "threads by bytes");
    }
}

// The table gather (Transpose, Slice, Pad, ...) splits by 64-byte-aligned element ranges of its
// output, rows cut where a range ends: a channel shuffle (rows of whole 28x28 planes after the
// merge of H and W), a slice of whole planes (one row), a Pad whose rows are lead pads, a copy
// and trailing pads, and a gather of single elements; the same bytes as one thread.
TEST(Threaded, TableGatherByElementsMatchesOneThreadBitwise) {
    auto ints = [](std::vector<int64_t> v) {
        Tensor t(DType::kI64, {int64_t(v.size())});
        std::memcpy(t.data(), v.data(), v.size() * sizeof(int64_t));
        return t;
    };
    OneNode shuffle;
    shuffle.op = "Transpose";
    shuffle.xs = {1, 2, 58, 28, 28};
    shuffle.attrs = {{"perm", aints({0, 2, 1, 3, 4})}};
    expect_same_threaded(shuffle, "channel shuffle", "threads by elements");
    EXPECT_NE(shuffle.kernel.find("rows of 784"), std::string::npos) << shuffle.kernel;
    OneNode slice;
    slice.op = "Slice";
    slice.xs = {1, 116, 28, 28};
    slice.fixed = {ints({0}), ints({58}), ints({1})};
    expect_same_threaded(slice, "slice of planes", "threads by elements");
    OneNode pad;
    pad.op = "Pad";
    pad.xs = {1, 3, 17, 23};
    pad.fixed = {ints({0, 0, 1, 2, 0, 0, 3, 1})};
    expect_same_threaded(pad, "pad", "threads by elements");
    // Short rows at one stride (a detector's boxes / scores: rows of 2 or 4 of 6; 11 of 16 takes
    // the loop without a compile-time length), ranges cut mid-row.
    for (const auto& [c, lo, hi] : {std::tuple<int64_t, int64_t, int64_t>{6, 0, 2}, {6, 2, 6}, {16, 3, 14}}) {
        OneNode narrow;
        narrow.op = "Slice";
        narrow.xs = {1, 4741, c};
        narrow.fixed = {ints({lo}), ints({hi}), ints({2})};
        expect_same_threaded(narrow, "slice of the last axis", "threads by elements");
        EXPECT_NE(narrow.kernel.find("at stride " + std::to_string(c)), std::string::npos) << narrow.kernel;
    }
    OneNode gather;
    gather.op = "Transpose";
    gather.xs = {6, 10, 13};
    gather.attrs = {{"perm", aints({2, 1, 0})}};
    expect_same_threaded(gather, "reversed axes", "threads by elements");
}

struct ConvCase {
    int64_t c, h, w, m, k, s, p;
    bool res;
    const char* split;  // expected in the 2- and 3-thread kernel description
};

OneNode conv_node(const ConvCase& c) {
    OneNode o;
    o.op = "Conv";
    o.xs = {1, c.c, c.h, c.w};
    o.consts = {{{c.m, c.c, c.k, c.k}, true}, {{c.m}, true}};
    o.attrs = {{"kernel_shape", aints({c.k, c.k})},
               {"strides", aints({c.s, c.s})},
               {"pads", aints({c.p, c.p, c.p, c.p})},
               {"_fused_act", as("Relu")}};
    if (c.res) {
        const int64_t oh = (c.h + 2 * c.p - c.k) / c.s + 1, ow = (c.w + 2 * c.p - c.k) / c.s + 1;
        o.residual = true;
        o.rs = {1, c.m, oh, ow};
        o.attrs["_fused_residual"] = ai(1);
    }
    return o;
}

// The conv tests below are about the AVX-512 kernels' splits: on a core with AMX their convs
// would go to AMX (kernels/amx.h), so they turn it off (read when the plan is compiled).
struct NoAmxConv {
    NoAmxConv() { setenv("JIFFY_AMX_CONV", "0", 1); }
    ~NoAmxConv() { unsetenv("JIFFY_AMX_CONV"); }
};

std::string conv_what(const ConvCase& c) {
    return "conv " + std::to_string(c.c) + "->" + std::to_string(c.m) + " k" + std::to_string(c.k) + " s" +
           std::to_string(c.s) + " on " + std::to_string(c.h) + "x" + std::to_string(c.w);
}

// Winograd split by tiles (each thread its own tiles; the transposed orientation's second stage by
// channels), with edge tiles (planes not a multiple of the tile size) and a residual.
TEST(Threaded, WinogradByTilesMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    const ConvCase cases[] = {
        {64, 22, 22, 64, 3, 1, 1, true, "winograd_f4x3_trans"},  // transposed F(4,3), 36 tiles
        {64, 21, 23, 64, 3, 1, 1, false, "winograd_f4x3_trans"}, // edge tiles
        {48, 21, 19, 40, 3, 1, 1, true, "winograd_f4x3__"},      // normal orientation, edge tiles
        {32, 29, 31, 48, 3, 1, 1, false, "winograd_f4x3__"},     // normal, 64 tiles
    };
    for (const ConvCase& c : cases) {
        const OneNode o = conv_node(c);
        expect_same_threaded(o, conv_what(c), "threads by tiles");
        if (avx512_splits()) {  // the orientation: AVX-512's cost model
            EXPECT_NE(o.kernel.find(c.split), std::string::npos) << conv_what(c) << ": " << o.kernel;
        }
    }
}

// 1-D Winograd (1x3 / 3x1 kernels, openWakeWord's embedding_model shapes) split by tiles: the
// flat transforms start mid tile row at a part's edge; the transposed one's second stage.
TEST(Threaded, Winograd1DByTilesMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    struct Case {
        int64_t c, h, w, m, kh, kw;
        bool res;
        const char* split;
    };
    const Case cases[] = {
        {72, 30, 8, 72, 1, 3, true, "winograd_f1x4_1x3__"},       // 1x3, pads 0,1,0,1
        {72, 34, 9, 72, 3, 1, false, "winograd_f4x1_3x1__"},      // 3x1, parts mid-row (3 threads)
        {48, 34, 12, 48, 1, 3, false, "winograd_f1x4_1x3__"},     // 1x3, parts mid-row (3 threads)
        {96, 14, 4, 96, 3, 1, true, "winograd_f4x1_3x1_trans"},   // small plane: transposed
    };
    for (const Case& c : cases) {
        OneNode o;
        o.op = "Conv";
        o.xs = {1, c.c, c.h, c.w};
        o.consts = {{{c.m, c.c, c.kh, c.kw}, true}, {{c.m}, true}};
        const int64_t pw = c.kw == 3 ? 1 : 0;
        o.attrs = {{"kernel_shape", aints({c.kh, c.kw})},
                   {"strides", aints({1, 1})},
                   {"pads", aints({0, pw, 0, pw})},
                   {"_fused_act", as("Relu")}};
        if (c.res) {
            o.residual = true;
            o.rs = {1, c.m, c.h - c.kh + 1, c.w + 2 * pw - c.kw + 1};
            o.attrs["_fused_residual"] = ai(1);
        }
        const std::string what = "conv " + std::to_string(c.c) + "->" + std::to_string(c.m) + " " +
                                 std::to_string(c.kh) + "x" + std::to_string(c.kw) + " on " + std::to_string(c.h) +
                                 "x" + std::to_string(c.w);
        expect_same_threaded(o, what, "threads by tiles");
        EXPECT_NE(o.kernel.find(c.split), std::string::npos) << what << ": " << o.kernel;
    }
}

// The transposed GEMM mode (few pixels): split by output channels at NR-wide panel edges, each
// part forced to the transposed mode even where its own M would choose another.
TEST(Threaded, TransposedGemmByChannelsMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    const ConvCase cases[] = {
        {64, 14, 14, 120, 3, 2, 1, true, "gemm-transposed"},   // parts of 64 and 56 channels
        {96, 13, 13, 128, 3, 2, 1, false, "gemm-transposed"},  // 7x7 output
    };
    for (const ConvCase& c : cases) {
        const OneNode o = conv_node(c);
        expect_same_threaded(o, conv_what(c), "threads");
        EXPECT_NE(o.kernel.find(c.split), std::string::npos) << conv_what(c) << ": " << o.kernel;
    }
}

// The GEMM path split by channels on the whole packing (run_channels: each thread a range of
// the weights' row blocks, cut per run): ResNet-50's layer-3 1x1s (14x14: too few pixels for a
// pixel split), an odd M (17 row blocks of 11-12 rows) with a residual, a 5x5.
TEST(Threaded, GemmByChannelsMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    const ConvCase cases[] = {
        {512, 14, 14, 256, 1, 1, 0, true, "1x1-direct"},
        {300, 10, 12, 200, 1, 1, 0, true, "1x1"},
        {128, 12, 14, 96, 5, 1, 2, false, "conv_gemm"},
    };
    for (const ConvCase& c : cases) {
        const OneNode o = conv_node(c);
        expect_same_threaded(o, conv_what(c), "threads");
        if (!avx512_splits()) continue;
        EXPECT_NE(o.kernel.find(c.split), std::string::npos) << conv_what(c) << ": " << o.kernel;
        EXPECT_EQ(o.kernel.find("by pixels"), std::string::npos) << conv_what(c) << ": " << o.kernel;
    }
}

// Stride (2, 1) 3x3 convs (text recognizers) as a 1x3 conv over the row stack: the stack copied by
// planes across the pool, then the 1-D Winograd conv split its own way (by tiles).
TEST(Threaded, RowStackedConvMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    const int64_t cases[][4] = {{32, 24, 160, 64}, {64, 13, 97, 120}};  // C, H, W, M
    for (const auto& [c, h, w, m] : cases) {
        OneNode o;
        o.op = "Conv";
        o.xs = {1, c, h, w};
        o.consts = {{{m, c, 3, 3}, true}, {{m}, true}};
        o.attrs = {{"kernel_shape", aints({3, 3})},
                   {"strides", aints({2, 1})},
                   {"pads", aints({1, 1, 1, 1})},
                   {"_fused_act", as("Relu")}};
        const std::string what = "conv " + std::to_string(c) + "->" + std::to_string(m) + " s2,1 on " +
                                 std::to_string(h) + "x" + std::to_string(w);
        expect_same_threaded(o, what, avx512_splits() ? "rows stacked" : "");
        if (avx512_splits()) EXPECT_NE(o.kernel.find("threads"), std::string::npos) << what << ": " << o.kernel;
    }
}

// Strided 1x1 convs (ResNet-50's projection shortcuts): the input subsampled by channels across
// the pool, then the stride-1 conv split its own way (by pixels on larger planes, by channels at
// panel edges on the transposed mode's small ones).
TEST(Threaded, SubsampledConvMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    const ConvCase cases[] = {
        {64, 56, 56, 128, 1, 2, 0, true, "1x1-"},           // 28x28: 1x1-direct / packed
        {96, 27, 29, 200, 1, 2, 0, false, "1x1-"},          // odd plane, 14x15
        {128, 14, 14, 256, 1, 2, 0, true, "transposed"},    // 7x7: transposed, by channels
        {48, 30, 30, 64, 1, 3, 0, false, ""},               // stride 3
    };
    for (const ConvCase& c : cases) {
        const OneNode o = conv_node(c);
        expect_same_threaded(o, conv_what(c), "subsampled");
        if (avx512_splits()) {
            EXPECT_NE(o.kernel.find(c.split), std::string::npos) << conv_what(c) << ": " << o.kernel;
        }
        EXPECT_NE(o.kernel.find("threads"), std::string::npos) << conv_what(c) << ": " << o.kernel;
    }
}

// The transposed mode on planes of >= 4 x threads x MR pixels: split by pixels, each part its
// own balanced blocks of rows, the padded rows it reads and all the weights (ResNet-50's 3x3 s2
// 256 -> 256 on 28 -> 14); on 7x7 it stays split by channels (above).
TEST(Threaded, TransposedGemmByPixelsMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    const ConvCase cases[] = {
        {96, 28, 28, 64, 3, 2, 1, true, "gemm-transposed"},   // 14x14 outputs
        {64, 27, 27, 96, 3, 2, 1, false, "gemm-transposed"},  // odd input, 14x14 outputs
    };
    for (const ConvCase& c : cases) {
        const OneNode o = conv_node(c);
        expect_same_threaded(o, conv_what(c), avx512_splits() ? "threads by pixels" : "threads");
        if (avx512_splits()) {
            EXPECT_NE(o.kernel.find(c.split), std::string::npos) << conv_what(c) << ": " << o.kernel;
        }
    }
}

// Convs with few output channels and many pixels (im2col mode, or split mode with planes refilled
// per tile of output rows): split by output pixels, each part packing (and pad-copying or
// splitting) only what its pixels read.
TEST(Threaded, Im2colByPixelsMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    const ConvCase cases[] = {
        {3, 45, 47, 32, 3, 2, 1, true, "implicit-split"},   // MobileNetV2-like stem (split mode)
        {3, 61, 59, 16, 7, 2, 3, false, "implicit-split"},  // ResNet-like 7x7 stem (split mode)
        {32, 45, 47, 24, 3, 2, 1, true, "implicit-split"},  // K = 288 onto 23x24 (split mode)
        {16, 48, 50, 40, 1, 1, 0, true, "1x1-packed"},      // pointwise plane copy (past 1x1-direct)
    };
    for (const ConvCase& c : cases) {
        const OneNode o = conv_node(c);
        expect_same_threaded(o, conv_what(c), avx512_splits() ? "threads by pixels" : "threads");
        if (avx512_splits()) {
            EXPECT_NE(o.kernel.find(c.split), std::string::npos) << conv_what(c) << ": " << o.kernel;
        }
    }
    // The masked mode by pixels (AVX-512: 1x1 onto few channels on a 56x56 plane; split by
    // channels, each thread streamed the whole input: MobileNetV2's 144 -> 24 ran 3x slower).
    if (avx512_splits()) {
        const ConvCase c{144, 56, 56, 24, 1, 1, 0, true, "implicit-masked"};
        const OneNode o = conv_node(c);
        expect_same_threaded(o, conv_what(c), "threads by pixels");
        EXPECT_NE(o.kernel.find(c.split), std::string::npos) << conv_what(c) << ": " << o.kernel;
        // Few channel blocks on a small plane (like SqueezeNet's 384 -> 48 on 13x13; here 14x14:
        // 7 panels, two or more a part at three threads too): by pixels; by channels each part
        // read all of the input.
        const ConvCase s{384, 14, 14, 48, 1, 1, 0, false, "1x1-direct"};
        const OneNode so = conv_node(s);
        expect_same_threaded(so, conv_what(s), "threads by pixels");
        EXPECT_NE(so.kernel.find(s.split), std::string::npos) << conv_what(s) << ": " << so.kernel;
    }
}

// Elementwise Add / Mul split by ranges (same shapes) and by rows (a per-channel scale, the
// squeeze-excite Mul): balanced, at every caller share the same values as one thread.
TEST(Threaded, BinaryMatchesOneThread) {
    for (const char* op : {"Add", "Mul"}) {
        OneNode same;
        same.op = op;
        same.xs = {1, 37, 29, 31};
        same.consts = {{{1, 37, 29, 31}, true}};
        expect_same_threaded(same, std::string(op) + " same shape", "threads");
        OneNode scale;
        scale.op = op;
        scale.xs = {1, 144, 28, 28};
        scale.consts = {{{1, 144, 1, 1}, true}};
        expect_same_threaded(scale, std::string(op) + " per-channel", "threads");
    }
}

// MaxPool / AveragePool on the fast 2-D pool split by planes (each part its own planes and row
// buffer), against one thread: the split must show in the kernel column and change no bit.
TEST(Threaded, PoolByPlanesMatchesOneThreadBitwise) {
    struct P {
        const char* op;
        int64_t c, h, w, k, s, p;
    };
    const P cases[] = {
        {"MaxPool", 64, 112, 112, 3, 2, 1},     // ResNet-50's MaxPool
        {"MaxPool", 37, 41, 29, 3, 2, 1},       // odd plane count and sizes
        {"AveragePool", 33, 40, 40, 2, 2, 0},   // exact 2x2 tiling
    };
    for (const P& c : cases) {
        OneNode o;
        o.op = c.op;
        o.xs = {1, c.c, c.h, c.w};
        o.attrs = {{"kernel_shape", aints({c.k, c.k})},
                   {"strides", aints({c.s, c.s})},
                   {"pads", aints({c.p, c.p, c.p, c.p})}};
        expect_same_threaded(o, std::string(c.op) + " " + std::to_string(c.c) + "x" + std::to_string(c.h) + "x" +
                                    std::to_string(c.w), "threads by planes");
    }
    // Fewer planes than threads: the pool stays on the caller.
    OneNode one;
    one.op = "MaxPool";
    one.xs = {1, 1, 12, 12};
    one.attrs = {{"kernel_shape", aints({2, 2})}, {"strides", aints({2, 2})}};
    expect_same_threaded(one, "MaxPool 1x12x12");
    EXPECT_EQ(one.kernel.find("threads"), std::string::npos) << one.kernel;
}

// A nearest Resize (YuNet's / RetinaFace's 2x upsampling of the neck) split by output rows: each
// part computes its first row and copies the repeated ones after it; the same bits as one thread.
TEST(Threaded, NearestResizeByRowsMatchesOneThreadBitwise) {
    for (const Shape& xs : {Shape{1, 64, 20, 20}, Shape{2, 17, 9, 13}}) {
        OneNode o;
        o.op = "Resize";
        o.xs = xs;
        o.consts = {{{}, false}};  // no roi
        o.fixed = {testnode::f32({4}, {1.0f, 1.0f, 2.0f, 2.0f})};
        o.attrs = {{"mode", as("nearest")}};
        expect_same_threaded(o, "nearest 2x of " + std::to_string(xs[1]) + "x" + std::to_string(xs[2]), "nearest x");
    }
}

TEST(Threaded, ConvMatchesOneThreadBitwise) {
    NoAmxConv fp32;
    struct C {
        int64_t n, c, h, w, m, k, s, p, group;
        bool res;
    };
    const C cases[] = {
        {1, 8, 13, 11, 19, 3, 1, 1, 1, false},   // implicit GEMM, odd M
        {1, 5, 17, 9, 37, 3, 2, 1, 1, true},     // im2col, stride 2, residual
        {2, 16, 10, 10, 64, 1, 1, 0, 1, true},   // pointwise, batch 2
        {1, 3, 23, 21, 16, 7, 2, 3, 1, false},   // stem-like
        {1, 24, 12, 13, 24, 3, 1, 1, 24, false}, // depthwise
        {1, 7, 9, 9, 7, 5, 2, 2, 7, true},       // depthwise 5x5 s2
        {1, 8, 9, 9, 8, 1, 1, 0, 1, false},      // M < 16: stays serial
    };
    for (const C& c : cases) {
        OneNode o;
        o.op = "Conv";
        o.xs = {c.n, c.c, c.h, c.w};
        o.consts = {{{c.m, c.c / c.group, c.k, c.k}, true}, {{c.m}, true}};
        o.attrs = {{"kernel_shape", aints({c.k, c.k})},
                   {"strides", aints({c.s, c.s})},
                   {"pads", aints({c.p, c.p, c.p, c.p})},
                   {"group", ai(c.group)},
                   {"_fused_act", as("Relu")}};
        if (c.res) {
            const int64_t oh = (c.h + 2 * c.p - c.k) / c.s + 1, ow = (c.w + 2 * c.p - c.k) / c.s + 1;
            o.residual = true;
            o.rs = {c.n, c.m, oh, ow};
            o.attrs["_fused_residual"] = ai(1);
        }
        expect_same_threaded(o, "conv m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                                    " group=" + std::to_string(c.group));
    }
}

// AMX (where this core has it): convs split by pixels (a 1x1 on 14x14 with 4 channel blocks and
// ResNet-50's on 28x28, a residual; a 3x3 stride 2 on 56 -> 28), under 256 pixels with >= 8
// channel blocks by channels (SqueezeNet's classifier, ResNet-50's 1x1 256 -> 1024 on 14x14), and
// MatMul by 32-column blocks, bitwise as one thread.
TEST(Threaded, AmxMatchesOneThreadBitwise) {
    if (!kernels::amx_usable()) GTEST_SKIP() << "no AMX on this CPU / OS (or JIFFY_AMX=0)";
    const ConvCase cases[] = {
        {512, 14, 14, 128, 1, 1, 0, true, "conv_amx"},
        {128, 28, 28, 512, 1, 1, 0, false, "conv_amx"},
        {128, 56, 56, 128, 3, 2, 1, true, "conv_amx"},
        {512, 13, 13, 1000, 1, 1, 0, false, "conv_amx"},
        {256, 14, 14, 1024, 1, 1, 0, true, "conv_amx"},
    };
    for (const ConvCase& c : cases) {
        const OneNode o = conv_node(c);
        const bool by_channels = c.h * c.w < 256 && c.m >= 8 * 32;
        expect_same_threaded(o, conv_what(c), by_channels ? " threads" : "threads by pixels");
        EXPECT_NE(o.kernel.find(c.split), std::string::npos) << conv_what(c) << ": " << o.kernel;
        if (by_channels) EXPECT_EQ(o.kernel.find("by pixels"), std::string::npos) << conv_what(c) << ": " << o.kernel;
    }
    for (int64_t n : {100, 200, 520}) {
        OneNode mm;
        mm.op = "MatMul";
        mm.xs = {2, 40, 96};
        mm.consts = {{{96, n}, true}};
        expect_same_threaded(mm, "matmul 80 x 96 x " + std::to_string(n), "32x32 threaded");
    }
}

// Softmax over the last axis splits its rows (an OCR head's 160 x 6625 classes, attention's
// heads x rows), odd row counts and lengths, with a fused scale too: the same bits as one thread.
// Over a middle axis it stays on the caller.
TEST(Threaded, SoftmaxRowsMatchOneThreadBitwise) {
    for (const Shape& xs : {Shape{1, 37, 661}, Shape{3, 5, 19, 40}, Shape{2, 9}}) {
        for (bool scaled : {false, true}) {
            OneNode o;
            o.op = "Softmax";
            o.xs = xs;
            if (scaled) o.attrs["_fused_scale"] = af(0.125f);
            expect_same_threaded(o, "softmax " + shape_str(xs) + (scaled ? " scaled" : ""), "softmax rows threads");
        }
    }
    OneNode mid;
    mid.op = "Softmax";
    mid.xs = {2, 19, 8, 8};
    mid.attrs["axis"] = ai(1);
    expect_same_threaded(mid, "softmax over a middle axis");
    EXPECT_EQ(mid.kernel, "");
}

TEST(Threaded, GemmAndMatMulMatchOneThreadBitwise) {
    for (int64_t m : {1, 5, 40}) {
        for (int64_t n : {10, 70, 128, 200, 300, 520}) {
            OneNode g;
            g.op = "Gemm";
            g.xs = {m, 33};
            g.consts = {{{n, 33}, true}, {{n}, true}};
            g.attrs = {{"transB", ai(1)}};
            expect_same_threaded(g, "gemm m=" + std::to_string(m) + " n=" + std::to_string(n));
            OneNode mm;
            mm.op = "MatMul";
            mm.xs = {m, 33};
            mm.consts = {{{33, n}, true}};
            expect_same_threaded(mm, "matmul m=" + std::to_string(m) + " n=" + std::to_string(n));
        }
    }
}

}  // namespace

// A session on a plan with a pool measures the pool against the caller alone (probes of warm runs
// and alternating blocks, Session::ThreadsChoice) and keeps the faster: every run, either way, gives the same
// bits; the first probe keeps the pool (a caller-faster verdict waits for a second probe, 200
// runs later; a clear pool win ends it after its first two blocks), and probes come again.
TEST(Threaded, SessionChoosesThreadsByMeasurement) {
    NoAmxConv fp32;
    const auto x = rnd(1 * 16 * 20 * 20, 1), w = rnd(32 * 16 * 9, 2, 0.2f), bias = rnd(32, 3);
    CompileOptions opt;
    opt.threads = 2;
    opt.parallel_min_flops = 0;
    const testnode::NodeRun r =
        testnode::run_one_node("Conv",
                               {testnode::NodeIn{testnode::f32({1, 16, 20, 20}, x)},
                                testnode::NodeIn{testnode::f32({32, 16, 3, 3}, w), true},
                                testnode::NodeIn{testnode::f32({32}, bias), true}},
                               {{"kernel_shape", aints({3, 3})}, {"pads", aints({1, 1, 1, 1})}}, 17, {true}, 1, opt);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    ASSERT_NE(r.plan->pool, nullptr);
    Session s(r.plan);
    std::memcpy(s.input_data(0), x.data(), x.size() * sizeof(float));
    const size_t n = size_t(32 * 20 * 20);
    std::vector<float> first;
    // The first probe ends after its first two blocks on a clear pool win, else after all.
    const int early = Session::kWarmRuns + 2 * Session::kBlockRuns, full = Session::kProbeRuns;
    int probe = -1;  // the run before which the first probe had ended
    bool was_suspect = false;
    for (int run = 0; run < full + 2000 + 2 * full + 203; ++run) {
        const Session::ThreadsChoice& c = s.threads_choice();
        if (probe < 0 && c.probes == 1) {
            probe = run;
            EXPECT_TRUE(run == early || run == full) << run;
            // One probe never moves off the pool: a caller-faster verdict waits for a second.
            EXPECT_EQ(c.decided, 0);
            EXPECT_GT(c.pool_med, 0.0f);
            EXPECT_GT(c.caller_med, 0.0f);
            if (run == early) EXPECT_LT(c.pool_med, Session::kClearWin * c.caller_med);
            EXPECT_EQ(c.suspect, c.pool_med > 1.02f * c.caller_med);
            was_suspect = c.suspect;
        }
        if (probe < 0) EXPECT_EQ(c.decided, -1) << run;
        if (probe >= 0 && run <= probe + (was_suspect ? 200 : 2000)) EXPECT_EQ(c.probes, 1) << run;
        ASSERT_TRUE(s.run().ok());
        const float* y = static_cast<const float*>(s.output_data(0));
        if (first.empty()) first.assign(y, y + n);
        ASSERT_EQ(std::memcmp(first.data(), y, n * sizeof(float)), 0) << "run " << run;
        EXPECT_FALSE(r.plan->pool->serial()) << "the caller-only mode outlived run " << run;
    }
    EXPECT_GE(probe, early);
    EXPECT_GE(s.threads_choice().probes, 2);
}

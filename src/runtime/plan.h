// Plan: the compiled, immutable form of a model for one set of input shapes. A flat list of
// steps (kernel + slot indices), one arena laid out by liveness, constants, and I/O descriptions.
// Shareable between threads; each caller runs it through its own Session (arena + bindings).
// See docs/architecture.md and docs/memory.md.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "ops/op.h"
#include "runtime/scratch.h"
#include "runtime/threadpool.h"

namespace jiffy {

struct CompileOptions {
    // Shapes of graph inputs; inputs not listed use their declared shape (symbolic dims resolved
    // from the shapes given for other inputs).
    std::map<std::string, Shape> input_shapes;
    // Inputs whose values are fixed at compile time (they are folded like initializers). The
    // compiler asks for these with Code::kNeedValue when a shape depends on an input's value.
    std::map<std::string, std::shared_ptr<const Tensor>> frozen_inputs;
    // Inputs whose values the caller holds and would let the compiler freeze. An `If` whose
    // condition depends only on such inputs, each a small integer/bool tensor (<= 64 elements,
    // e.g. Silero's sample rate), asks for them (kNeedValue) so that its branch is inlined.
    std::set<std::string> freezable_inputs;
    // Intra-op threads (docs/threading.md). 1: the caller's thread only (no pool). > 1: compile
    // creates a pool of threads - 1 pinned workers (unless `pool` is given) and ops of at least
    // parallel_min_flops (2 x multiply-adds) split their outer loop across it.
    int threads = 1;
    std::shared_ptr<ThreadPool> pool;
    // The plan's shared per-run kernel scratch (scratch.h): compile_graph makes a new one for each
    // plan; the plans of a node's subgraphs (If / Loop / Scan bodies, run inside that node's step)
    // share their parent's.
    std::shared_ptr<SharedScratch> scratch;
    // 0.5 MFLOP (~5 us on one core): measured against 2 MFLOP on all 20 models with 2 threads,
    // no model slower, the CNNs 10-20% faster (MobileNetV2's small depthwise layers now split).
    int64_t parallel_min_flops = 500'000;
    // A GEMV (M = 1, constant weights) also splits when its weights reach this many bytes: it is
    // bound by reading them, not by FLOPs, and each thread then reads (and keeps in its own L2)
    // only its share of the columns. Env JIFFY_PAR_MIN_GEMV_BYTES overrides.
    int64_t parallel_min_gemv_bytes = 256 * 1024;
    uint64_t max_bytes = uint64_t(4) << 30;  // arena + folded constants
};

struct IoDesc {
    std::string name;
    DType dtype = DType::kUndefined;
    Shape shape;
    size_t nbytes = 0;
};

// Where a slot's bytes live at run time.
struct Slot {
    enum Kind : uint8_t { kArena, kConst, kInput, kOutput };
    Kind kind = kArena;
    size_t offset = 0;          // kArena: byte offset; kInput/kOutput: I/O index
    size_t out_byte = 0;        // kOutput: byte offset in that output (a part of an in-place Concat)
    const void* data = nullptr; // kConst
    size_t nbytes = 0;
    int value = -1;             // id in the compiled graph (for diagnostics)
};

struct Step {
    const Kernel* kernel = nullptr;
    uint32_t first_in = 0, first_out = 0;  // into Plan::step_in / step_out
    uint16_t num_in = 0, num_out = 0;
};

// Per-step description for inspect/profile (not used by run).
struct StepInfo {
    std::string op, name;
    std::vector<Shape> in_shapes, out_shapes;
    std::vector<DType> in_dtypes, out_dtypes;
    std::vector<bool> in_const;
    std::map<std::string, Attr> attrs;
};

// 2 x multiply-adds of one step (Conv/ConvTranspose/Gemm/MatMul/RNNs; 0 for other ops).
int64_t step_flops(const StepInfo& s);

struct Plan {
    std::shared_ptr<ThreadPool> pool;  // threads > 1 only; declared first: outlives the kernels
    std::shared_ptr<SharedScratch> scratch;  // the kernels' shared per-run scratch (scratch.h)
    std::vector<IoDesc> inputs, outputs;
    std::vector<Slot> slots;
    std::vector<int32_t> step_in, step_out;  // slot ids, -1 for omitted
    std::vector<Step> steps;
    std::vector<StepInfo> step_info;
    std::vector<std::unique_ptr<Kernel>> kernels;
    std::vector<std::shared_ptr<const Tensor>> constants;
    size_t arena_bytes = 0;
    uint64_t constant_bytes = 0;  // folded constants + weights referenced by steps
    std::vector<std::string> frozen;  // names of inputs frozen at compile time
    // (input index, value) of frozen inputs: callers must pass exactly these values.
    std::vector<std::pair<size_t, std::shared_ptr<const Tensor>>> frozen_values;

    int64_t flops() const;  // 2 x multiply-adds of Conv/ConvTranspose/Gemm/MatMul/RNNs

    // Fast weights (choose_fast_weights: AMX weights to 17 bits, GEMVs' 24-bit weights): the kernels running that way, and the probe's
    // largest output difference from the exact mode relative to the output's magnitude (-1: no
    // probe ran; where it is over kFastWeightsTol every kernel stays exact).
    int fast_weight_steps = 0;
    double fast_weight_err = -1;
    double fast_weight_step_err = -1;  // the same over the steps' float32 values (where compared)
};

// An output may move this much (relative to its magnitude) on the probe input for the fast mode
// to be kept: a tenth of the 1e-4 the engine promises against ONNX Runtime. The transformer
// models move 1.5e-6 - 4e-6 (docs/amx.md).
inline constexpr double kFastWeightsTol = 1e-5;
// A step's float32 value (every step's, in plans whose values total <= 64 MiB) may move this
// much: weights to 16-17 significant bits move a product's own output up to ~1.2e-5 of its
// magnitude (docs/gemv.md, "24-bit weights"), so 3x that flags what amplifies it downstream
// (a cancellation, a LayerNorm of a flat row) even where the outputs hide it.
inline constexpr double kFastWeightsStepTol = 3e-5;

// The number of chunks (>= 1) an op of `flops` should be split into under `opt`: 1 without a pool
// or below opt.parallel_min_flops; kernels call it at prepare and keep per-chunk scratch.
int parallel_chunks(const CompileOptions& opt, int64_t flops);
// The same for a GEMV of `flops` whose constant weights take `weight_bytes`: it also splits from
// opt.parallel_min_gemv_bytes of weights up.
int parallel_chunks_gemv(const CompileOptions& opt, int64_t flops, int64_t weight_bytes);

// Compiles `g` for the given shapes. Errors: kInvalid/kUnsupported naming the node or tensor;
// kNeedValue (detail() = input name) when an input's value is needed.
Status compile_graph(const Graph& g, const CompileOptions& opt, std::shared_ptr<const Plan>* out);
// Compiles a subgraph whose formal inputs and captures have the given infos (in the order
// body.inputs then body.captures); the plan's inputs are in that order.
Status compile_subgraph_plan(const Graph& body, const std::vector<TensorInfo>& inputs,
                             const CompileOptions& opt, std::shared_ptr<const Plan>* out);

// Compile's last step for a top-level plan (runtime/precision.cpp): kernels with a fast mode for
// their constant weights (Kernel::set_fast_weights) take it only where runs on a fixed probe
// input, exact and fast (all at once, else group by group), give outputs within kFastWeightsTol
// of each other; JIFFY_AMX=x3 keeps the AMX ones exact, JIFFY_GEMV_W24=0 the GEMVs. Subgraph
// plans stay exact.
void choose_fast_weights(const std::shared_ptr<const Plan>& plan);

// Run state of one caller: the arena and the I/O bindings.
class Session {
public:
    explicit Session(std::shared_ptr<const Plan> plan);
    const Plan& plan() const { return *plan_; }

    // Buffers owned by the session (valid until rebound); inputs are zero-filled at start.
    void* input_data(size_t i) { return inputs_[i]; }
    const void* output_data(size_t i) const { return outputs_[i]; }
    // Zero copy: read input i from / write output i to the caller's buffer (must hold nbytes and
    // stay valid across run()). nullptr restores the session's own buffer.
    void bind_input(size_t i, const void* p);
    void bind_output(size_t i, void* p);

    // Runs every step. No allocation, lock or syscall.
    Status run();
    // run() that also adds each step's wall time in nanoseconds to step_ns[i] (plan().steps.size()
    // entries). For profiling only (`JIFFY_PROFILE=1 jiffy bench`): reads the clock per step.
    Status run_profiled(double* step_ns);
    // run() that calls after(i, outs) once step i has run, outs its plan().steps[i].num_out output
    // pointers (nullptr where omitted). Compile-time checks only (choose_fast_weights).
    Status run_observed(const std::function<void(size_t, void* const*)>& after);

    // With a thread pool (docs/threading.md, "Measured choice"): a probe is kWarmRuns runs on
    // the pool, then 2 x kBlocks blocks of kBlockRuns runs alternating between the pool and the
    // caller alone (ThreadPool::set_serial), each block's first run untimed (it fetches what the
    // other mode left in the other core's cache); the caller alone is chosen where two probes in
    // a row find the pool's median timed run over 1.02x the caller's (the second 200 runs after
    // the first), so a model the pool slows (small ops whose halves the next op fetches from the
    // other core) runs as on one thread. The first probe starts at the first run; the next after
    // 2000 more runs, then every 10000 (a choice made while the host slowed one core does not
    // stay; the runs in the mode not chosen stay under 1% of all, off the p99).
    // A probe ends early, for the pool, after its first two blocks when every timed pool run
    // took under kClearWin x every timed caller-alone run: a model the pool clearly speeds up
    // does not spend 9 of its first 20 runs on one core (ConvNeXt-Tiny at two threads: 47 ms on
    // the pool, 87 alone; a harness that warms up 7 runs timed the probe at 63 ms).
    // JIFFY_THREADS_AUTO=0: always the pool.
    static constexpr float kClearWin = 0.8f;
    static constexpr int kWarmRuns = 2, kBlocks = 3, kBlockRuns = 3;  // 20 runs: a usual warm-up
    static constexpr int kTimed = kBlocks * (kBlockRuns - 1);  // timed runs per mode
    static constexpr int kProbeRuns = kWarmRuns + 2 * kBlocks * kBlockRuns;
    struct ThreadsChoice {
        int decided = -1;    // -1: before the first probe's end; 0: the pool; 1: the caller alone
        bool suspect = false;  // the last probe found the caller faster; the pool until confirmed
        int probes = 0;      // probes finished
        int64_t runs = 0;    // runs since the last probe ended (or since the first run)
        int phase = 0;       // runs into the current probe (0: not probing)
        int64_t next = 0;    // runs after the last probe when the next starts
        // Timed runs in cycles() ticks (no syscall: steady_clock may be one on some hosts).
        float pool_ticks[kTimed] = {}, caller_ticks[kTimed] = {};
        float pool_med = 0, caller_med = 0;  // the last probe's medians, in ticks
    };
    const ThreadsChoice& threads_choice() const { return choice_; }

private:
    void resolve();
    Status run_steps();
    Status run_probing(ThreadPool* pool);
    ThreadsChoice choice_;

    std::shared_ptr<const Plan> plan_;
    std::shared_ptr<uint8_t> arena_;
    std::vector<std::shared_ptr<uint8_t>> own_in_, own_out_;
    std::vector<void*> inputs_, outputs_;
    std::vector<const void*> in_ptrs_;  // per step_in entry
    std::vector<void*> out_ptrs_;       // per step_out entry
};

}  // namespace jiffy

// The fast-weights choice (docs/amx.md, "Weights to 17 bits"; docs/gemv.md, "24-bit weights"):
// kernels with a faster, less exact mode for their constant weights (Kernel::set_fast_weights:
// MatMul, Gemm and convs on AMX with their weights to 17 bits; GEMVs with 24-bit weights) take it
// only where the plan's outputs on a probe input stay within kFastWeightsTol of the exact mode's,
// relative to each output's magnitude: all at once, else group by group (products, then convs).
// Compile time only; the run path never sees it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "kernels/amx.h"
#include "runtime/plan.h"

namespace jiffy {

namespace {

// The probe's inputs: float32 uniform in [-1, 1) from a fixed sequence (the same bits every
// compile), other types zero (index 0 is in range wherever an index is), frozen inputs their
// values.
void fill_probe_inputs(const Plan& plan, Session& s) {
    uint32_t x = 0x9e3779b9u;
    for (size_t i = 0; i < plan.inputs.size(); ++i) {
        const IoDesc& d = plan.inputs[i];
        void* p = s.input_data(i);
        std::memset(p, 0, d.nbytes);
        if (d.dtype != DType::kF32) continue;
        float* f = static_cast<float*>(p);
        for (size_t k = 0; k < d.nbytes / sizeof(float); ++k) {
            x = x * 1664525u + 1013904223u;
            f[k] = float(int32_t(x >> 8) - (1 << 23)) * (1.0f / float(1 << 23));
        }
    }
    for (const auto& [idx, t] : plan.frozen_values)
        if (idx < plan.inputs.size() && t->nbytes() == plan.inputs[idx].nbytes)
            std::memcpy(s.input_data(idx), t->data(), t->nbytes());
}

// The float32 values of steps a probe run compares, besides the outputs, while their total stays
// within this: every step's (a final Sigmoid can hide how far its logits moved: saturated on the
// probe input, or not reached, as where an If picks a branch by a threshold on it). Larger plans
// (CNNs' feature maps) compare their outputs only.
constexpr size_t kProbeStepBytes = size_t(64) << 20;

// A float32 step output a probe run compares: step, output index, bytes.
struct StepOut {
    size_t step, j, bytes;
};

// Every float32 step output in step order, or none where they total over kProbeStepBytes.
std::vector<StepOut> probed_step_outputs(const Plan& plan) {
    std::vector<StepOut> r;
    size_t total = 0;
    for (size_t i = 0; i < plan.steps.size(); ++i)
        for (size_t j = 0; j < plan.steps[i].num_out; ++j) {
            const int32_t sid = plan.step_out[plan.steps[i].first_out + j];
            if (sid < 0 || j >= plan.step_info[i].out_dtypes.size() || plan.step_info[i].out_dtypes[j] != DType::kF32)
                continue;
            r.push_back({i, j, plan.slots[size_t(sid)].nbytes});
            total += r.back().bytes;
        }
    if (total > kProbeStepBytes) r.clear();
    return r;
}

// What one probe run yields: the outputs' bytes, then those of `steps` (probed_step_outputs), in
// that order; the same list every run of a plan.
struct ProbeValues {
    std::vector<std::vector<uint8_t>> v;
};

// One run on the probe inputs, or false where it failed.
bool probe_run(const Plan& plan, Session& s, const std::vector<StepOut>& steps, ProbeValues* out) {
    out->v.assign(plan.outputs.size(), {});
    size_t next = 0;  // the first entry of `steps` not yet reached
    const Status st = s.run_observed([&](size_t i, void* const* outs) {
        for (; next < steps.size() && steps[next].step == i; ++next) {
            const uint8_t* b = static_cast<const uint8_t*>(outs[steps[next].j]);
            out->v.emplace_back(b, b + steps[next].bytes);
        }
    });
    if (!st.ok()) return false;
    for (size_t i = 0; i < plan.outputs.size(); ++i) {
        const uint8_t* b = static_cast<const uint8_t*>(s.output_data(i));
        out->v[i].assign(b, b + plan.outputs[i].nbytes);
    }
    return true;
}

// How far a fast run moved from the exact one: over the float32 outputs and, separately, the
// step values, the largest max |fast - exact| / max |exact| of one tensor. Infinity (outputs)
// where an output is not finite in either (an overflow the exact mode may not share) or an
// output of another type (an ArgMax's indices, say) differs at all; infinity (steps) where a
// step's value is finite in one run and not in the other (both the same infinity, as an
// attention mask's -inf, is no movement).
struct Movement {
    double outputs = 0, steps = 0;
    // Kept: within the bounds, and the outputs moved at all: the probe saw the fast weights reach
    // an output (not where a saturated Sigmoid, an If's other branch or an unchanged ArgMax hid
    // them, as for hey_jarvis's verifier branch on the probe input).
    bool ok() const { return outputs > 0 && outputs <= kFastWeightsTol && steps <= kFastWeightsStepTol; }
};

Movement movement(const Plan& plan, const ProbeValues& exact, const ProbeValues& fast) {
    Movement m;
    for (size_t i = 0; i < exact.v.size(); ++i) {
        const bool output = i < plan.outputs.size();
        double& worst = output ? m.outputs : m.steps;
        if (output && plan.outputs[i].dtype != DType::kF32) {
            if (exact.v[i] != fast.v[i]) worst = INFINITY;
            continue;
        }
        const float* e = reinterpret_cast<const float*>(exact.v[i].data());
        const float* f = reinterpret_cast<const float*>(fast.v[i].data());
        double mag = 0, diff = 0;
        for (size_t k = 0; k < exact.v[i].size() / sizeof(float); ++k) {
            if (!std::isfinite(e[k]) || !std::isfinite(f[k])) {
                if (output || !(e[k] == f[k] || (std::isnan(e[k]) && std::isnan(f[k])))) diff = INFINITY;
                continue;
            }
            mag = std::max(mag, std::abs(double(e[k])));
            diff = std::max(diff, std::abs(double(f[k]) - double(e[k])));
        }
        if (diff > 0) worst = std::max(worst, mag > 0 ? diff / mag : double(INFINITY));
    }
    return m;
}

}  // namespace

void choose_fast_weights(const std::shared_ptr<const Plan>& plan) {
    using FW = Kernel::FastWeights;
    Plan& p = *std::const_pointer_cast<Plan>(plan);
    p.fast_weight_steps = 0;
    p.fast_weight_err = -1;
    // Kernels with a fast mode by group (products first: their weights stream from memory every
    // run, a conv's are reused across its pixels), all exact until the probe says.
    std::vector<Kernel*> groups[2];
    for (const auto& k : p.kernels) {
        const FW g = k ? k->set_fast_weights(false) : FW::kNone;
        if (g != FW::kNone) groups[g == FW::kProduct ? 0 : 1].push_back(k.get());
    }
    if (groups[0].empty() && groups[1].empty()) return;
    // The constants each kernel's step reads (a Gather's table not counted: a run reads a few of
    // its rows). Where the kernels with a fast mode hold under 1/8 of those bytes (ResNet-50's
    // classifier: 8 of 102 MB), the bytes they would save are no visible share of a run: no probe
    // (its two runs, 0.7 s of ResNet-50's compile), exact.
    std::map<const Kernel*, uint64_t> bytes;
    for (size_t i = 0; i < p.steps.size(); ++i) {
        const Step& st = p.steps[i];
        if (i < p.step_info.size() && p.step_info[i].op.rfind("Gather", 0) == 0) continue;
        for (uint16_t j = 0; j < st.num_in; ++j) {
            const int32_t sid = p.step_in[st.first_in + j];
            if (sid >= 0 && p.slots[size_t(sid)].kind == Slot::kConst) bytes[st.kernel] += p.slots[size_t(sid)].nbytes;
        }
    }
    uint64_t fast_bytes = 0, all_bytes = 0;
    for (const auto& [k, b] : bytes) all_bytes += b;
    for (const auto& g : groups)
        for (const Kernel* k : g) fast_bytes += bytes[k];
    if (8 * fast_bytes < all_bytes) return;  // every kernel still exact (set above)
    Session s(plan);
    fill_probe_inputs(p, s);  // once: a run never writes its inputs
    const std::vector<StepOut> steps = probed_step_outputs(p);
    ProbeValues exact, quick;
    if (!probe_run(p, s, steps, &exact)) return;  // the probe input does not run: all exact
    const auto set = [&](int g, bool fast) {
        for (Kernel* k : groups[g]) k->set_fast_weights(fast);
    };
    const auto moved = [&] {
        Movement m;
        if (!probe_run(p, s, steps, &quick)) m.outputs = m.steps = INFINITY;
        else m = movement(p, exact, quick);
        return m;
    };
    // All at once; where that moves the values too much and both groups are there, group by
    // group (each kept only if the ones kept so far and it stay within the bounds).
    bool keep[2] = {!groups[0].empty(), !groups[1].empty()};
    set(0, keep[0]), set(1, keep[1]);
    Movement m = moved();
    if (!m.ok()) {
        set(0, false), set(1, false);
        const bool both = keep[0] && keep[1];
        keep[0] = keep[1] = false;
        for (int g = 0; both && g < 2; ++g) {
            set(g, true);
            const Movement e = moved();
            keep[g] = e.ok();
            if (keep[g]) m = e;  // else m stays what was measured before (over the bounds)
            else set(g, false);
        }
    }
    for (int g = 0; g < 2; ++g)
        if (keep[g]) p.fast_weight_steps += int(groups[g].size());
    // A group still exact: its kernels one at a time, the most constant bytes first (the first
    // kKernelProbes), each kept only if it and all kept so far stay within the bounds (mlp_256:
    // its 4 MB layer and its first 1 MB one move its output 7.9e-6, all three 1.1e-5).
    constexpr size_t kKernelProbes = 16;
    for (int g = 0; g < 2; ++g) {
        if (keep[g] || groups[g].size() < 2) continue;
        std::stable_sort(groups[g].begin(), groups[g].end(),
                         [&](const Kernel* a, const Kernel* b) { return bytes[a] > bytes[b]; });
        for (size_t i = 0; i < std::min(groups[g].size(), kKernelProbes); ++i) {
            groups[g][i]->set_fast_weights(true);
            const Movement e = moved();
            if (e.ok()) {
                m = e;
                ++p.fast_weight_steps;
            } else {
                groups[g][i]->set_fast_weights(false);
            }
        }
    }
    p.fast_weight_err = m.outputs;
    p.fast_weight_step_err = m.steps;
}

}  // namespace jiffy

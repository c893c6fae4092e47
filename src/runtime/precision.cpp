// The weights-to-17-bits choice (docs/amx.md, "Weights to 17 bits"): kernels with a faster, less
// exact mode for their constant weights (Kernel::set_fast_weights: MatMul, Gemm and convs on AMX)
// take it only where the plan's outputs on a probe input stay within kFastWeightsTol of the exact
// mode's, relative to each output's magnitude: all at once, else group by group (products, then
// convs). Compile time only; the run path never sees it.
#include <algorithm>
#include <cmath>
#include <cstring>
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

// The outputs of one run on the probe inputs (their bytes), or false where it failed.
bool probe_run(const Plan& plan, Session& s, std::vector<std::vector<uint8_t>>* outs) {
    if (!s.run().ok()) return false;
    outs->assign(plan.outputs.size(), {});
    for (size_t i = 0; i < plan.outputs.size(); ++i) {
        const uint8_t* b = static_cast<const uint8_t*>(s.output_data(i));
        (*outs)[i].assign(b, b + plan.outputs[i].nbytes);
    }
    return true;
}

// Over the float32 outputs, the largest max |fast - exact| / max |exact|; infinity where a value
// is not finite in either (an overflow the exact mode may not share) or where an output of
// another type (an ArgMax's indices, say) differs at all.
double output_difference(const Plan& plan, const std::vector<std::vector<uint8_t>>& exact,
                         const std::vector<std::vector<uint8_t>>& fast) {
    double worst = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
        if (plan.outputs[i].dtype != DType::kF32) {
            if (exact[i] != fast[i]) return INFINITY;
            continue;
        }
        const float* e = reinterpret_cast<const float*>(exact[i].data());
        const float* f = reinterpret_cast<const float*>(fast[i].data());
        double mag = 0, diff = 0;
        for (size_t k = 0; k < exact[i].size() / sizeof(float); ++k) {
            if (!std::isfinite(e[k]) || !std::isfinite(f[k])) return INFINITY;
            mag = std::max(mag, std::abs(double(e[k])));
            diff = std::max(diff, std::abs(double(f[k]) - double(e[k])));
        }
        if (diff > 0) worst = std::max(worst, mag > 0 ? diff / mag : double(INFINITY));
    }
    return worst;
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
    if ((groups[0].empty() && groups[1].empty()) || kernels::amx_exact_weights()) return;
    Session s(plan);
    fill_probe_inputs(p, s);  // once: a run never writes its inputs
    std::vector<std::vector<uint8_t>> exact, quick;
    if (!probe_run(p, s, &exact)) return;  // the probe input does not run: all exact
    const auto set = [&](int g, bool fast) {
        for (Kernel* k : groups[g]) k->set_fast_weights(fast);
    };
    const auto moved = [&] { return probe_run(p, s, &quick) ? output_difference(p, exact, quick) : double(INFINITY); };
    // All at once; where that moves the outputs too much and both groups are there, group by
    // group (each kept only if the ones kept so far and it stay within the bound).
    bool keep[2] = {!groups[0].empty(), !groups[1].empty()};
    set(0, keep[0]), set(1, keep[1]);
    double err = moved();
    if (!(err <= kFastWeightsTol)) {
        set(0, false), set(1, false);
        const bool both = keep[0] && keep[1];
        keep[0] = keep[1] = false;
        for (int g = 0; both && g < 2; ++g) {
            set(g, true);
            const double e = moved();
            keep[g] = e <= kFastWeightsTol;
            if (keep[g]) err = e;  // else err stays what was measured before (over the bound)
            else set(g, false);
        }
    }
    for (int g = 0; g < 2; ++g)
        if (keep[g]) p.fast_weight_steps += int(groups[g].size());
    p.fast_weight_err = err;
}

}  // namespace jiffy

// Shared by the model benchmarks (model_table.cpp, ort_peer.cpp): the model list and reference
// inputs (tests/models/refs.h), a compiled Jiffy session on those inputs, output comparison,
// latency timing and percentiles, and the peer figures of bench/peers/.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../tests/models/refs.h"

namespace jiffy::bench {

using testing::model_names;
using testing::RefCase;
using testing::source_dir;

// ONNX Runtime's figures from the project's PEERS.md (bench/peers/ort_native.tsv).
struct PeerFigures {
    double p50 = 0, p99 = 0, p50_2t = 0;  // µs; 0 = not listed
};

inline std::map<std::string, PeerFigures> peer_figures() {
    std::map<std::string, PeerFigures> r;
    std::ifstream f(source_dir() + "/bench/peers/ort_native.tsv");
    std::string line;
    while (std::getline(f, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream is(line);
        std::string name;
        PeerFigures p;
        if (is >> name >> p.p50) {
            is >> p.p99 >> p.p50_2t;
            r[name] = p;
        }
    }
    return r;
}

// A model compiled by Jiffy for its reference inputs, inputs copied in, run once.
struct JiffyCase {
    RefCase rc;
    std::shared_ptr<const Plan> plan;
    std::unique_ptr<Session> session;

    Status prepare(const std::string& name, int threads = 1) {
        JIFFY_RETURN_IF_ERROR(testing::load_ref_inputs(name, &rc));
        rc.opt.threads = threads;
        std::shared_ptr<Model> m;
        JIFFY_RETURN_IF_ERROR(Model::load(rc.model_path, ImportOptions{}, &m));
        JIFFY_RETURN_IF_ERROR(m->compile(rc.opt, rc.inputs, &plan));
        session = std::make_unique<Session>(plan);
        for (size_t i = 0; i < plan->inputs.size(); ++i)
            std::memcpy(session->input_data(i), rc.inputs.at(plan->inputs[i].name)->data(), plan->inputs[i].nbytes);
        return session->run();
    }
    // Copy of output i after the last run.
    Tensor output(size_t i) const {
        const IoDesc& d = plan->outputs[i];
        Tensor t(d.dtype, d.shape);
        std::memcpy(t.data(), session->output_data(i), d.nbytes);
        return t;
    }
};

// max |got - want| / max(max |want|, 1e-3); negative when the shapes or dtypes differ.
inline double rel_error(const Tensor& want, const Tensor& got) {
    if (want.shape() != got.shape() || want.dtype() != got.dtype()) return -1;
    double mag = 0, err = 0;
    for (int64_t k = 0; k < want.numel(); ++k) {
        mag = std::max(mag, std::abs(want.get_f64(k)));
        err = std::max(err, std::abs(want.get_f64(k) - got.get_f64(k)));
    }
    return err / std::max(mag, 1e-3);
}

// Worst rel_error of the case's outputs against ONNX Runtime's reference outputs (.cache/refs);
// negative on a shape mismatch or a missing reference.
inline double rel_error_vs_refs(const JiffyCase& c) {
    auto want = testing::read_pairs(c.rc.ref_dir + "/outputs.txt");
    double worst = 0;
    for (size_t i = 0; i < want.size() && i < c.plan->outputs.size(); ++i) {
        Tensor ref;
        if (!read_npy(c.rc.ref_dir + "/" + want[i].second, &ref).ok()) return -1;
        double e = rel_error(ref, c.output(i));
        if (e < 0) return -1;
        worst = std::max(worst, e);
    }
    return worst;
}

// Calls `run` repeatedly for `seconds` (and at least `min_runs` times); appends each call's
// latency in µs (steady_clock around the call only).
template <typename F>
void time_runs(F&& run, double seconds, size_t min_runs, std::vector<double>* us) {
    using clk = std::chrono::steady_clock;
    auto end = clk::now() + std::chrono::duration<double>(seconds);
    for (size_t n = 0; clk::now() < end || n < min_runs; ++n) {
        auto t0 = clk::now();
        run();
        us->push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
    }
}

struct Percentiles {
    double p50 = 0, p99 = 0;
    int64_t n = 0;
};

inline Percentiles percentiles(std::vector<double> us) {
    Percentiles p;
    if (us.empty()) return p;
    std::sort(us.begin(), us.end());
    p.n = int64_t(us.size());
    p.p50 = us[us.size() / 2];
    p.p99 = us[std::min(us.size() - 1, size_t(double(us.size()) * 0.99))];
    return p;
}

inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "12.3" under 100 µs, "1234" above (the tables' number format).
inline std::string fmt_us(double us) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f", us < 100 ? 2 : 0, us);
    return b;
}

}  // namespace jiffy::bench

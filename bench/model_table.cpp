// The main job: runs every public model (scripts/models.tsv) on its reference inputs, checks the
// outputs against ONNX Runtime's (max |error| / magnitude <= 1e-4), times `run` and prints a
// Markdown table with p50/p99, GFLOP/s (the plan's FLOPs / p50) and its share of the FMA peak the
// core gives at start (bench/machine_probe.h), and ONNX Runtime's native p50 (bench/peers/ort_native.tsv).
//   jiffy_models [--seconds S] [--json FILE] [--filter SUBSTRING]
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "bench_common.h"
#include "machine_probe.h"
#include "kernels/cpu.h"

using namespace jiffy;
using namespace jiffy::bench;

namespace {

struct Row {
    std::string name, status;
    int64_t flops = 0;
    uint64_t wbytes = 0;  // the plan's constants (weights)
    double floor = 0;     // one-core floor, us (machine_probe.h)
    size_t arena = 0;
    double rel_err = 0, p50 = 0, p99 = 0, ort_p50 = 0;
    int64_t iters = 0;
};

Row measure(const std::string& name, double seconds, const std::map<std::string, PeerFigures>& ort) {
    Row row;
    row.name = name;
    auto it = ort.find(name);
    row.ort_p50 = it == ort.end() ? 0 : it->second.p50;
    JiffyCase c;
    Status st = c.prepare(name);
    if (!st.ok()) {
        row.status = "ERROR: " + st.message();
        return row;
    }
    row.flops = c.plan->flops();
    row.wbytes = c.plan->constant_bytes;
    row.arena = c.plan->arena_bytes;
    row.rel_err = rel_error_vs_refs(c);
    if (row.rel_err < 0) {
        row.status = "MISMATCH (shape)";
        return row;
    }
    row.status = row.rel_err <= 1e-4 ? "ok" : "MISMATCH";
    for (int i = 0; i < 10; ++i) (void)c.session->run();
    std::vector<double> us;
    time_runs([&] { (void)c.session->run(); }, seconds, 5, &us);
    Percentiles p = percentiles(us);
    row.iters = p.n;
    row.p50 = p.p50;
    row.p99 = p.p99;
    return row;
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 1.0;
    std::string json_path, filter;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
        else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    }
    auto ort = peer_figures();
    std::vector<Row> rows;
    const double peak = fma_peak_gflops(300);
    std::printf("CPU: %s\n", cpu_description().c_str());
    std::printf("FP32 FMA peak of this core now: %.1f GFLOP/s (AVX-512; the %% peak column's base)\n\n", peak);
    std::printf("| model | MFLOP | arena KiB | max err / magnitude | check | p50 us | p99 us | GFLOP/s | %% peak | "
                "floor us | p50 / floor | ORT p50 us (PEERS.md) | p50 ratio |\n");
    std::printf("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    int bad = 0;
    for (const std::string& name : model_names()) {
        if (!filter.empty() && name.find(filter) == std::string::npos) continue;
        Row r = measure(name, seconds, ort);
        if (r.status != "ok") ++bad;
        char ratio[32] = "-", ortp[32] = "-";
        if (r.ort_p50 > 0 && r.p50 > 0) {
            std::snprintf(ratio, sizeof ratio, "%.2f", r.p50 / r.ort_p50);
            std::snprintf(ortp, sizeof ortp, "%.1f", r.ort_p50);
        }
        const double gflops = r.p50 > 0 ? double(r.flops) / r.p50 / 1e3 : 0;
        char pct[32] = "-", fl[32] = "-", jf[32] = "-";
        if (peak > 0) std::snprintf(pct, sizeof pct, "%.0f", 100.0 * gflops / peak);
        r.floor = r.status == "ok" ? floor_us(r.flops, r.wbytes, peak, 100) : 0;
        if (r.floor > 0) {
            std::snprintf(fl, sizeof fl, "%s", fmt_us(r.floor).c_str());
            std::snprintf(jf, sizeof jf, "%.2f", r.p50 / r.floor);
        }
        std::printf("| %s | %.2f | %.0f | %.2g | %s | %.*f | %.*f | %.1f | %s | %s | %s | %s | %s |\n", r.name.c_str(),
                    double(r.flops) / 1e6, double(r.arena) / 1024, r.rel_err, r.status.c_str(), r.p50 < 100 ? 2 : 0,
                    r.p50, r.p99 < 100 ? 2 : 0, r.p99, gflops, pct, fl, jf, ortp, ratio);
        std::fflush(stdout);
        rows.push_back(r);
    }
    if (!json_path.empty()) {
        std::ofstream f(json_path);
        f << "[";
        for (size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            f << (i ? ",\n " : "") << "{\"model\": \"" << r.name << "\", \"status\": \"" << (r.status == "ok" ? "ok" : "fail")
              << "\", \"flops\": " << r.flops << ", \"rel_err\": " << r.rel_err << ", \"p50_us\": " << r.p50
              << ", \"p99_us\": " << r.p99 << ", \"fma_peak_gflops\": " << peak << ", \"weight_bytes\": " << r.wbytes << ", \"floor_us\": " << r.floor
              << ", \"iters\": " << r.iters << ", \"ort_p50_us\": " << r.ort_p50 << "}";
        }
        f << "]\n";
    }
    std::printf("\n%zu models, %d not matching ONNX Runtime. Single thread, ISA %s; ORT figures are its "
                "native C-API p50 from PEERS.md (same machine class), not re-measured here.\n",
                rows.size(), bad, jiffy::kernels::isa_name(jiffy::kernels::active_isa()));
    return bad ? 1 : 0;
}

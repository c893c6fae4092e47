// The main job: runs every public model (scripts/models.tsv) on its reference inputs, checks the
// outputs against ONNX Runtime's (max |error| / magnitude <= 1e-4), times `run` and prints a
// Markdown table with p50/p99 and ONNX Runtime's native p50 (bench/peers/ort_native.tsv).
//   jiffy_models [--seconds S] [--json FILE] [--filter SUBSTRING]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "../tests/models/refs.h"
#include "kernels/cpu.h"

using namespace jiffy;
using namespace jiffy::testing;

namespace {

struct Row {
    std::string name, status;
    int64_t flops = 0;
    size_t arena = 0;
    double rel_err = 0, p50 = 0, p99 = 0, ort_p50 = 0;
    int64_t iters = 0;
};

std::map<std::string, double> ort_p50() {
    std::map<std::string, double> r;
    std::ifstream f(source_dir() + "/bench/peers/ort_native.tsv");
    std::string line;
    while (std::getline(f, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream is(line);
        std::string name;
        double p50;
        if (is >> name >> p50) r[name] = p50;
    }
    return r;
}

Row measure(const std::string& name, double seconds, const std::map<std::string, double>& ort) {
    Row row;
    row.name = name;
    auto it = ort.find(name);
    row.ort_p50 = it == ort.end() ? 0 : it->second;
    RefCase rc;
    Status st = load_ref_inputs(name, &rc);
    std::shared_ptr<Model> m;
    if (st.ok()) st = Model::load(rc.model_path, ImportOptions{}, &m);
    std::shared_ptr<const Plan> plan;
    if (st.ok()) st = m->compile(rc.opt, rc.inputs, &plan);
    if (!st.ok()) {
        row.status = "ERROR: " + st.message();
        return row;
    }
    row.flops = plan->flops();
    row.arena = plan->arena_bytes;
    Session s(plan);
    for (size_t i = 0; i < plan->inputs.size(); ++i)
        std::memcpy(s.input_data(i), rc.inputs.at(plan->inputs[i].name)->data(), plan->inputs[i].nbytes);
    st = s.run();
    if (!st.ok()) {
        row.status = "ERROR: " + st.message();
        return row;
    }
    auto want = read_pairs(rc.ref_dir + "/outputs.txt");
    for (size_t i = 0; i < want.size() && i < plan->outputs.size(); ++i) {
        Tensor ref;
        if (!read_npy(rc.ref_dir + "/" + want[i].second, &ref).ok() || ref.shape() != plan->outputs[i].shape) {
            row.status = "MISMATCH (shape)";
            return row;
        }
        Tensor got(plan->outputs[i].dtype, plan->outputs[i].shape);
        std::memcpy(got.data(), s.output_data(i), plan->outputs[i].nbytes);
        double mag = 0, err = 0;
        for (int64_t k = 0; k < ref.numel(); ++k) {
            mag = std::max(mag, std::abs(ref.get_f64(k)));
            err = std::max(err, std::abs(ref.get_f64(k) - got.get_f64(k)));
        }
        row.rel_err = std::max(row.rel_err, err / std::max(mag, 1e-3));
    }
    row.status = row.rel_err <= 1e-4 ? "ok" : "MISMATCH";
    using clk = std::chrono::steady_clock;
    for (int i = 0; i < 10; ++i) (void)s.run();
    std::vector<double> us;
    auto end = clk::now() + std::chrono::duration<double>(seconds);
    while (clk::now() < end || us.size() < 5) {
        auto t0 = clk::now();
        (void)s.run();
        us.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    row.iters = int64_t(us.size());
    row.p50 = us[us.size() / 2];
    row.p99 = us[std::min(us.size() - 1, size_t(double(us.size()) * 0.99))];
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
    auto ort = ort_p50();
    std::vector<Row> rows;
    std::printf("| model | MFLOP | arena KiB | max err / magnitude | check | p50 us | p99 us | ORT p50 us (PEERS.md) | p50 ratio |\n");
    std::printf("|---|---:|---:|---:|---|---:|---:|---:|---:|\n");
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
        std::printf("| %s | %.2f | %.0f | %.2g | %s | %.*f | %.*f | %s | %s |\n", r.name.c_str(),
                    double(r.flops) / 1e6, double(r.arena) / 1024, r.rel_err, r.status.c_str(), r.p50 < 100 ? 2 : 0,
                    r.p50, r.p99 < 100 ? 2 : 0, r.p99, ortp, ratio);
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
              << ", \"p99_us\": " << r.p99 << ", \"iters\": " << r.iters << ", \"ort_p50_us\": " << r.ort_p50 << "}";
        }
        f << "]\n";
    }
    std::printf("\n%zu models, %d not matching ONNX Runtime. Single thread, ISA %s; ORT figures are its "
                "native C-API p50 from PEERS.md (same machine class), not re-measured here.\n",
                rows.size(), bad, jiffy::kernels::isa_name(jiffy::kernels::active_isa()));
    return bad ? 1 : 0;
}

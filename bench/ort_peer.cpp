// Jiffy vs ONNX Runtime, measured interleaved in one process: for every model of the model table,
// an ORT session (CPU EP, ORT_ENABLE_ALL, ORT_SEQUENTIAL, intra-op threads 1 or 2) and a Jiffy plan
// run on the same input bytes; the outputs are compared (max |error| / magnitude <= 1e-4), then for
// R rounds Jiffy runs for T seconds and ORT for T seconds (alternating which goes first). Per model:
// the medians over rounds of each engine's p50 and p99, the ratio Jiffy p50 / ORT p50 and issue 3's
// target for the model's class (bench/peers/targets.tsv). For models under 100 us also the p99
// of a spin control (SpinControl: registers only, as long as Jiffy's p50), the host's share.
//   jiffy_vs_ort [--ort-lib PATH] [--filter NAME] [--seconds T] [--rounds R] [--threads 1|2]
//                [--json FILE] [--no-control]
// ORT's library is loaded with dlopen (found under .cache/ort when --ort-lib is not given) and
// called through our own declaration of its C API (peers/ort_api.h), checked on a 1-node model
// first. Exit codes: 0 all ran and matched, 1 a model failed or mismatched, 2 bad arguments or a
// broken ORT library, 77 no ORT library found (the ctest smoke reports a skip).
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "bench_common.h"
#include "machine_probe.h"
#include "kernels/cpu.h"
#include "peers/ort_api.h"

using namespace jiffy;
using namespace jiffy::bench;

namespace {

constexpr double kTolerance = 1e-4;

// ---------------------------------------------------------------------------------------------
// The library and its API table.

struct OrtLib {
    void* handle = nullptr;
    const ort::Api* api = nullptr;
    std::string version, path;

    // A Status from an ORT status (releasing it); ok for null.
    Status check(ort::StatusPtr s, const char* what) const {
        if (!s) return {};
        std::string msg = api->GetErrorMessage(s);
        api->ReleaseStatus(s);
        return invalid("ONNX Runtime ", what, ": ", msg);
    }
};

std::string find_ort_lib() {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path bin = fs::path(source_dir()) / ".cache/ort/node_modules/onnxruntime-node/bin";
    for (const auto& napi : fs::directory_iterator(bin, ec)) {
        fs::path p = napi.path() / "linux/x64/libonnxruntime.so.1";
        if (fs::exists(p, ec)) return p.string();
    }
    return "";
}

Status load_ort(const std::string& path, OrtLib* lib) {
    lib->path = path;
    lib->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle) return invalid("cannot load ", path, ": ", dlerror());
    auto get_base = reinterpret_cast<ort::GetApiBaseFn>(dlsym(lib->handle, "OrtGetApiBase"));
    if (!get_base) return invalid(path, " does not export OrtGetApiBase");
    const ort::ApiBase* base = get_base();
    if (!base || !base->GetVersionString || !base->GetApi) return invalid(path, ": OrtGetApiBase returned no table");
    lib->version = base->GetVersionString();
    if (lib->version.rfind("1.30.", 0) != 0)
        return invalid(path, " is ONNX Runtime ", lib->version, "; this declaration was checked against 1.30");
    lib->api = base->GetApi(ort::kApiVersion);
    if (!lib->api) return invalid(path, ": GetApi(", ort::kApiVersion, ") returned null");
    // Status slots: a status made by CreateStatus must read back its code and message.
    ort::StatusPtr probe = lib->api->CreateStatus(ort::kErrInvalidArgument, "jiffy probe");
    if (!probe) return invalid("ORT CreateStatus returned null (API table misdeclared?)");
    bool ok = lib->api->GetErrorCode(probe) == ort::kErrInvalidArgument &&
              std::strcmp(lib->api->GetErrorMessage(probe), "jiffy probe") == 0;
    lib->api->ReleaseStatus(probe);
    if (!ok) return invalid("ORT status slots do not behave as declared (API table misdeclared?)");
    return {};
}

// ---------------------------------------------------------------------------------------------
// One ORT session with its inputs and outputs pre-created (OrtValues over our own buffers), so a
// timed Run does no I/O setup beyond ORT's own.

class OrtModel {
public:
    OrtModel(const OrtLib& lib, ort::Env* env, const ort::MemoryInfo* mem) : lib_(lib), env_(env), mem_(mem) {}
    OrtModel(const OrtModel&) = delete;
    OrtModel& operator=(const OrtModel&) = delete;
    ~OrtModel() {
        for (ort::Value* v : in_vals_) lib_.api->ReleaseValue(v);
        for (ort::Value* v : out_vals_) lib_.api->ReleaseValue(v);
        if (session_) lib_.api->ReleaseSession(session_);
    }

    Status open(const std::string& model_path, int threads) {
        const ort::Api* a = lib_.api;
        ort::SessionOptions* so = nullptr;
        JIFFY_RETURN_IF_ERROR(lib_.check(a->CreateSessionOptions(&so), "CreateSessionOptions"));
        Status st = lib_.check(a->SetIntraOpNumThreads(so, threads), "SetIntraOpNumThreads");
        if (st.ok()) st = lib_.check(a->SetInterOpNumThreads(so, 1), "SetInterOpNumThreads");
        if (st.ok()) st = lib_.check(a->SetSessionExecutionMode(so, ort::kSequential), "SetSessionExecutionMode");
        if (st.ok())
            st = lib_.check(a->SetSessionGraphOptimizationLevel(so, ort::kEnableAll), "SetSessionGraphOptimizationLevel");
        if (st.ok()) st = lib_.check(a->SetSessionLogSeverityLevel(so, ort::kLogError), "SetSessionLogSeverityLevel");
        // JIFFY_ORT_PROFILE=PREFIX: ORT's own per-node profile (PREFIX_<date>.json, written when the
        // session is released; scripts/ort_profile.py sums it per node). Its timers slow ORT's
        // runs: a diagnostic, not a timing.
        if (const char* prof = std::getenv("JIFFY_ORT_PROFILE"); st.ok() && prof && *prof)
            st = lib_.check(a->EnableProfiling(so, prof), "EnableProfiling");
        if (st.ok()) st = lib_.check(a->CreateSession(env_, model_path.c_str(), so, &session_), "CreateSession");
        a->ReleaseSessionOptions(so);
        return st;
    }

    // Inputs: every reference input (ORT needs the ones Jiffy froze too); outputs: the plan's.
    Status bind(const ValueMap& inputs, const std::vector<IoDesc>& outputs) {
        const ort::Api* a = lib_.api;
        size_t n_in = 0, n_out = 0;
        JIFFY_RETURN_IF_ERROR(lib_.check(a->SessionGetInputCount(session_, &n_in), "SessionGetInputCount"));
        JIFFY_RETURN_IF_ERROR(lib_.check(a->SessionGetOutputCount(session_, &n_out), "SessionGetOutputCount"));
        if (n_in != inputs.size() || n_out != outputs.size())
            return invalid("ORT session has ", n_in, " inputs and ", n_out, " outputs, the case has ", inputs.size(),
                           " and ", outputs.size());
        for (const auto& [name, t] : inputs) {
            in_names_.push_back(name);
            in_bufs_.emplace_back(t->dtype(), t->shape());
            std::memcpy(in_bufs_.back().data(), t->data(), t->nbytes());
        }
        for (const IoDesc& d : outputs) {
            out_names_.push_back(d.name);
            out_bufs_.emplace_back(d.dtype, d.shape);
        }
        for (Tensor& t : in_bufs_) {
            ort::Value* v = nullptr;
            JIFFY_RETURN_IF_ERROR(wrap(&t, &v));
            in_vals_.push_back(v);
        }
        for (Tensor& t : out_bufs_) {
            ort::Value* v = nullptr;
            JIFFY_RETURN_IF_ERROR(wrap(&t, &v));
            out_vals_.push_back(v);
        }
        for (const std::string& n : in_names_) in_cnames_.push_back(n.c_str());
        for (const std::string& n : out_names_) out_cnames_.push_back(n.c_str());
        return {};
    }

    // The timed call: Run with the pre-created values (no allocation of ours).
    ort::StatusPtr run_raw() {
        return lib_.api->Run(session_, nullptr, in_cnames_.data(), in_vals_.data(), in_vals_.size(),
                             out_cnames_.data(), out_vals_.size(), out_vals_.data());
    }
    Status run() { return lib_.check(run_raw(), "Run"); }

    const Tensor& output(size_t i) const { return out_bufs_[i]; }
    // Whether output i's OrtValue still points at our buffer (ORT wrote into it, not elsewhere).
    bool output_in_place(size_t i) const {
        void* p = nullptr;
        ort::StatusPtr s = lib_.api->GetTensorMutableData(out_vals_[i], &p);
        if (s) lib_.api->ReleaseStatus(s);
        return !s && p == out_bufs_[i].data();
    }

private:
    Status wrap(Tensor* t, ort::Value** v) {
        const ort::Api* a = lib_.api;
        JIFFY_RETURN_IF_ERROR(lib_.check(a->CreateTensorWithDataAsOrtValue(mem_, t->data(), t->nbytes(),
                                                                           t->shape().data(), t->shape().size(),
                                                                           int(t->dtype()), v),
                                         "CreateTensorWithDataAsOrtValue"));
        int is_tensor = 0;
        void* p = nullptr;
        JIFFY_RETURN_IF_ERROR(lib_.check(a->IsTensor(*v, &is_tensor), "IsTensor"));
        JIFFY_RETURN_IF_ERROR(lib_.check(a->GetTensorMutableData(*v, &p), "GetTensorMutableData"));
        if (!is_tensor || p != t->data()) return invalid("ORT value does not wrap our buffer (API table misdeclared?)");
        return {};
    }

    const OrtLib& lib_;
    ort::Env* env_;
    const ort::MemoryInfo* mem_;
    ort::Session* session_ = nullptr;
    std::vector<std::string> in_names_, out_names_;
    std::vector<const char*> in_cnames_, out_cnames_;
    std::vector<Tensor> in_bufs_, out_bufs_;
    std::vector<ort::Value*> in_vals_, out_vals_;
};

// Every slot we call, on the 1-node model: relu of the reference input, exactly.
Status self_check(const OrtLib& lib, ort::Env* env, const ort::MemoryInfo* mem) {
    int id = -1;
    JIFFY_RETURN_IF_ERROR(lib.check(lib.api->MemoryInfoGetId(mem, &id), "MemoryInfoGetId"));
    if (id != 0) return invalid("ORT CPU memory info has id ", id, ", not 0 (API table misdeclared?)");
    testing::RefCase rc;
    JIFFY_RETURN_IF_ERROR(testing::load_ref_inputs("one_node_relu", &rc));
    if (rc.inputs.size() != 1) return invalid("one_node_relu: expected 1 input");
    const Tensor& x = *rc.inputs.begin()->second;
    OrtModel m(lib, env, mem);
    JIFFY_RETURN_IF_ERROR(m.open(rc.model_path, 1));
    auto want = testing::read_pairs(rc.ref_dir + "/outputs.txt");
    if (want.size() != 1) return invalid("one_node_relu: expected 1 reference output");
    JIFFY_RETURN_IF_ERROR(m.bind(rc.inputs, {IoDesc{want[0].first, x.dtype(), x.shape(), x.nbytes()}}));
    JIFFY_RETURN_IF_ERROR(m.run());
    if (!m.output_in_place(0)) return invalid("ORT did not write the pre-created output (API table misdeclared?)");
    const float* in = x.as<float>();
    const float* out = m.output(0).as<float>();
    for (int64_t i = 0; i < x.numel(); ++i)
        if (out[i] != std::max(in[i], 0.0f)) return invalid("ORT relu self-check: element ", i, " is ", out[i]);
    return {};
}

// ---------------------------------------------------------------------------------------------
// Targets (issue 3) and the per-model measurement.

struct Target {
    std::string cls = "other";
    double ratio = 1.0, abs_us = 0;
};

std::map<std::string, Target> targets() {
    std::map<std::string, Target> r;
    std::ifstream f(source_dir() + "/bench/peers/targets.tsv");
    std::string line;
    while (std::getline(f, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> col;
        std::istringstream is(line);
        for (std::string c; std::getline(is, c, '\t');) col.push_back(c);
        if (col.size() < 3) continue;
        r[col[0]] = Target{col[1], std::atof(col[2].c_str()), col.size() > 3 ? std::atof(col[3].c_str()) : 0};
    }
    return r;
}

struct Row {
    std::string name, status = "ok", error;
    int64_t flops = 0;
    uint64_t wbytes = 0;  // the plan's constants (weights)
    double rel_err = 0;
    double j50 = 0, j99 = 0, o50 = 0, o99 = 0, peer_p50 = 0;
    double s50 = 0, s99 = 0;  // the spin control's (models under 100 us; 0: not run)
    double floor = 0;  // one-core floor, us (machine_probe.h)
    int64_t j_runs = 0, o_runs = 0;
    Target target;
    double ratio() const { return o50 > 0 ? j50 / o50 : 0; }
    bool met() const {
        return status == "ok" && ratio() <= target.ratio && (target.abs_us <= 0 || j50 <= target.abs_us);
    }
};

struct Config {
    double seconds = 0.5;
    int rounds = 5, threads = 1;
    bool control = true;  // --no-control: no spin control
};

// A chain of dependent scalar multiply-adds (registers only) calibrated to last about as long as
// a model's run: timed like a model, its p99 / p50 is what the host's preemptions alone give a
// run of that length here (docs/benchmarks.md, "The spin control").
struct SpinControl {
    int64_t iters = 1000;
    volatile float sink = 0;
    void run() {
        float x = 1.0f;
        for (int64_t i = 0; i < iters; ++i) x = x * 1.0000001f + 1e-9f;
        sink = x;
    }
    void calibrate(double us) {
        for (int k = 0; k < 30; ++k) {
            const auto t0 = std::chrono::steady_clock::now();
            run();
            const double d = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
            iters = std::max<int64_t>(1, int64_t(double(iters) * us / std::max(d, 0.01)));
        }
    }
};

Row measure(const std::string& name, const OrtLib& lib, ort::Env* env, const ort::MemoryInfo* mem,
            const Config& cfg) {
    Row row;
    row.name = name;
    JiffyCase jc;
    Status st = jc.prepare(name, cfg.threads);
    if (!st.ok()) {
        row.status = "error";
        row.error = "Jiffy: " + st.message();
        return row;
    }
    row.flops = jc.plan->flops();
    row.wbytes = jc.plan->constant_bytes;
    OrtModel om(lib, env, mem);
    st = om.open(jc.rc.model_path, cfg.threads);
    if (st.ok()) st = om.bind(jc.rc.inputs, jc.plan->outputs);
    if (st.ok()) st = om.run();
    if (!st.ok()) {
        row.status = "error";
        row.error = st.message();
        return row;
    }
    for (size_t i = 0; i < jc.plan->outputs.size(); ++i) {
        double e = rel_error(om.output(i), jc.output(i));
        if (e < 0 || !om.output_in_place(i)) {
            row.status = "mismatch";
            row.error = "output " + jc.plan->outputs[i].name + ": shape or buffer differs";
            return row;
        }
        row.rel_err = std::max(row.rel_err, e);
    }
    if (row.rel_err > kTolerance) row.status = "mismatch";

    auto run_jiffy = [&] { (void)jc.session->run(); };
    auto run_ort = [&] {
        ort::StatusPtr s = om.run_raw();
        if (s) lib.api->ReleaseStatus(s);
    };
    // Warm-up: 20 runs each (PEERS.md), cut short for models slower than a phase.
    std::vector<double> warm;
    time_runs(run_jiffy, 0, 2, &warm);
    time_runs(run_ort, 0, 2, &warm);
    for (int i = 0; i < 18 && double(i) * (warm[1] + warm[3]) < cfg.seconds * 1e6; ++i) {
        run_jiffy();
        run_ort();
    }
    std::vector<double> j50, j99, o50, o99, s50, s99;
    SpinControl spin;
    for (int r = 0; r < cfg.rounds; ++r) {
        std::vector<double> ju, ou;
        if (r % 2 == 0) {
            time_runs(run_jiffy, cfg.seconds, 3, &ju);
            time_runs(run_ort, cfg.seconds, 3, &ou);
        } else {
            time_runs(run_ort, cfg.seconds, 3, &ou);
            time_runs(run_jiffy, cfg.seconds, 3, &ju);
        }
        Percentiles pj = percentiles(ju), po = percentiles(ou);
        j50.push_back(pj.p50);
        j99.push_back(pj.p99);
        o50.push_back(po.p50);
        o99.push_back(po.p99);
        row.j_runs += pj.n;
        row.o_runs += po.n;
        // The host's share of a short model's p99: a register-only loop as long as Jiffy's p50,
        // timed the same way right after (no memory, no engine: its tail is preemption alone).
        if (cfg.control && pj.p50 < 100) {
            if (r == 0) spin.calibrate(pj.p50);
            std::vector<double> su;
            time_runs([&] { spin.run(); }, cfg.seconds, 3, &su);
            const Percentiles ps = percentiles(su);
            s50.push_back(ps.p50);
            s99.push_back(ps.p99);
        }
    }
    row.j50 = median(j50);
    row.j99 = median(j99);
    row.o50 = median(o50);
    row.o99 = median(o99);
    row.s50 = median(s50);
    row.s99 = median(s99);
    return row;
}

void print_usage() {
    std::fprintf(stderr,
                 "usage: jiffy_vs_ort [--ort-lib PATH] [--filter NAME] [--model NAME]... [--seconds T] [--rounds R] "
                 "[--threads 1|2] [--json FILE] [--no-control]\n"
                 "  --model NAME: measure .cache/models/NAME.onnx on the inputs in .cache/refs/NAME/inputs.txt\n"
                 "                instead of the model list (e.g. a cut of a model, to compare a few layers)\n"
                 "  --no-control: no spin control (models under 100 us: a register-only loop as long as Jiffy's\n"
                 "                p50, timed after each round; its p99 is the host's alone)\n");
}

std::string json_str(const std::string& s) {
    std::string r = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') r += '\\';
        if (static_cast<unsigned char>(c) < 0x20) c = ' ';
        r += c;
    }
    return r + "\"";
}

}  // namespace

int main(int argc, char** argv) {
    Config cfg;
    std::string lib_path, filter, json_path;
    std::vector<std::string> only;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        bool has_val = i + 1 < argc;
        if (a == "--ort-lib" && has_val) lib_path = argv[++i];
        else if (a == "--filter" && has_val) filter = argv[++i];
        else if (a == "--model" && has_val) only.push_back(argv[++i]);
        else if (a == "--seconds" && has_val) cfg.seconds = std::atof(argv[++i]);
        else if (a == "--rounds" && has_val) cfg.rounds = std::atoi(argv[++i]);
        else if (a == "--threads" && has_val) cfg.threads = std::atoi(argv[++i]);
        else if (a == "--json" && has_val) json_path = argv[++i];
        else if (a == "--no-control") cfg.control = false;
        else {
            std::fprintf(stderr, "jiffy_vs_ort: unknown or incomplete argument '%s'\n", a.c_str());
            print_usage();
            return 2;
        }
    }
    if (cfg.seconds <= 0 || cfg.rounds < 1 || cfg.threads < 1 || cfg.threads > 64) {
        std::fprintf(stderr, "jiffy_vs_ort: --seconds must be > 0, --rounds >= 1, --threads 1..64\n");
        return 2;
    }
    if (lib_path.empty()) lib_path = find_ort_lib();
    if (lib_path.empty()) {
        std::fprintf(stderr, "jiffy_vs_ort: no ONNX Runtime library under %s/.cache/ort (run scripts/setup.sh) "
                             "and no --ort-lib given: skipped\n", source_dir().c_str());
        return 77;
    }
    OrtLib lib;
    Status st = load_ort(lib_path, &lib);
    ort::Env* env = nullptr;
    ort::MemoryInfo* mem = nullptr;
    if (st.ok()) st = lib.check(lib.api->CreateEnv(ort::kLogError, "jiffy_vs_ort", &env), "CreateEnv");
    if (st.ok())
        st = lib.check(lib.api->CreateCpuMemoryInfo(ort::kDeviceAllocator, ort::kMemTypeDefault, &mem),
                       "CreateCpuMemoryInfo");
    if (st.ok()) st = self_check(lib, env, mem);
    if (!st.ok()) {
        std::fprintf(stderr, "jiffy_vs_ort: %s\n", st.message().c_str());
        return 2;
    }

    auto peers = peer_figures();
    auto tgt = targets();
    std::vector<Row> rows;
    const double peak = fma_peak_gflops(300);
    std::printf("CPU: %s\n", cpu_description().c_str());
    std::printf("FP32 FMA peak of this core now: %.1f GFLOP/s (AVX-512; the %% peak column's base)\n\n", peak);
    std::printf("| model | class | max err / magnitude | Jiffy p50 us | Jiffy p99 us | spin p99 us | Jiffy GFLOP/s | "
                "%% peak | floor us | Jiffy / floor | ORT p50 us | ORT p99 us | ORT / floor | ratio | target | met | "
                "ratio to PEERS.md p50 |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    int bad = 0;
    for (const std::string& name : only.empty() ? model_names() : only) {
        if (!filter.empty() && name.find(filter) == std::string::npos) continue;
        Row r = measure(name, lib, env, mem, cfg);
        auto t = tgt.find(name);
        if (t != tgt.end()) r.target = t->second;
        auto p = peers.find(name);
        double peer = p == peers.end() ? 0 : (cfg.threads == 2 ? p->second.p50_2t : p->second.p50);
        r.peer_p50 = peer;
        if (r.status != "ok") {
            ++bad;
            std::printf("| %s | %s | %.2g | %s | | | | | | | | | | | | | |\n", r.name.c_str(), r.target.cls.c_str(), r.rel_err,
                        (r.status + ": " + r.error).c_str());
        } else {
            char target[48], vs_peer[48] = "-";
            std::snprintf(target, sizeof target, r.target.abs_us > 0 ? "<= %.2f and <= %.1f us" : "<= %.2f",
                          r.target.ratio, r.target.abs_us);
            if (peer > 0) std::snprintf(vs_peer, sizeof vs_peer, "%.2f", r.j50 / peer);
            const double gflops = r.j50 > 0 ? double(r.flops) / r.j50 / 1e3 : 0;
            char pct[32] = "-", fl[32] = "-", jf[32] = "-", of[32] = "-";
            if (peak > 0) std::snprintf(pct, sizeof pct, "%.0f", 100.0 * gflops / peak);
            r.floor = floor_us(r.flops, r.wbytes, peak, 100);
            if (r.floor > 0) {
                std::snprintf(fl, sizeof fl, "%s", fmt_us(r.floor).c_str());
                std::snprintf(jf, sizeof jf, "%.2f", r.j50 / r.floor);
                std::snprintf(of, sizeof of, "%.2f", r.o50 / r.floor);
            }
            const std::string sp = r.s99 > 0 ? fmt_us(r.s99) : "-";
            std::printf("| %s | %s | %.2g | %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %.2f | %s | %s | %s |\n",
                        r.name.c_str(), r.target.cls.c_str(), r.rel_err, fmt_us(r.j50).c_str(), fmt_us(r.j99).c_str(),
                        sp.c_str(), gflops, pct, fl, jf, fmt_us(r.o50).c_str(), fmt_us(r.o99).c_str(), of, r.ratio(), target,
                        r.met() ? "yes" : "no", vs_peer);
        }
        std::fflush(stdout);
        rows.push_back(r);
    }
    if (rows.empty()) {
        std::fprintf(stderr, "jiffy_vs_ort: no model matches --filter '%s'\n", filter.c_str());
        return 1;
    }
    int met = 0;
    for (const Row& r : rows) met += r.met();
    const HostGaps gaps = host_gaps(1000);
    std::printf("\n%zu models, %d not matching ONNX Runtime, %d of %zu targets met. ONNX Runtime %s (%s), "
                "%d intra-op thread(s), ORT_ENABLE_ALL, sequential; Jiffy ISA %s. Medians over %d rounds of "
                "%.2f s per engine, alternating which engine goes first.\n",
                rows.size(), bad, met, rows.size(), lib.version.c_str(), lib.path.c_str(), cfg.threads,
                kernels::isa_name(kernels::active_isa()), cfg.rounds, cfg.seconds);
    std::printf("Host: this core was taken away %.0f times a second for %.1f us on average (max %.0f us; "
                "gaps > 5 us in a 1 s clock loop after the runs). A model of t us meets one in about "
                "t x %.0f / 1e6 of its runs: from ~%.0f us up its p99 is p50 plus a gap, more than 1.5 x p50 "
                "up to ~%.0f us.\n",
                gaps.per_second, gaps.mean_us, gaps.max_us, gaps.per_second,
                gaps.per_second > 0 ? 1e4 / gaps.per_second : 0.0, 2 * gaps.mean_us);
    if (gaps.short_per_second > 0)
        std::printf("Also %.0f short gaps a second (1.5-5 us, %.1f us on average): from ~%.1f us up a model's p99 is at "
                    "least p50 + %.1f us (more than 1.5 x p50 up to ~%.0f us).\n",
                    gaps.short_per_second, gaps.short_mean_us, 1e4 / gaps.short_per_second, gaps.short_mean_us,
                    2 * gaps.short_mean_us);
    if (!json_path.empty()) {
        std::ofstream f(json_path);
        f << "{\"ort_version\": " << json_str(lib.version) << ", \"fma_peak_gflops\": " << peak
          << ", \"host_gaps_per_s\": " << gaps.per_second << ", \"host_gap_mean_us\": " << gaps.mean_us
          << ", \"host_short_gaps_per_s\": " << gaps.short_per_second
          << ", \"host_short_gap_mean_us\": " << gaps.short_mean_us
          << ", \"threads\": " << cfg.threads
          << ", \"rounds\": " << cfg.rounds << ", \"seconds\": " << cfg.seconds << ", \"models\": [";
        for (size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            f << (i ? ",\n " : "\n ") << "{\"model\": " << json_str(r.name) << ", \"status\": " << json_str(r.status)
              << ", \"error\": " << json_str(r.error) << ", \"class\": " << json_str(r.target.cls)
              << ", \"flops\": " << r.flops << ", \"rel_err\": " << r.rel_err << ", \"jiffy_p50_us\": " << r.j50
              << ", \"jiffy_p99_us\": " << r.j99 << ", \"ort_p50_us\": " << r.o50 << ", \"ort_p99_us\": " << r.o99
              << ", \"jiffy_runs\": " << r.j_runs << ", \"ort_runs\": " << r.o_runs << ", \"ratio\": " << r.ratio()
              << ", \"target_ratio\": " << r.target.ratio << ", \"target_abs_us\": " << r.target.abs_us
              << ", \"met\": " << (r.met() ? "true" : "false") << ", \"peers_md_p50_us\": " << r.peer_p50
              << ", \"weight_bytes\": " << r.wbytes << ", \"floor_us\": " << r.floor
              << ", \"spin_p50_us\": " << r.s50 << ", \"spin_p99_us\": " << r.s99 << "}";
        }
        f << "]}\n";
        if (!f) {
            std::fprintf(stderr, "jiffy_vs_ort: cannot write %s\n", json_path.c_str());
            return 2;
        }
    }
    lib.api->ReleaseMemoryInfo(mem);
    lib.api->ReleaseEnv(env);
    return bad ? 1 : 0;
}

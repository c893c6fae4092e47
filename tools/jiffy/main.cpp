// The jiffy CLI: run / bench / inspect. Exit codes: 0 ok, 2 bad model or bad input (one stderr
// line naming the file/node/tensor), 1 internal error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include "core/npy.h"
#include "runtime/model.h"
#ifdef JIFFY_WITH_SERVE
#include "serve/loadtest.h"
#include "serve/serve.h"
#endif
#ifdef JIFFY_WITH_AGENT
#include "agent/main.h"
#endif

using namespace jiffy;

namespace {

const char* kUsage =
    "usage:\n"
    "  jiffy run MODEL [--input NAME=FILE.npy]... [--shape NAME=DxDx..]... [--output-dir DIR] [--threads N]\n"
    "  jiffy bench MODEL [--input ...] [--shape ...] [--threads N] [--warmup N] [--iters N | --seconds S] [--json] [--profile]\n"
    "  jiffy inspect MODEL [--shape ...] [--json] [--steps]\n"
    "  jiffy ops                      list supported ops\n"
    "  jiffy serve --model-repository DIR [--host H] [--http-port N] ...  KServe v2 REST server (serve --help)\n"
    "  jiffy agent CONFIG.yaml [--metrics-port N] [--fast] [--duration S]  run agents (agent --help)\n"
    "  jiffy loadtest --url http://H:P --model M (--rps R,.. | --step A:B:xF) --duration S ...  open-loop load (loadtest --help)\n"
    "common: --max-memory BYTES (default 4 GiB)\n";

struct Args {
    std::string cmd, model, output_dir;
    std::vector<std::pair<std::string, std::string>> inputs;  // name, file
    std::map<std::string, Shape> shapes;
    int threads = 1, warmup = 20;
    int64_t iters = -1;
    double seconds = 2.0;
    bool json = false;
    bool profile = false;  // bench: per-step time table
    bool steps = false;    // inspect: one line per plan step with the kernel chosen
    uint64_t max_bytes = uint64_t(4) << 30;
};

struct CliError {
    int code;
    std::string msg;
};

[[noreturn]] void bad(const std::string& m) { throw CliError{2, m}; }

int64_t parse_int(const std::string& s, const std::string& what) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end || errno) bad("bad number for " + what + ": '" + s + "'");
    return v;
}

// "NAME=VALUE" split at the last '=' (names may contain '=' rarely, ':' and '.' often).
std::pair<std::string, std::string> split_last_eq(const std::string& s, const std::string& flag) {
    size_t p = s.rfind('=');
    if (p == std::string::npos || p == 0) bad(flag + " expects NAME=VALUE, got '" + s + "'");
    return {s.substr(0, p), s.substr(p + 1)};
}

Shape parse_shape(const std::string& s) {
    Shape sh;
    if (s.empty() || s == "scalar") return sh;
    size_t p = 0;
    while (true) {
        size_t q = s.find_first_of("x,", p);
        int64_t d = parse_int(s.substr(p, q == std::string::npos ? std::string::npos : q - p), "shape");
        if (d < 0) bad("negative dim in shape '" + s + "'");
        sh.push_back(d);
        if (q == std::string::npos) break;
        p = q + 1;
    }
    return sh;
}

Args parse(int argc, char** argv) {
    Args a;
    if (argc < 2) bad("missing command (see jiffy --help)");
    a.cmd = argv[1];
    for (int i = 2; i < argc; ++i) {
        std::string s = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) bad("missing value after " + s);
            return argv[++i];
        };
        if (s == "--input") a.inputs.push_back(split_last_eq(next(), s));
        else if (s == "--shape") {
            auto [n, v] = split_last_eq(next(), s);
            a.shapes[n] = parse_shape(v);
        } else if (s == "--output-dir") a.output_dir = next();
        else if (s == "--threads") a.threads = int(parse_int(next(), s));
        else if (s == "--warmup") a.warmup = int(parse_int(next(), s));
        else if (s == "--iters") a.iters = parse_int(next(), s);
        else if (s == "--seconds") a.seconds = std::atof(next().c_str());
        else if (s == "--json") a.json = true;
        else if (s == "--profile") a.profile = true;
        else if (s == "--steps") a.steps = true;
        else if (s == "--max-memory") a.max_bytes = uint64_t(parse_int(next(), s));
        else if (s == "-h" || s == "--help") throw CliError{0, kUsage};
        else if (!s.empty() && s[0] == '-') bad("unknown option '" + s + "' (see jiffy --help)");
        else if (a.model.empty()) a.model = s;
        else bad("unexpected argument '" + s + "'");
    }
    if (a.threads < 1 || a.threads > 256) bad("--threads must be in 1..256");
    if (a.warmup < 0) bad("--warmup must be >= 0");
    return a;
}

std::string sanitize(const std::string& n) {
    std::string r = n;
    for (char& c : r)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
    return r;
}

// The fast-weights probe's movement for JSON: null where no probe ran (-1) or it was not finite.
std::string probe_json(double e) {
    if (!(e >= 0) || !std::isfinite(e)) return "null";
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", e);
    return b;
}

std::string json_str(const std::string& s) {
    std::string r = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') r += '\\', r += c;
        else if (static_cast<unsigned char>(c) < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            r += b;
        } else r += c;
    }
    return r + "\"";
}

std::string json_shape(const Shape& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
}

// Deterministic pseudo-random fill: uniform [-1, 1) for floats, [0, 10) for integers.
void fill_random(Tensor& t, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int64_t i = 0; i < t.numel(); ++i) {
        double v = u(rng);
        void* p = t.data();
        switch (t.dtype()) {
            case DType::kF32: static_cast<float*>(p)[i] = float(v); break;
            case DType::kF64: static_cast<double*>(p)[i] = v; break;
            case DType::kF16: static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v)); break;
            case DType::kBF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v)); break;
            case DType::kBool: static_cast<uint8_t*>(p)[i] = v > 0; break;
            default: {
                int64_t iv = int64_t((v + 1) * 5);
                std::memcpy(static_cast<uint8_t*>(p) + size_t(i) * dtype_size(t.dtype()), &iv,
                            dtype_size(t.dtype()));  // little-endian truncation
            }
        }
    }
}

struct Loaded {
    std::shared_ptr<Model> model;
    std::shared_ptr<const Plan> plan;
    ValueMap values;  // inputs by name (given or generated)
};

void check(const Status& st) {
    if (!st.ok()) throw CliError{st.code() == Code::kInternal ? 1 : 2, st.message()};
}

Loaded load_and_compile(const Args& a) {
    if (a.model.empty()) bad("missing MODEL (see jiffy --help)");
    Loaded L;
    ImportOptions io;
    io.max_bytes = a.max_bytes;
    check(Model::load(a.model, io, &L.model));
    const Graph& g = L.model->graph();
    CompileOptions opt;
    opt.threads = a.threads;
    opt.max_bytes = a.max_bytes;
    opt.input_shapes = a.shapes;
    std::set<std::string> input_names;
    for (int v : g.inputs) input_names.insert(g.values[size_t(v)].name);
    for (const auto& [name, file] : a.inputs) {
        if (!input_names.count(name)) bad("--input '" + name + "': the model has no input of that name");
        Tensor t;
        check(read_npy(file, &t, a.max_bytes));
        const Value& v = g.values[size_t(g.find(name))];
        if (v.dtype != t.dtype())
            bad("input '" + name + "' (" + file + "): dtype " + dtype_name(t.dtype()) + " but the model expects " +
                dtype_name(v.dtype));
        auto it = opt.input_shapes.find(name);
        if (it != opt.input_shapes.end() && it->second != t.shape())
            bad("input '" + name + "': --shape " + shape_str(it->second) + " but " + file + " has shape " +
                shape_str(t.shape()));
        opt.input_shapes[name] = t.shape();
        L.values[name] = std::make_shared<Tensor>(std::move(t));
    }
    // Compile once to learn the shapes of inputs not given; fill those with pseudo-random data.
    check(L.model->compile(opt, L.values, &L.plan));
    for (size_t i = 0; i < L.plan->inputs.size(); ++i) {
        const IoDesc& d = L.plan->inputs[i];
        if (L.values.count(d.name)) continue;
        auto t = std::make_shared<Tensor>(d.dtype, d.shape);
        fill_random(*t, 0x9E3779B97F4A7C15ull * (i + 1));
        L.values[d.name] = t;
    }
    return L;
}

void bind_inputs(const Loaded& L, Session& s) {
    for (size_t i = 0; i < L.plan->inputs.size(); ++i) {
        const IoDesc& d = L.plan->inputs[i];
        const Tensor& t = *L.values.at(d.name);
        std::memcpy(s.input_data(i), t.data(), d.nbytes);
    }
}

int cmd_run(const Args& a) {
    Loaded L = load_and_compile(a);
    Session s(L.plan);
    bind_inputs(L, s);
    check(s.run());
    if (!a.output_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(a.output_dir, ec);
        if (ec) bad("--output-dir '" + a.output_dir + "': " + ec.message());
    }
    for (size_t i = 0; i < L.plan->outputs.size(); ++i) {
        const IoDesc& d = L.plan->outputs[i];
        std::printf("%s %s %s\n", d.name.c_str(), dtype_name(d.dtype), json_shape(d.shape).c_str());
        if (!a.output_dir.empty())
            check(write_npy(a.output_dir + "/" + sanitize(d.name) + ".npy", d.dtype, d.shape, s.output_data(i)));
    }
    return 0;
}

std::string shape_str(const Shape& s) {
    std::string r;
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
    return r;
}

// `jiffy bench --profile` or JIFFY_PROFILE=N (N > 0: rows shown, 1 means 25): times every step over `runs` more runs (outside
// the timed loop above, through Session::run_profiled) and prints the steps by time: each step's median over the runs (robust
// to the preemptions of a shared machine), with the kernel chosen for it at compile time.
void print_profile(Session& s, int64_t runs, int rows) {
    const Plan& p = s.plan();
    const size_t n_steps = p.steps.size();
    std::vector<double> all(n_steps * size_t(runs), 0.0);  // [run][step]
    for (int64_t r = 0; r < runs; ++r) check(s.run_profiled(all.data() + size_t(r) * n_steps));
    std::vector<double> ns(n_steps, 0.0);
    std::vector<double> col(static_cast<size_t>(runs));
    for (size_t i = 0; i < n_steps; ++i) {
        for (int64_t r = 0; r < runs; ++r) col[size_t(r)] = all[size_t(r) * n_steps + i];
        std::nth_element(col.begin(), col.begin() + runs / 2, col.end());
        ns[i] = col[size_t(runs / 2)] * double(runs);  // as a total over the runs
    }
    double total = 0;
    for (double v : ns) total += v;
    std::vector<size_t> order(ns.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return ns[x] > ns[y]; });
    // Per op type, too.
    std::map<std::string, std::pair<double, int64_t>> by_op;  // ns, flops
    for (size_t i = 0; i < ns.size(); ++i) {
        const StepInfo& si = p.step_info[i];
        by_op[si.op].first += ns[i];
        by_op[si.op].second += step_flops(si);
    }
    std::printf("profile: %lld runs, %.1f us per run in steps (sum of per-step medians)\n", (long long)runs,
                total / double(runs) / 1e3);
    std::printf("  %-16s %10s %6s %9s\n", "op", "us/run", "%", "GFLOP/s");
    std::vector<std::pair<double, std::string>> ops;
    for (const auto& [op, v] : by_op) ops.push_back({v.first, op});
    std::sort(ops.rbegin(), ops.rend());
    for (const auto& [t, op] : ops) {
        const int64_t f = by_op[op].second;
        std::printf("  %-16s %10.1f %6.1f %9.1f\n", op.c_str(), t / double(runs) / 1e3, 100.0 * t / total,
                    f ? double(f) * double(runs) / t : 0.0);
    }
    std::printf("  %-4s %-16s %-28s %-20s %10s %6s %9s  %s\n", "step", "op", "name", "output", "us/run", "%", "GFLOP/s",
                "kernel");
    for (size_t r = 0; r < order.size() && r < size_t(rows); ++r) {
        const size_t i = order[r];
        const StepInfo& si = p.step_info[i];
        const int64_t f = step_flops(si);
        std::string nm = si.name.size() > 28 ? si.name.substr(si.name.size() - 28) : si.name;
        std::printf("  %-4zu %-16s %-28s %-20s %10.1f %6.1f %9.1f  %s\n", i, si.op.c_str(), nm.c_str(),
                    si.out_shapes.empty() ? "" : shape_str(si.out_shapes[0]).c_str(), ns[i] / double(runs) / 1e3,
                    100.0 * ns[i] / total, f ? double(f) * double(runs) / ns[i] : 0.0,
                    p.steps[i].kernel->describe().c_str());
    }
}

int cmd_bench(const Args& a) {
    Loaded L = load_and_compile(a);
    Session s(L.plan);
    bind_inputs(L, s);
    for (int i = 0; i < a.warmup; ++i) check(s.run());
    std::vector<double> us;
    using clk = std::chrono::steady_clock;
    auto t_end = clk::now() + std::chrono::duration<double>(a.seconds);
    const auto t_first = clk::now();
    const uint64_t c_first = cycles();  // the threads choice's ticks -> us (below)
    int64_t n = 0;
    while (a.iters >= 0 ? n < a.iters : (clk::now() < t_end || n < 10)) {
        auto t0 = clk::now();
        Status st = s.run();
        auto t1 = clk::now();
        check(st);
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        ++n;
        if (n >= 50000000) break;
    }
    if (us.empty()) bad("--iters must be >= 1");
    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    auto pct = [&](double p) { return sorted[std::min(sorted.size() - 1, size_t(p * double(sorted.size() - 1) + 0.5))]; };
    double mean = 0;
    for (double v : us) mean += v;
    mean /= double(us.size());
    if (a.json) {
        std::printf("{\"model\": %s, \"threads\": %d, \"iters\": %zu, \"min_us\": %.3f, \"p50_us\": %.3f, "
                    "\"p90_us\": %.3f, \"p99_us\": %.3f, \"max_us\": %.3f, \"mean_us\": %.3f}\n",
                    json_str(a.model).c_str(), a.threads, us.size(), sorted.front(), pct(0.5), pct(0.9),
                    pct(0.99), sorted.back(), mean);
    } else {
        std::printf("%s: %zu runs, %d thread(s)\n", a.model.c_str(), us.size(), a.threads);
        std::printf("  min %.2f  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f  (us)\n", sorted.front(),
                    pct(0.5), pct(0.9), pct(0.99), sorted.back(), mean);
        if (const ThreadPool* pool = L.plan->pool.get(); pool && pool->threads() > 1) {
            // The balanced splits' shares (docs/threading.md): unequal when a core ran slower.
            std::printf("  split shares (caller first, all ops):");
            for (int i = 0; i < pool->threads(); ++i) std::printf(" %.3f", pool->balance().share(i));
            std::printf("\n");
            const Session::ThreadsChoice& c = s.threads_choice();
            const double us_all = std::chrono::duration<double, std::micro>(clk::now() - t_first).count();
            const double per_us = us_all > 0 ? double(cycles() - c_first) / us_all : 1.0;
            if (c.decided >= 0)
                std::printf("  threads: %s (last of %d probes: pool %.1f us, caller alone %.1f us per run)\n",
                            c.decided == 1 ? "the caller alone" : "the pool", c.probes, double(c.pool_med) / per_us,
                            double(c.caller_med) / per_us);
        }
    }
    const char* pe = std::getenv("JIFFY_PROFILE");
    if (a.profile || (pe && std::atoi(pe) > 0)) {
        const int rows = (pe && std::atoi(pe) > 1) ? std::atoi(pe) : 25;
        print_profile(s, std::max<int64_t>(10, int64_t(us.size())), rows);
    }
    return 0;
}

void collect_ops(const Graph& g, std::map<std::string, int>* hist, std::set<std::string>* unsupported) {
    for (const Node& n : g.nodes) {
        std::string key = n.domain.empty() ? n.op : n.domain + "." + n.op;
        (*hist)[key]++;
        if (!find_op(n.domain, n.op) && n.op != "If") unsupported->insert(key);
        for (const auto& [name, at] : n.attrs) {
            if (at.g) collect_ops(*at.g, hist, unsupported);
            for (const auto& sg : at.graphs) collect_ops(*sg, hist, unsupported);
        }
    }
}

std::string dims_str(const Value& v) {
    if (!v.has_shape) return "?";
    std::string r = "[";
    for (size_t i = 0; i < v.dims.size(); ++i) {
        r += i ? "," : "";
        r += v.dims[i].value >= 0 ? std::to_string(v.dims[i].value)
                                  : (v.dims[i].param.empty() ? "?" : v.dims[i].param);
    }
    return r + "]";
}

int cmd_inspect(const Args& a) {
    if (a.model.empty()) bad("missing MODEL (see jiffy --help)");
    ImportOptions io;
    io.max_bytes = a.max_bytes;
    std::shared_ptr<Model> m;
    check(Model::load(a.model, io, &m));
    const Graph& g = m->graph();
    std::map<std::string, int> hist;
    std::set<std::string> unsup;
    collect_ops(g, &hist, &unsup);
    int64_t params = 0;
    for (const Value& v : g.values)
        if (v.constant) params += v.constant->numel();
    CompileOptions opt;
    opt.input_shapes = a.shapes;
    opt.max_bytes = a.max_bytes;
    std::shared_ptr<const Plan> plan;
    Status st = m->compile(opt, {}, &plan);
    std::string plan_err = st.ok() ? "" : st.message();
    if (a.json) {
        std::string r = "{\"model\": " + json_str(a.model) + ", \"opset\": " + std::to_string(g.opset) + ", \"inputs\": [";
        for (size_t i = 0; i < g.inputs.size(); ++i) {
            const Value& v = g.values[size_t(g.inputs[i])];
            r += (i ? ", " : "") + std::string("{\"name\": ") + json_str(v.name) + ", \"dtype\": " +
                 json_str(dtype_name(v.dtype)) + ", \"shape\": " + json_str(dims_str(v)) + "}";
        }
        r += "], \"outputs\": [";
        for (size_t i = 0; i < g.outputs.size(); ++i) {
            const Value& v = g.values[size_t(g.outputs[i])];
            r += (i ? ", " : "") + std::string("{\"name\": ") + json_str(v.name) + ", \"dtype\": " +
                 json_str(dtype_name(v.dtype)) + "}";
        }
        r += "], \"ops\": {";
        bool first = true;
        for (const auto& [k, c] : hist) {
            r += (first ? "" : ", ") + json_str(k) + ": " + std::to_string(c);
            first = false;
        }
        r += "}, \"unsupported_ops\": [";
        first = true;
        for (const auto& k : unsup) {
            r += (first ? "" : ", ") + json_str(k);
            first = false;
        }
        r += "], \"parameters\": " + std::to_string(params);
        if (plan) {
            r += ", \"flops\": " + std::to_string(plan->flops()) + ", \"arena_bytes\": " +
                 std::to_string(plan->arena_bytes) + ", \"scratch_bytes\": " +
                 std::to_string(plan->scratch ? plan->scratch->floats() * sizeof(float) : size_t(0)) +
                 ", \"steps\": " + std::to_string(plan->steps.size()) +
                 ", \"fast_weight_steps\": " + std::to_string(plan->fast_weight_steps) +
                 ", \"fast_weight_probe\": " + probe_json(plan->fast_weight_err) +
                 ", \"fast_weight_probe_steps\": " + probe_json(plan->fast_weight_step_err);
        } else {
            r += ", \"plan_error\": " + json_str(plan_err);
        }
        std::printf("%s}\n", r.c_str());
        return 0;
    }
    std::printf("model: %s (opset %lld)\ninputs:\n", a.model.c_str(), (long long)g.opset);
    for (int v : g.inputs)
        std::printf("  %s %s %s\n", g.values[size_t(v)].name.c_str(), dtype_name(g.values[size_t(v)].dtype),
                    dims_str(g.values[size_t(v)]).c_str());
    std::printf("outputs:\n");
    for (int v : g.outputs)
        std::printf("  %s %s\n", g.values[size_t(v)].name.c_str(), dtype_name(g.values[size_t(v)].dtype));
    std::printf("ops (%zu nodes incl. subgraphs):\n", g.nodes.size());
    for (const auto& [k, c] : hist) std::printf("  %-24s %d\n", k.c_str(), c);
    std::printf("unsupported ops: %s\n", unsup.empty() ? "none" : "");
    for (const auto& k : unsup) std::printf("  %s\n", k.c_str());
    std::printf("parameters: %lld\n", (long long)params);
    if (plan) {
        std::printf("plan: %zu steps, FLOPs %lld, arena %zu bytes, scratch %zu bytes, constants %llu bytes\n",
                    plan->steps.size(), (long long)plan->flops(), plan->arena_bytes,
                    plan->scratch ? plan->scratch->floats() * sizeof(float) : size_t(0),
                    (unsigned long long)plan->constant_bytes);
        if (plan->fast_weight_err >= 0)  // the probe ran (docs/amx.md "Weights to 17 bits", docs/gemv.md "24-bit weights")
            std::printf("  fast weights: %d steps (probe: outputs moved %.2g of their magnitude, limit %.0e; steps %.2g, "
                        "limit %.0e)\n",
                        plan->fast_weight_steps, plan->fast_weight_err, kFastWeightsTol, plan->fast_weight_step_err,
                        kFastWeightsStepTol);
        for (const IoDesc& d : plan->outputs)
            std::printf("  output %s %s %s\n", d.name.c_str(), dtype_name(d.dtype), shape_str(d.shape).c_str());
        if (a.steps) {
            std::printf("  %-4s %-18s %-20s %10s  %s\n", "step", "op", "output", "MFLOP", "kernel");
            for (size_t i = 0; i < plan->steps.size(); ++i) {
                const StepInfo& si = plan->step_info[i];
                std::printf("  %-4zu %-18s %-20s %10.2f  %s\n", i, si.op.c_str(),
                            si.out_shapes.empty() ? "" : shape_str(si.out_shapes[0]).c_str(),
                            double(step_flops(si)) / 1e6, plan->steps[i].kernel->describe().c_str());
            }
        }
    } else {
        std::printf("plan: not compiled: %s\n", plan_err.c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) {
#ifdef JIFFY_WITH_SERVE
        return jiffy::serve::serve_main(argc - 1, argv + 1);
#else
        std::fprintf(stderr, "jiffy: error: this build has no server (configure with -DJIFFY_SERVE=ON)\n");
        return 2;
#endif
    }
    if (argc >= 2 && std::strcmp(argv[1], "agent") == 0) {
#ifdef JIFFY_WITH_AGENT
        return jiffy::agent::agent_main(argc - 1, argv + 1);
#else
        std::fprintf(stderr, "jiffy: error: this build has no agent runtime (configure with -DJIFFY_SERVE=ON)\n");
        return 2;
#endif
    }
    if (argc >= 2 && std::strcmp(argv[1], "loadtest") == 0) {
#ifdef JIFFY_WITH_SERVE
        return jiffy::serve::loadtest_main(argc - 1, argv + 1);
#else
        std::fprintf(stderr, "jiffy: error: this build has no server tools (configure with -DJIFFY_SERVE=ON)\n");
        return 2;
#endif
    }
    try {
        Args a = parse(argc, argv);
        if (a.cmd == "run") return cmd_run(a);
        if (a.cmd == "bench") return cmd_bench(a);
        if (a.cmd == "inspect") return cmd_inspect(a);
        if (a.cmd == "ops") {
            for (const auto& n : registered_ops()) std::printf("%s\n", n.c_str());
            return 0;
        }
        if (a.cmd == "-h" || a.cmd == "--help" || a.cmd == "help") {
            std::printf("%s", kUsage);
            return 0;
        }
        bad("unknown command '" + a.cmd + "' (see jiffy --help)");
    } catch (const CliError& e) {
        if (e.code == 0) {
            std::printf("%s", e.msg.c_str());
            return 0;
        }
        std::fprintf(stderr, "jiffy: error: %s\n", e.msg.c_str());
        return e.code;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "jiffy: error: out of memory\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "jiffy: internal error: %s\n", e.what());
        return 1;
    }
}

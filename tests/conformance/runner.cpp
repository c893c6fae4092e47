// ONNX backend conformance runner. For each test folder (model.onnx + test_data_set_N/{input,output}_K.pb)
// compiles the model for the inputs' shapes, runs it and compares every output.
//   jiffy_conformance [--verbose] DIR...        prints PASS/FAIL/ERROR per test and a summary
//   jiffy_conformance --ratchet ALLOW DENY ROOT  runs every test under ROOT/{node,...}: fails when
//                                                a test in ALLOW does not pass (a regression)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/model.h"

namespace fs = std::filesystem;
using namespace jiffy;

// Allocation counter: every test's second run must not allocate (the run path is sacred).
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
static bool g_counting = false;
static long g_allocs = 0;
extern "C" void* malloc(size_t n) {
    if (g_counting) ++g_allocs;
    return __libc_malloc(n);
}
extern "C" void* calloc(size_t a, size_t b) {
    if (g_counting) ++g_allocs;
    return __libc_calloc(a, b);
}
extern "C" void* realloc(void* p, size_t n) {
    if (g_counting) ++g_allocs;
    return __libc_realloc(p, n);
}

namespace {

// Same tolerance as the ONNX backend test runner: |a - b| <= atol + rtol * |b|.
constexpr double kRtol = 1e-3, kAtol = 1e-7;

bool compare(const Tensor& got, const Tensor& want, std::string* why) {
    if (got.dtype() != want.dtype()) {
        *why = std::string("dtype ") + dtype_name(got.dtype()) + " vs expected " + dtype_name(want.dtype());
        return false;
    }
    if (got.shape() != want.shape()) {
        *why = "shape " + shape_str(got.shape()) + " vs expected " + shape_str(want.shape());
        return false;
    }
    for (int64_t i = 0; i < got.numel(); ++i) {
        double a = got.get_f64(i), b = want.get_f64(i);
        if (std::isnan(b) && std::isnan(a)) continue;
        if (std::isinf(b) && a == b) continue;
        bool ok = dtype_is_float(want.dtype()) ? std::abs(a - b) <= kAtol + kRtol * std::abs(b)
                                               : got.get_i64(i) == want.get_i64(i);
        if (!ok) {
            *why = "element " + std::to_string(i) + ": got " + std::to_string(a) + ", expected " + std::to_string(b);
            return false;
        }
    }
    return true;
}

enum Result { kPass, kFail, kError };

Result run_test(const fs::path& dir, std::string* why) {
    std::shared_ptr<Model> model;
    Status st = Model::load((dir / "model.onnx").string(), ImportOptions{}, &model);
    if (!st.ok()) {
        *why = st.message();
        return kError;
    }
    const Graph& g = model->graph();
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    if (sets.empty()) {
        *why = "no test data";
        return kError;
    }
    for (const fs::path& set : sets) {
        CompileOptions opt;
        ValueMap values;
        std::vector<std::string> in_names;
        for (size_t k = 0; k < g.inputs.size(); ++k) {
            fs::path p = set / ("input_" + std::to_string(k) + ".pb");
            if (!fs::exists(p)) break;
            Tensor t;
            std::string name;
            st = read_tensor_pb(p.string(), ImportOptions{}, &t, &name);
            if (!st.ok()) {
                *why = st.message();
                return kError;
            }
            name = g.values[size_t(g.inputs[k])].name;  // positional, as the backend runner does
            opt.input_shapes[name] = t.shape();
            values[name] = std::make_shared<Tensor>(std::move(t));
            in_names.push_back(name);
        }
        std::shared_ptr<const Plan> plan;
        st = model->compile(opt, values, &plan);
        if (!st.ok()) {
            *why = st.message();
            return kError;
        }
        Session s(plan);
        for (size_t i = 0; i < plan->inputs.size(); ++i) {
            auto it = values.find(plan->inputs[i].name);
            if (it == values.end()) {
                *why = "no data for input " + plan->inputs[i].name;
                return kError;
            }
            std::memcpy(s.input_data(i), it->second->data(), plan->inputs[i].nbytes);
        }
        st = s.run();
        if (!st.ok()) {
            *why = st.message();
            return kError;
        }
        g_allocs = 0;
        g_counting = true;
        st = s.run();  // again: same results, and no allocation
        g_counting = false;
        if (!st.ok()) {
            *why = "second run: " + st.message();
            return kError;
        }
        if (g_allocs) {
            *why = "run() allocated " + std::to_string(g_allocs) + " time(s)";
            return kFail;
        }
        for (size_t k = 0; k < plan->outputs.size(); ++k) {
            fs::path p = set / ("output_" + std::to_string(k) + ".pb");
            Tensor want;
            st = read_tensor_pb(p.string(), ImportOptions{}, &want, nullptr);
            if (!st.ok()) {
                *why = st.message();
                return kError;
            }
            const IoDesc& d = plan->outputs[k];
            Tensor got(d.dtype, d.shape);
            std::memcpy(got.data(), s.output_data(k), d.nbytes);
            std::string w;
            if (!compare(got, want, &w)) {
                *why = "output '" + d.name + "' (" + set.filename().string() + "): " + w;
                return kFail;
            }
        }
    }
    return kPass;
}

// Runs one test in a child process so that a crash or hang is reported, not fatal.
Result run_isolated(const fs::path& dir, std::string* why) {
    int fds[2];
    if (pipe(fds) != 0) return run_test(dir, why);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(120);
        std::string w;
        Result r;
        try {
            r = run_test(dir, &w);
        } catch (const std::exception& e) {
            r = kError;
            w = std::string("exception: ") + e.what();
        }
        char code = char('0' + r);
        (void)!write(fds[1], &code, 1);
        (void)!write(fds[1], w.data(), w.size());
        _exit(0);
    }
    close(fds[1]);
    std::string buf;
    char tmp[4096];
    ssize_t n;
    while ((n = read(fds[0], tmp, sizeof tmp)) > 0) buf.append(tmp, size_t(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (buf.empty()) {
        *why = WIFSIGNALED(status) ? "crashed with signal " + std::to_string(WTERMSIG(status)) : "child died";
        return kError;
    }
    *why = buf.substr(1);
    return Result(buf[0] - '0');
}

std::set<std::string> read_list(const std::string& path) {
    std::set<std::string> r;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
        size_t h = line.find('#');
        if (h != std::string::npos) line = line.substr(0, h);
        line.erase(0, line.find_first_not_of(" \t"));
        line.erase(line.find_last_not_of(" \t") + 1);
        if (!line.empty()) r.insert(line);
    }
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    bool verbose = false;
    std::vector<fs::path> dirs;
    std::string allow, deny;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--verbose") verbose = true;
        else if (a == "--ratchet" && i + 3 < argc) {
            allow = argv[++i];
            deny = argv[++i];
            fs::path root = argv[++i];
            for (const char* suite : {"node", "pytorch-converted", "pytorch-operator", "simple"})
                if (fs::exists(root / suite))
                    for (const auto& e : fs::directory_iterator(root / suite))
                        if (fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path());
        } else dirs.push_back(a);
    }
    std::sort(dirs.begin(), dirs.end());
    std::set<std::string> allowed = allow.empty() ? std::set<std::string>{} : read_list(allow);
    std::set<std::string> denied = deny.empty() ? std::set<std::string>{} : read_list(deny);
    int new_passes = 0;
    std::map<std::string, int> pass_by_suite, total_by_suite;
    int pass = 0, fail = 0, error = 0, regressions = 0;
    for (const fs::path& d : dirs) {
        std::string why;
        Result r = run_isolated(d, &why);
        std::string key = d.parent_path().filename().string() + "/" + d.filename().string();
        total_by_suite[d.parent_path().filename().string()]++;
        if (r == kPass) {
            ++pass;
            pass_by_suite[d.parent_path().filename().string()]++;
        } else if (r == kFail) ++fail;
        else ++error;
        bool regress = r != kPass && allowed.count(key);
        if (regress) ++regressions;
        if (!allow.empty() && r == kPass && !allowed.count(key)) {
            ++new_passes;
            std::printf("NEW PASS %s (add it to the allow-list)\n", key.c_str());
        }
        if (!allow.empty() && r != kPass && !allowed.count(key) && !denied.count(key))
            std::printf("UNLISTED %s: %s\n", key.c_str(), why.c_str());
        if (verbose || regress || (allow.empty() && r != kPass))
            std::printf("%s %s%s%s\n", r == kPass ? "PASS" : (r == kFail ? "FAIL" : "ERROR"), key.c_str(),
                        why.empty() ? "" : ": ", why.c_str());
        if (verbose && r == kPass) std::fflush(stdout);
    }
    for (const auto& [suite, n] : total_by_suite)
        std::printf("%-20s %d / %d pass\n", suite.c_str(), pass_by_suite[suite], n);
    std::printf("total: %d pass, %d wrong answer, %d error (unsupported or rejected)\n", pass, fail, error);
    if (!allow.empty()) {
        std::printf("ratchet: %zu tests on the allow-list, %d regressed, %d new passes\n", allowed.size(),
                    regressions, new_passes);
        return regressions ? 1 : 0;
    }
    return fail + error ? 1 : 0;
}

// Reads the ONNX Runtime references made by scripts/make_refs.sh (.cache/refs/<model>/).
#pragma once
#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/npy.h"
#include "runtime/model.h"

namespace jiffy::testing {

inline std::string source_dir() { return JIFFY_SOURCE_DIR; }

// Model names from scripts/models.tsv (the public models) and scripts/generated_models.tsv.
inline std::vector<std::string> model_names() {
    std::vector<std::string> r;
    for (const char* table : {"/scripts/models.tsv", "/scripts/generated_models.tsv"}) {
        std::ifstream f(source_dir() + table);
        std::string line;
        while (std::getline(f, line)) {
            if (line.empty() || line[0] == '#') continue;
            r.push_back(line.substr(0, line.find('\t')));
        }
    }
    return r;
}

// "NAME=FILE" lines, split at the last '='.
inline std::vector<std::pair<std::string, std::string>> read_pairs(const std::string& path) {
    std::vector<std::pair<std::string, std::string>> r;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
        size_t p = line.rfind('=');
        if (p == std::string::npos) continue;
        r.emplace_back(line.substr(0, p), line.substr(p + 1));
    }
    return r;
}

struct RefCase {
    std::string model_path, ref_dir;
    ValueMap inputs;
    CompileOptions opt;
};

inline Status load_ref_inputs(const std::string& name, RefCase* rc) {
    rc->model_path = source_dir() + "/.cache/models/" + name + ".onnx";
    rc->ref_dir = source_dir() + "/.cache/refs/" + name;
    auto pairs = read_pairs(rc->ref_dir + "/inputs.txt");
    if (pairs.empty()) return invalid("no references in ", rc->ref_dir, " (run scripts/setup.sh)");
    for (const auto& [in, file] : pairs) {
        auto t = std::make_shared<Tensor>();
        JIFFY_RETURN_IF_ERROR(read_npy(rc->ref_dir + "/" + file, t.get()));
        rc->opt.input_shapes[in] = t->shape();
        rc->inputs[in] = t;
    }
    return {};
}

// Compiles `path` for the case's inputs and runs it once; fills `outputs` by name.
inline Status run_model(const std::string& path, const RefCase& rc, std::shared_ptr<const Plan>* plan_out,
                        std::vector<std::pair<std::string, Tensor>>* outputs) {
    std::shared_ptr<Model> m;
    JIFFY_RETURN_IF_ERROR(Model::load(path, ImportOptions{}, &m));
    std::shared_ptr<const Plan> plan;
    JIFFY_RETURN_IF_ERROR(m->compile(rc.opt, rc.inputs, &plan));
    Session s(plan);
    for (size_t i = 0; i < plan->inputs.size(); ++i)
        std::memcpy(s.input_data(i), rc.inputs.at(plan->inputs[i].name)->data(), plan->inputs[i].nbytes);
    // The kernels' shared scratch (runtime/scratch.h) holds nothing from one step to the next, nor
    // from prepare or an earlier run: fill it with NaN before each of two runs, which must agree.
    auto poison = [&] {
        if (plan->scratch && plan->scratch->floats())
            std::fill_n(plan->scratch->data(), plan->scratch->floats(), std::numeric_limits<float>::quiet_NaN());
    };
    poison();
    JIFFY_RETURN_IF_ERROR(s.run());
    std::vector<std::vector<uint8_t>> first;
    for (size_t i = 0; i < plan->outputs.size(); ++i) {
        const auto* p = static_cast<const uint8_t*>(s.output_data(i));
        first.emplace_back(p, p + plan->outputs[i].nbytes);
    }
    poison();
    JIFFY_RETURN_IF_ERROR(s.run());
    for (size_t i = 0; i < plan->outputs.size(); ++i)
        if (std::memcmp(first[i].data(), s.output_data(i), first[i].size()) != 0)
            return internal_error("output ", plan->outputs[i].name, " differs between two runs");
    for (size_t i = 0; i < plan->outputs.size(); ++i) {
        const IoDesc& d = plan->outputs[i];
        Tensor t(d.dtype, d.shape);
        std::memcpy(t.data(), s.output_data(i), d.nbytes);
        outputs->emplace_back(d.name, std::move(t));
    }
    if (plan_out) *plan_out = plan;
    return {};
}

}  // namespace jiffy::testing

#include "runtime/model.h"

#include <set>

namespace jiffy {

Status Model::load(const std::string& path, const ImportOptions& opt, std::shared_ptr<Model>* out) {
    ImportedModel im;
    JIFFY_RETURN_IF_ERROR(import_onnx_file(path, opt, &im));
    auto m = std::make_shared<Model>();
    m->graph_ = im.graph;
    *out = std::move(m);
    return {};
}

static std::string signature(const CompileOptions& opt) {
    std::string s = std::to_string(opt.threads) + "|" + std::to_string(opt.max_bytes);
    for (const auto& [n, sh] : opt.input_shapes) s += "|" + n + ":" + shape_str(sh);
    for (const auto& [n, t] : opt.frozen_inputs) {
        s += "|=" + n + ":";
        s.append(static_cast<const char*>(t->data()), t->nbytes());
    }
    return s;
}

Status Model::compile(const CompileOptions& opt_in, const ValueMap& values,
                      std::shared_ptr<const Plan>* out) {
    CompileOptions opt = opt_in;
    for (const auto& [n, t] : values) opt.freezable_inputs.insert(n);
    for (int attempt = 0; attempt < 64; ++attempt) {
        std::string sig = signature(opt);
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = cache_.find(sig);
            if (it != cache_.end()) {
                *out = it->second;
                return {};
            }
        }
        std::shared_ptr<const Plan> plan;
        Status st = compile_graph(*graph_, opt, &plan);
        if (st.code() == Code::kNeedValue && !st.detail().empty()) {
            bool added = false;
            std::string names = st.detail(), missing;
            size_t p = 0;
            while (p <= names.size()) {
                size_t q = names.find(',', p);
                std::string n = names.substr(p, q == std::string::npos ? std::string::npos : q - p);
                auto it = values.find(n);
                if (it != values.end() && !opt.frozen_inputs.count(n)) {
                    opt.frozen_inputs[n] = it->second;
                    added = true;
                } else if (!opt.frozen_inputs.count(n)) {
                    missing += (missing.empty() ? "" : ", ") + n;
                }
                if (q == std::string::npos) break;
                p = q + 1;
            }
            if (!added)
                return invalid(st.message(), "; it depends on input(s) ", missing,
                               ", so give their values (--input NAME=FILE.npy)");
            continue;
        }
        JIFFY_RETURN_IF_ERROR(st);
        std::lock_guard<std::mutex> lock(mu_);
        cache_[sig] = plan;
        *out = std::move(plan);
        return {};
    }
    return internal_error("compile kept asking for input values");
}

}  // namespace jiffy

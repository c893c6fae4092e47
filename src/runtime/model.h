// Model: an imported graph plus the plan cache (plans by input-shape signature).
#pragma once
#include <map>
#include <mutex>

#include "onnx/import.h"
#include "runtime/plan.h"

namespace jiffy {

using ValueMap = std::map<std::string, std::shared_ptr<const Tensor>>;

class Model {
public:
    static Status load(const std::string& path, const ImportOptions& opt, std::shared_ptr<Model>* out);
    const Graph& graph() const { return *graph_; }

    // Compiles for opt.input_shapes. When a shape depends on the *value* of a graph input and
    // `values` holds it, that input is frozen (folded) and compile retries. Plans are cached by
    // the signature of shapes and frozen values; the cache is thread-safe.
    Status compile(const CompileOptions& opt, const ValueMap& values, std::shared_ptr<const Plan>* out);

private:
    std::shared_ptr<Graph> graph_;
    std::mutex mu_;
    std::map<std::string, std::shared_ptr<const Plan>> cache_;
};

}  // namespace jiffy

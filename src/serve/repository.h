// Model repository (Triton layout): ROOT/<model>/<version>/model.onnx and an optional
// ROOT/<model>/config.yaml. Models are loaded into memory with their plans compiled for the
// configured or declared shapes; a model with symbolic dims and no configured shape compiles per
// request shape (the engine's plan cache keeps each plan).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/model.h"
#include "serve/metrics.h"
#include "serve/sched_config.h"

namespace jiffy::serve {

class Executor;  // serve/batcher.h

struct ModelConfig {
    std::map<std::string, Shape> inputs;  // fixed input shapes
    uint64_t max_request_bytes = 0;       // 0: the server's limit
    enum Policy { kLatest, kAll, kSpecific } policy = kLatest;
    int64_t latest = 1;                   // kLatest: how many of the highest versions
    std::vector<int64_t> specific;        // kSpecific
    SchedConfig sched;                    // batching, queue, latency target
};

// Parses config.yaml. Unknown keys and wrong types are errors naming the file and line.
Status parse_model_config(const std::string& path, ModelConfig* out);

struct TensorMeta {
    std::string name;
    DType dtype = DType::kUndefined;
    Shape shape;  // -1 for a dynamic dim
};

// KServe datatype name ("FP32", "INT64", "BOOL", ...), or nullptr for a type we cannot serve.
const char* kserve_dtype(DType t);
bool dtype_from_kserve(const std::string& s, DType* out);

struct LoadedVersion {
    int64_t version = 0;
    std::string path;
    std::shared_ptr<jiffy::Model> model;
    std::vector<TensorMeta> inputs, outputs;
    std::map<std::string, Shape> shapes;   // configured input shapes
    std::shared_ptr<const Plan> fixed;     // compiled at load when every input shape is known
    VersionMetrics* metrics = nullptr;
    // One session per plan: inference runs on the single I/O thread (docs/serving.md).
    std::map<const Plan*, std::pair<std::shared_ptr<const Plan>, std::unique_ptr<Session>>> sessions;
    Session* session_for(const std::shared_ptr<const Plan>& p);
    // The version's worker and queue (serve/batcher.h), made on first use when the model's
    // config asks for one; while it exists, only its thread touches `sessions`.
    std::shared_ptr<Executor> exec;
};

struct ModelEntry {
    std::string name;
    ModelConfig config;
    std::map<int64_t, std::unique_ptr<LoadedVersion>> versions;  // loaded ones
    std::string reason;  // why the last load failed
    bool ready() const { return !versions.empty(); }
    LoadedVersion* latest() const { return versions.empty() ? nullptr : versions.rbegin()->second.get(); }
};

class Repository {
public:
    Repository(std::string root, uint64_t max_model_bytes) : root_(std::move(root)), max_bytes_(max_model_bytes) {}
    const std::string& root() const { return root_; }
    // Model folder names found on disk now (sorted).
    std::vector<std::string> scan() const;
    // (Re)loads a model from disk; on failure the model keeps its previous versions, if any.
    Status load(const std::string& name);
    Status unload(const std::string& name);
    ModelEntry* find(const std::string& name);
    const std::map<std::string, std::unique_ptr<ModelEntry>>& models() const { return models_; }
    const std::vector<std::unique_ptr<VersionMetrics>>& all_metrics() const { return metrics_; }
    static bool valid_name(const std::string& n);

private:
    VersionMetrics* metrics_for(const std::string& model, int64_t version);
    Status load_version(const std::string& name, const ModelConfig& cfg, int64_t v, const std::string& path,
                        std::unique_ptr<LoadedVersion>* out);

    std::string root_;
    uint64_t max_bytes_;
    std::map<std::string, std::unique_ptr<ModelEntry>> models_;
    std::vector<std::unique_ptr<VersionMetrics>> metrics_;  // never freed: counters survive unload
};

}  // namespace jiffy::serve

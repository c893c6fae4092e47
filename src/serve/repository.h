// Model repository (Triton layout): ROOT/<model>/<version>/model.onnx and an optional
// ROOT/<model>/config.yaml. Models are loaded into memory with their plans compiled for the
// configured or declared shapes; a model with symbolic dims and no configured shape compiles per
// request shape (the engine's plan cache keeps each plan).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/model.h"
#include "serve/metrics.h"
#include "serve/sched_config.h"

namespace jiffy::serve {
class ResponseCache;
class RedisL2;
}

namespace jiffy::serve {

class Executor;  // serve/batcher.h

struct ModelConfig {
    std::map<std::string, Shape> inputs;  // fixed input shapes
    uint64_t max_request_bytes = 0;       // 0: the server's limit
    enum Policy { kLatest, kAll, kSpecific } policy = kLatest;
    int64_t latest = 1;                   // kLatest: how many of the highest versions
    std::vector<int64_t> specific;        // kSpecific
    struct Cache {                        // response_cache: {enable, ttl_ms, max_bytes}
        bool enable = false;
        int64_t ttl_ms = 60000;           // 0: entries never expire (only the byte bound evicts)
        uint64_t max_bytes = uint64_t(64) << 20;
    } cache;
    int64_t warmup_runs = 3;              // runs on zero inputs before a version takes traffic
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
    uint64_t fingerprint = 0;              // size/mtime of model.onnx + config.yaml (hot reload, cache key)
    std::shared_ptr<ResponseCache> cache;  // the model's response cache, when config.yaml enables it
    // One session per plan: inference runs on the single I/O thread (docs/serving.md).
    std::map<const Plan*, std::pair<std::shared_ptr<const Plan>, std::unique_ptr<Session>>> sessions;
    Session* session_for(const std::shared_ptr<const Plan>& p);
    // The version's worker and queue (serve/batcher.h), made on first use when the model's
    // config asks for one; while it exists, only its thread touches `sessions`. Declared last:
    // destroyed (worker joined) before the sessions it uses.
    std::shared_ptr<Executor> exec;
};

struct ModelEntry {
    std::string name;
    ModelConfig config;
    // Loaded versions. Swapped only on the I/O thread, under Repository::mu() (other threads take
    // shared_ptr copies through Repository::get, so a version in use outlives its unload).
    std::map<int64_t, std::shared_ptr<LoadedVersion>> versions;
    std::string reason;  // why the last load failed
    std::map<int64_t, std::string> version_reason;    // versions whose last (re)load failed, and why
    std::map<int64_t, uint64_t> failed_fingerprint;   // ... and the files it failed on (no retry until they change)
    std::shared_ptr<ResponseCache> cache;
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
    // Thread-safe lookup for threads other than the I/O thread (version < 0: the latest).
    std::shared_ptr<LoadedVersion> get(const std::string& name, int64_t version);
    std::mutex& mu() { return mu_; }
    // Bumped whenever a model's versions change (load, install, unload): callers that cache a
    // get() result check it with one relaxed load and look up again only when it moved.
    uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
    void set_cache_l2(RedisL2* l2) { l2_ = l2; }

    // Hot reload (serve/reload.h). Fingerprint of a version folder's files; 0 when model.onnx is missing.
    static uint64_t fingerprint(const std::string& model_dir, int64_t version);
    // Loads, compiles and warms up one version without touching the repository (any thread).
    Status prepare_version(const std::string& name, const ModelConfig& cfg, int64_t v,
                           std::unique_ptr<LoadedVersion>* out) const;
    // Versions the config's policy selects among those on disk.
    static std::vector<int64_t> wanted_versions(const ModelConfig& cfg, const std::vector<int64_t>& on_disk);
    static std::vector<int64_t> versions_on_disk(const std::string& model_dir);
    // I/O thread: publishes a prepared version (replacing the same version number, dropping the
    // versions the policy no longer selects), or records why it failed.
    void install(const std::string& name, const ModelConfig& cfg, std::unique_ptr<LoadedVersion> lv);
    void record_failure(const std::string& name, int64_t v, uint64_t fp, const std::string& why);
    // I/O thread: drops retired versions whose worker has drained its queue (see retire()).
    void reap();
    size_t retiring() const { return retiring_.size(); }
    ModelEntry* find(const std::string& name);
    const std::map<std::string, std::unique_ptr<ModelEntry>>& models() const { return models_; }
    const std::vector<std::unique_ptr<VersionMetrics>>& all_metrics() const { return metrics_; }
    static bool valid_name(const std::string& n);

private:
    VersionMetrics* metrics_for(const std::string& model, int64_t version);
    ModelEntry* entry(const std::string& name);
    void attach_cache(ModelEntry* e, const ModelConfig& cfg);
    // A version taken out of the map: its worker (if any) stops taking jobs, runs those queued,
    // and the version stays in retiring_ until then, so the worker never outlives its version.
    void retire(std::shared_ptr<LoadedVersion> lv);

    std::string root_;
    uint64_t max_bytes_;
    std::map<std::string, std::unique_ptr<ModelEntry>> models_;
    std::vector<std::unique_ptr<VersionMetrics>> metrics_;  // never freed: counters survive unload
    std::mutex mu_;
    std::atomic<uint64_t> generation_{0};
    RedisL2* l2_ = nullptr;
    std::vector<std::shared_ptr<LoadedVersion>> retiring_;  // I/O thread only
};

}  // namespace jiffy::serve

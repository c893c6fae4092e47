#include "serve/repository.h"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>

#include "serve/admission.h"
#include "serve/batcher.h"

#include <algorithm>
#include <filesystem>

#include "serve/cache.h"

namespace fs = std::filesystem;

namespace jiffy::serve {

namespace {

std::string at(const std::string& path, const YAML::Node& n) {
    return path + ":" + std::to_string(n.Mark().line + 1) + ": ";
}

bool as_int(const YAML::Node& n, int64_t* v) {
    if (!n.IsScalar()) return false;
    const std::string& s = n.Scalar();
    if (s.empty() || s.size() > 18) return false;
    size_t i = s[0] == '-' ? 1 : 0;
    if (i == s.size()) return false;
    for (size_t k = i; k < s.size(); ++k)
        if (s[k] < '0' || s[k] > '9') return false;
    *v = std::stoll(s);
    return true;
}

}  // namespace

const char* kserve_dtype(DType t) {
    switch (t) {
        case DType::kBool: return "BOOL";
        case DType::kU8: return "UINT8";
        case DType::kU16: return "UINT16";
        case DType::kU32: return "UINT32";
        case DType::kU64: return "UINT64";
        case DType::kI8: return "INT8";
        case DType::kI16: return "INT16";
        case DType::kI32: return "INT32";
        case DType::kI64: return "INT64";
        case DType::kF16: return "FP16";
        case DType::kF32: return "FP32";
        case DType::kF64: return "FP64";
        case DType::kBF16: return "BF16";
        default: return nullptr;
    }
}

bool dtype_from_kserve(const std::string& s, DType* out) {
    static const DType all[] = {DType::kBool, DType::kU8,  DType::kU16, DType::kU32, DType::kU64,
                                DType::kI8,   DType::kI16, DType::kI32, DType::kI64, DType::kF16,
                                DType::kF32,  DType::kF64, DType::kBF16};
    for (DType t : all)
        if (s == kserve_dtype(t)) {
            *out = t;
            return true;
        }
    return false;
}

Status parse_model_config(const std::string& path, ModelConfig* out) {
    *out = ModelConfig{};
    YAML::Node root;
    try {
        root = YAML::LoadFile(path);
    } catch (const YAML::ParserException& e) {
        return invalid(path, ":", e.mark.line + 1, ": invalid YAML: ", e.msg);
    } catch (const std::exception& e) {
        return invalid(path, ": cannot read: ", e.what());
    }
    if (root.IsNull()) return {};  // empty file
    if (!root.IsMap()) return invalid(at(path, root), "expected a mapping of settings at the top level");
    try {
        for (auto it = root.begin(); it != root.end(); ++it) {
            const YAML::Node& k = it->first;
            const YAML::Node& v = it->second;
            std::string key = k.IsScalar() ? k.Scalar() : "";
            if (key == "inputs") {
                if (!v.IsMap()) return invalid(at(path, v), "'inputs' must map input names to shapes, e.g. {x: [1, 16, 96]}");
                for (auto jt = v.begin(); jt != v.end(); ++jt) {
                    if (!jt->first.IsScalar()) return invalid(at(path, jt->first), "input name must be a string");
                    const YAML::Node& dims = jt->second;
                    if (!dims.IsSequence())
                        return invalid(at(path, dims), "shape of input '", jt->first.Scalar(), "' must be a list of dims");
                    Shape s;
                    for (const auto& d : dims) {
                        int64_t x;
                        if (!as_int(d, &x) || x < 0)
                            return invalid(at(path, d), "dim of input '", jt->first.Scalar(),
                                           "' must be a non-negative integer, got '", d.IsScalar() ? d.Scalar() : "?", "'");
                        s.push_back(x);
                    }
                    if (shape_numel(s) < 0) return invalid(at(path, dims), "shape of input '", jt->first.Scalar(), "' is too large");
                    out->inputs[jt->first.Scalar()] = s;
                }
            } else if (key == "max_request_bytes") {
                int64_t x;
                if (!as_int(v, &x) || x <= 0) return invalid(at(path, v), "'max_request_bytes' must be a positive integer");
                out->max_request_bytes = uint64_t(x);
            } else if (key == "version_policy") {
                if (v.IsScalar() && v.Scalar() == "all") {
                    out->policy = ModelConfig::kAll;
                } else if (v.IsScalar() && v.Scalar() == "latest") {
                    out->policy = ModelConfig::kLatest;
                } else if (v.IsMap() && v.size() == 1 && v["latest"]) {
                    int64_t x;
                    if (!as_int(v["latest"], &x) || x < 1) return invalid(at(path, v), "'latest' must be a positive integer");
                    out->policy = ModelConfig::kLatest;
                    out->latest = x;
                } else if (v.IsMap() && v.size() == 1 && v["specific"] && v["specific"].IsSequence()) {
                    out->policy = ModelConfig::kSpecific;
                    for (const auto& d : v["specific"]) {
                        int64_t x;
                        if (!as_int(d, &x) || x < 0) return invalid(at(path, d), "versions must be non-negative integers");
                        out->specific.push_back(x);
                    }
                } else {
                    return invalid(at(path, v), "'version_policy' must be latest, all, {latest: N} or {specific: [versions]}");
                }
            } else if (key == "response_cache") {
                if (!v.IsMap()) return invalid(at(path, v), "'response_cache' must be a mapping, e.g. {enable: true, ttl_ms: 60000, max_bytes: 67108864}");
                for (auto jt = v.begin(); jt != v.end(); ++jt) {
                    std::string ck = jt->first.IsScalar() ? jt->first.Scalar() : "";
                    const YAML::Node& cv = jt->second;
                    int64_t x;
                    if (ck == "enable") {
                        if (!cv.IsScalar() || (cv.Scalar() != "true" && cv.Scalar() != "false"))
                            return invalid(at(path, cv), "'response_cache.enable' must be true or false");
                        out->cache.enable = cv.Scalar() == "true";
                    } else if (ck == "ttl_ms") {
                        if (!as_int(cv, &x) || x < 0) return invalid(at(path, cv), "'response_cache.ttl_ms' must be a non-negative integer (0: no expiry)");
                        out->cache.ttl_ms = x;
                    } else if (ck == "max_bytes") {
                        if (!as_int(cv, &x) || x <= 0) return invalid(at(path, cv), "'response_cache.max_bytes' must be a positive integer");
                        out->cache.max_bytes = uint64_t(x);
                    } else {
                        return invalid(at(path, jt->first), "unknown key '", ck, "' in response_cache (known: enable, ttl_ms, max_bytes)");
                    }
                }
            } else if (key == "warmup_runs") {
                int64_t x;
                if (!as_int(v, &x) || x < 0 || x > 1000) return invalid(at(path, v), "'warmup_runs' must be an integer in 0..1000");
                out->warmup_runs = x;
            } else {
                Status st;
                if (parse_sched_key(key, v, path, &out->sched, &st)) {
                    if (!st.ok()) return st;
                    continue;
                }
                return invalid(at(path, k), "unknown key '", key,
                               "' (known: inputs, max_request_bytes, version_policy, response_cache, warmup_runs, "
                               "max_batch_size, dynamic_batching, latency_target_us, max_queue_size, execution)");
            }
        }
        JIFFY_RETURN_IF_ERROR(check_sched_config(path, out->sched));
    } catch (const std::exception& e) {
        return invalid(path, ": ", e.what());
    }
    return {};
}

bool Repository::valid_name(const std::string& n) {
    if (n.empty() || n.size() > 200 || n == "." || n == "..") return false;
    return std::all_of(n.begin(), n.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
}

std::vector<std::string> Repository::scan() const {
    std::vector<std::string> r;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_, ec)) {
        std::string n = e.path().filename().string();
        if (e.is_directory(ec) && valid_name(n) && n[0] != '.') r.push_back(n);
    }
    std::sort(r.begin(), r.end());
    return r;
}

ModelEntry* Repository::find(const std::string& name) {
    auto it = models_.find(name);
    return it == models_.end() ? nullptr : it->second.get();
}

VersionMetrics* Repository::metrics_for(const std::string& model, int64_t version) {
    std::string v = std::to_string(version);
    for (auto& m : metrics_)
        if (m->model == model && m->version == v) return m.get();
    metrics_.push_back(std::make_unique<VersionMetrics>());
    metrics_.back()->model = model;
    metrics_.back()->version = v;
    return metrics_.back().get();
}

Session* LoadedVersion::session_for(const std::shared_ptr<const Plan>& p) {
    auto it = sessions.find(p.get());
    if (it != sessions.end()) return it->second.second.get();
    auto s = std::make_unique<Session>(p);
    Session* raw = s.get();
    sessions[p.get()] = {p, std::move(s)};
    return raw;
}

uint64_t Repository::fingerprint(const std::string& model_dir, int64_t version) {
    struct stat m{}, c{};
    std::string vdir = model_dir + "/" + std::to_string(version);
    if (::stat((vdir + "/model.onnx").c_str(), &m) != 0 || !S_ISREG(m.st_mode)) return 0;
    bool has_cfg = ::stat((model_dir + "/config.yaml").c_str(), &c) == 0;
    KeyHasher h;
    h.u64(uint64_t(m.st_size));
    h.u64(uint64_t(m.st_mtim.tv_sec));
    h.u64(uint64_t(m.st_mtim.tv_nsec));
    h.u64(has_cfg ? uint64_t(c.st_size) : ~0ull);
    h.u64(has_cfg ? uint64_t(c.st_mtim.tv_sec) : 0);
    h.u64(has_cfg ? uint64_t(c.st_mtim.tv_nsec) : 0);
    uint64_t r = h.digest().lo;
    return r ? r : 1;
}

std::vector<int64_t> Repository::versions_on_disk(const std::string& model_dir) {
    std::vector<int64_t> found;
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(model_dir, ec)) {
        std::string n = d.path().filename().string();
        if (n.empty() || n.size() > 18 || !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
        if (fs::is_regular_file(d.path() / "model.onnx", ec)) found.push_back(std::stoll(n));
    }
    std::sort(found.begin(), found.end());
    return found;
}

std::vector<int64_t> Repository::wanted_versions(const ModelConfig& cfg, const std::vector<int64_t>& found) {
    std::vector<int64_t> want;
    if (cfg.policy == ModelConfig::kAll) want = found;
    else if (cfg.policy == ModelConfig::kLatest)
        want.assign(found.end() - std::min<ptrdiff_t>(ptrdiff_t(found.size()), cfg.latest), found.end());
    else
        for (int64_t v : cfg.specific)
            if (std::binary_search(found.begin(), found.end(), v)) want.push_back(v);
    return want;
}

Status Repository::prepare_version(const std::string& name, const ModelConfig& cfg, int64_t v,
                                   std::unique_ptr<LoadedVersion>* out) const {
    std::string dir = (fs::path(root_) / name).string();
    std::string path = (fs::path(dir) / std::to_string(v) / "model.onnx").string();
    auto lv = std::make_unique<LoadedVersion>();
    lv->fingerprint = fingerprint(dir, v);
    lv->version = v;
    lv->path = path;
    ImportOptions io;
    io.max_bytes = max_bytes_;
    JIFFY_RETURN_IF_ERROR(jiffy::Model::load(path, io, &lv->model));
    const Graph& g = lv->model->graph();
    bool all_known = true;
    for (int id : g.inputs) {
        const Value& val = g.values[size_t(id)];
        TensorMeta t{val.name, val.dtype, {}};
        if (!kserve_dtype(val.dtype)) return invalid(path, ": input '", val.name, "' has type ", dtype_name(val.dtype), ", which the server cannot carry");
        for (const Dim& d : val.dims) t.shape.push_back(d.value >= 0 ? d.value : -1);
        auto c = cfg.inputs.find(val.name);
        if (c != cfg.inputs.end()) {
            if (val.has_shape && c->second.size() != t.shape.size())
                return invalid(path, ": config.yaml gives input '", val.name, "' rank ", c->second.size(),
                               " but the model declares rank ", t.shape.size());
            for (size_t i = 0; i < t.shape.size() && i < c->second.size(); ++i)
                if (t.shape[i] >= 0 && t.shape[i] != c->second[i])
                    return invalid(path, ": config.yaml gives input '", val.name, "' shape ", shape_str(c->second),
                                   " but the model declares dim ", i, " = ", t.shape[i]);
            t.shape = c->second;
            lv->shapes[val.name] = c->second;
        } else if (!val.has_shape || std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; })) {
            all_known = false;
        }
        lv->inputs.push_back(std::move(t));
    }
    for (const auto& [n, s] : cfg.inputs)
        if (std::none_of(lv->inputs.begin(), lv->inputs.end(), [&](const TensorMeta& t) { return t.name == n; }))
            return invalid(path, ": config.yaml names input '", n, "', which the model does not have");
    for (int id : g.outputs) {
        const Value& val = g.values[size_t(id)];
        if (!kserve_dtype(val.dtype)) return invalid(path, ": output '", val.name, "' has type ", dtype_name(val.dtype), ", which the server cannot carry");
        TensorMeta t{val.name, val.dtype, {}};
        for (const Dim& d : val.dims) t.shape.push_back(d.value >= 0 ? d.value : -1);
        lv->outputs.push_back(std::move(t));
    }
    if (all_known) {
        CompileOptions opt;
        opt.max_bytes = max_bytes_;
        for (const TensorMeta& t : lv->inputs) opt.input_shapes[t.name] = t.shape;
        std::shared_ptr<const Plan> plan;
        Status st = lv->model->compile(opt, {}, &plan);
        if (st.ok() && plan->frozen_values.empty()) {
            lv->fixed = plan;
            for (size_t i = 0; i < plan->outputs.size() && i < lv->outputs.size(); ++i) lv->outputs[i].shape = plan->outputs[i].shape;
        } else if (st.ok() || st.message().find("depends on input") == std::string::npos) {
            // A real compile error (not merely "needs an input's value").
            if (!st.ok()) return Status(st).prefix(path + ": ");
        }
        // Else: compiled per request, with the values of small integer inputs.
    }
    // Warm-up: run the fixed plan on zero inputs (its session is the one requests will use), so
    // the first request pays no first-touch page faults, and a model that cannot run never serves.
    if (lv->fixed)
        for (int64_t i = 0; i < cfg.warmup_runs; ++i) {
            Status st = lv->session_for(lv->fixed)->run();
            if (!st.ok()) return invalid(path, ": warm-up run ", i + 1, " failed: ", st.message());
        }
    *out = std::move(lv);
    return {};
}

std::shared_ptr<LoadedVersion> Repository::get(const std::string& name, int64_t version) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = models_.find(name);
    if (it == models_.end() || it->second->versions.empty()) return nullptr;
    auto& vs = it->second->versions;
    if (version < 0) return vs.rbegin()->second;
    auto jt = vs.find(version);
    return jt == vs.end() ? nullptr : jt->second;
}

ModelEntry* Repository::entry(const std::string& name) {
    if (ModelEntry* e = find(name)) return e;
    std::lock_guard<std::mutex> g(mu_);  // get() reads models_ from other threads
    auto& slot = models_[name];
    slot = std::make_unique<ModelEntry>();
    slot->name = name;
    return slot.get();
}

void Repository::attach_cache(ModelEntry* e, const ModelConfig& cfg) {
    if (!cfg.cache.enable) {
        e->cache.reset();
        return;
    }
    if (!e->cache || e->cache->ttl_ms() != cfg.cache.ttl_ms || e->cache->max_bytes() != cfg.cache.max_bytes)
        e->cache = std::make_shared<ResponseCache>(cfg.cache.ttl_ms, cfg.cache.max_bytes, l2_);
}

void Repository::retire(std::shared_ptr<LoadedVersion> lv) {
    if (!lv || !lv->exec) return;  // no worker: the last shared_ptr holder frees it
    lv->exec->retire();
    retiring_.push_back(std::move(lv));
}

void Repository::reap() {
    if (retiring_.empty()) return;
    std::erase_if(retiring_, [](const std::shared_ptr<LoadedVersion>& lv) { return lv->exec->finished(); });
}

void Repository::install(const std::string& name, const ModelConfig& cfg, std::unique_ptr<LoadedVersion> lv) {
    ModelEntry* e = entry(name);
    attach_cache(e, cfg);
    int64_t v = lv->version;
    lv->metrics = metrics_for(name, v);
    lv->cache = e->cache;
    std::shared_ptr<LoadedVersion> sp(std::move(lv));
    std::vector<int64_t> have;
    for (const auto& [k, x] : e->versions) have.push_back(k);
    if (!std::binary_search(have.begin(), have.end(), v)) have.insert(std::upper_bound(have.begin(), have.end(), v), v);
    std::vector<int64_t> keep = wanted_versions(cfg, have);
    std::shared_ptr<LoadedVersion> old;  // dropped after the lock: the last user frees it
    std::vector<std::shared_ptr<LoadedVersion>> dropped;
    {
        std::lock_guard<std::mutex> g(mu_);
        auto it = e->versions.find(v);
        if (it != e->versions.end()) old = std::move(it->second);
        e->versions[v] = sp;
        for (auto jt = e->versions.begin(); jt != e->versions.end();)
            if (!std::binary_search(keep.begin(), keep.end(), jt->first)) {
                dropped.push_back(std::move(jt->second));
                jt = e->versions.erase(jt);
            } else {
                ++jt;
            }
        e->config = cfg;
        for (auto& [k, x] : e->versions) x->cache = e->cache;
        e->version_reason.erase(v);
        e->failed_fingerprint.erase(v);
        e->reason.clear();
        generation_.fetch_add(1, std::memory_order_release);
    }
    retire(std::move(old));
    for (auto& d : dropped) retire(std::move(d));
    reap();
}

void Repository::record_failure(const std::string& name, int64_t v, uint64_t fp, const std::string& why) {
    ModelEntry* e = entry(name);
    std::lock_guard<std::mutex> g(mu_);
    e->version_reason[v] = why;
    e->failed_fingerprint[v] = fp;
    if (e->versions.empty()) e->reason = why;
}

Status Repository::load(const std::string& name) {
    if (!valid_name(name)) return invalid("invalid model name '", name, "'");
    fs::path dir = fs::path(root_) / name;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        if (ModelEntry* old = find(name)) old->reason = "not in the repository";
        return invalid("model '", name, "' is not in the repository (no folder ", dir.string(), ")");
    }
    ModelEntry* e = entry(name);
    auto fail = [&](Status st) {
        e->reason = st.message();
        return st;
    };
    ModelConfig cfg;
    fs::path cfgp = dir / "config.yaml";
    if (fs::exists(cfgp, ec)) {
        Status st = parse_model_config(cfgp.string(), &cfg);
        if (!st.ok()) return fail(st);
    }
    std::vector<int64_t> found = versions_on_disk(dir.string());
    if (cfg.policy == ModelConfig::kSpecific)
        for (int64_t v : cfg.specific)
            if (!std::binary_search(found.begin(), found.end(), v))
                return fail(invalid("model '", name, "': version ", v, " named by version_policy has no ", v, "/model.onnx"));
    std::vector<int64_t> want = wanted_versions(cfg, found);
    if (want.empty()) return fail(invalid("model '", name, "' has no version folder with a model.onnx (expected ", (dir / "1" / "model.onnx").string(), ")"));
    std::map<int64_t, std::shared_ptr<LoadedVersion>> loaded;
    for (int64_t v : want) {
        std::unique_ptr<LoadedVersion> lv;
        Status st = prepare_version(name, cfg, v, &lv);
        if (!st.ok()) {
            std::lock_guard<std::mutex> g(mu_);
            e->version_reason[v] = st.message();
            e->failed_fingerprint[v] = fingerprint(dir.string(), v);
            return fail(st);
        }
        lv->metrics = metrics_for(name, v);
        loaded[v] = std::move(lv);
    }
    attach_cache(e, cfg);
    for (auto& [v, lv] : loaded) lv->cache = e->cache;
    std::map<int64_t, std::shared_ptr<LoadedVersion>> old;
    {
        std::lock_guard<std::mutex> g(mu_);
        old.swap(e->versions);
        e->versions = std::move(loaded);
        e->config = cfg;
        e->version_reason.clear();
        e->failed_fingerprint.clear();
        generation_.fetch_add(1, std::memory_order_release);
    }
    for (auto& [v, lv] : old) retire(std::move(lv));
    e->reason.clear();
    return {};
}

Status Repository::unload(const std::string& name) {
    ModelEntry* e = find(name);
    if (!e) return invalid("model '", name, "' is not loaded");
    std::map<int64_t, std::shared_ptr<LoadedVersion>> old;
    {
        std::lock_guard<std::mutex> g(mu_);
        old.swap(e->versions);
        generation_.fetch_add(1, std::memory_order_release);
    }
    for (auto& [v, lv] : old) retire(std::move(lv));
    e->reason = "unloaded";
    return {};
}

}  // namespace jiffy::serve

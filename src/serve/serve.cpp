// `jiffy serve`: argument parsing, the KServe v2 REST handler, metrics, signals.
#include "serve/serve.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>
#include <utility>

#include "serve/cache.h"
#include "serve/http.h"
#include "serve/metrics.h"
#include "serve/reload.h"
#include "serve/repository.h"
#include "serve/shm.h"
#include "serve/shm_ring.h"

namespace jiffy::serve {

using json = nlohmann::json;

namespace {

const char* kUsage =
    "usage: jiffy serve --model-repository DIR [options]\n"
    "  --host ADDR             listen address (default 127.0.0.1: loopback only)\n"
    "  --http-port N           HTTP port (default 8000; 0 = any free port, printed at start)\n"
    "  --metrics-port N        also serve GET /metrics on this port (default: only the HTTP port)\n"
    "  --max-body-bytes N      request body limit (default 64 MiB; config.yaml max_request_bytes lowers it per model)\n"
    "  --max-header-bytes N    request line + headers limit (default 16384)\n"
    "  --read-timeout-ms N     a started request must arrive within this (default 10000): else 408\n"
    "  --idle-timeout-ms N     idle keep-alive connections are closed after this (default 60000)\n"
    "  --drain-ms N            after SIGTERM: keep answering 503 for this long (default 500)\n"
    "  --exit-timeout-ms N     after SIGTERM: exit after this even if requests are unfinished (default 30000)\n"
    "  --max-memory BYTES      per model (default 4 GiB)\n"
    "  --no-exit-on-error      keep serving when a model fails to load at start\n"
    "  --cache-redis HOST:PORT second level for the response cache (config.yaml response_cache)\n"
    "  --cache-redis-timeout-ms N  Redis connect/command timeout (default 20); failures count as misses\n"
    "  --repository-poll-ms N  hot reload: scan the repository every N ms for new or changed versions (0: off)\n"
    "  --local-ring NAME       serve local clients over a shared-memory ring (jiffy/client.h)\n";

struct Options {
    std::string repo, host = "127.0.0.1";
    int port = 8000, metrics_port = -1;
    HttpLimits limits;
    int drain_ms = 500, exit_timeout_ms = 30000;
    uint64_t max_bytes = uint64_t(4) << 30;
    bool exit_on_error = true;
    std::string cache_redis, local_ring;
    int cache_redis_timeout_ms = 20, repository_poll_ms = 0;
};

struct ArgError {
    std::string msg;
};

int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string shape_json(const Shape& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
}

json tensor_meta_json(const std::vector<TensorMeta>& v) {
    json a = json::array();
    for (const TensorMeta& t : v) a.push_back({{"name", t.name}, {"datatype", kserve_dtype(t.dtype)}, {"shape", t.shape}});
    return a;
}

void set_json(HttpResponse& res, int status, const json& j) {
    res.status = status;
    res.content_type = "application/json";
    res.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void set_error(HttpResponse& res, int status, const std::string& msg) { set_json(res, status, json{{"error", msg}}); }

struct BadRequest {
    int status;
    std::string msg;
};
[[noreturn]] void fail(int status, std::string msg) { throw BadRequest{status, std::move(msg)}; }

std::vector<std::string> split_path(const std::string& p) {
    std::vector<std::string> r;
    size_t i = 1;
    while (i <= p.size()) {
        size_t j = p.find('/', i);
        if (j == std::string::npos) j = p.size();
        r.push_back(p.substr(i, j - i));
        i = j + 1;
    }
    if (!r.empty() && r.back().empty()) r.pop_back();  // trailing slash
    return r;
}

// ------------------------------------------------------------------ tensor data <-> JSON

// Elements of nested `data` arrays; -1 when nested deeper than a tensor can be (rank <= 16 + 1).
int64_t count_leaves(const json& j, int depth = 0) {
    if (!j.is_array()) return 1;
    if (depth > 17) return -1;
    int64_t n = 0;
    for (const json& e : j) {
        int64_t k = count_leaves(e, depth + 1);
        if (k < 0) return -1;
        n += k;
    }
    return n;
}

struct DataCtx {
    const std::string* tensor;
    DType t;
    uint8_t* out;
    int64_t i = 0;
};

[[noreturn]] void bad_elem(const DataCtx& c, const json& e, const char* want) {
    std::string v = e.dump();
    if (v.size() > 40) v = v.substr(0, 40) + "...";
    fail(400, "input '" + *c.tensor + "': data element " + std::to_string(c.i) + " is " + v + ", expected " + want +
                  " for datatype " + kserve_dtype(c.t));
}

template <typename T>
void put_int(DataCtx& c, const json& e) {
    T v;
    if (e.is_number_unsigned()) {
        uint64_t u = e.get<uint64_t>();
        if (!std::in_range<T>(u)) bad_elem(c, e, "an integer in range");
        v = T(u);
    } else if (e.is_number_integer()) {
        int64_t s = e.get<int64_t>();
        if (!std::in_range<T>(s)) bad_elem(c, e, "an integer in range");
        v = T(s);
    } else {
        bad_elem(c, e, "an integer");
    }
    std::memcpy(c.out + size_t(c.i) * sizeof(T), &v, sizeof(T));
}

void put_elem(DataCtx& c, const json& e) {
    switch (c.t) {
        case DType::kBool: {
            if (!e.is_boolean()) bad_elem(c, e, "true or false");
            c.out[c.i] = e.get<bool>() ? 1 : 0;
            break;
        }
        case DType::kU8: put_int<uint8_t>(c, e); break;
        case DType::kU16: put_int<uint16_t>(c, e); break;
        case DType::kU32: put_int<uint32_t>(c, e); break;
        case DType::kU64: put_int<uint64_t>(c, e); break;
        case DType::kI8: put_int<int8_t>(c, e); break;
        case DType::kI16: put_int<int16_t>(c, e); break;
        case DType::kI32: put_int<int32_t>(c, e); break;
        case DType::kI64: put_int<int64_t>(c, e); break;
        case DType::kF32: {
            if (!e.is_number()) bad_elem(c, e, "a number");
            float f = float(e.get<double>());
            std::memcpy(c.out + size_t(c.i) * 4, &f, 4);
            break;
        }
        case DType::kF64: {
            if (!e.is_number()) bad_elem(c, e, "a number");
            double d = e.get<double>();
            std::memcpy(c.out + size_t(c.i) * 8, &d, 8);
            break;
        }
        case DType::kF16:
        case DType::kBF16: {
            if (!e.is_number()) bad_elem(c, e, "a number");
            float f = float(e.get<double>());
            uint16_t h = c.t == DType::kF16 ? f32_to_f16(f) : f32_to_bf16(f);
            std::memcpy(c.out + size_t(c.i) * 2, &h, 2);
            break;
        }
        default: fail(400, "input '" + *c.tensor + "': unsupported datatype");
    }
    ++c.i;
}

void put_all(DataCtx& c, const json& j) {
    if (j.is_array())
        for (const json& e : j) put_all(c, e);
    else
        put_elem(c, j);
}

// Writes a tensor's elements as a flat JSON array.
void append_data_json(std::string& s, DType t, const void* p, int64_t n) {
    s += '[';
    char buf[64];
    for (int64_t i = 0; i < n; ++i) {
        if (i) s += ',';
        switch (t) {
            case DType::kBool: s += static_cast<const uint8_t*>(p)[i] ? "true" : "false"; break;
            case DType::kU8: s += std::to_string(static_cast<const uint8_t*>(p)[i]); break;
            case DType::kU16: s += std::to_string(static_cast<const uint16_t*>(p)[i]); break;
            case DType::kU32: s += std::to_string(static_cast<const uint32_t*>(p)[i]); break;
            case DType::kU64: s += std::to_string(static_cast<const uint64_t*>(p)[i]); break;
            case DType::kI8: s += std::to_string(static_cast<const int8_t*>(p)[i]); break;
            case DType::kI16: s += std::to_string(static_cast<const int16_t*>(p)[i]); break;
            case DType::kI32: s += std::to_string(static_cast<const int32_t*>(p)[i]); break;
            case DType::kI64: s += std::to_string(static_cast<const int64_t*>(p)[i]); break;
            case DType::kF32:
            case DType::kF16:
            case DType::kBF16:
            case DType::kF64: {
                double d = t == DType::kF32    ? double(static_cast<const float*>(p)[i])
                           : t == DType::kF64  ? static_cast<const double*>(p)[i]
                           : t == DType::kF16  ? double(f16_to_f32(static_cast<const uint16_t*>(p)[i]))
                                               : double(bf16_to_f32(static_cast<const uint16_t*>(p)[i]));
                if (!std::isfinite(d)) {
                    s += "null";  // JSON has no NaN/Inf; binary outputs carry them exactly
                    break;
                }
                // Shortest text that reads back as the same value in the tensor's own precision.
                if (t == DType::kF64) std::snprintf(buf, sizeof buf, "%.17g", d);
                else std::snprintf(buf, sizeof buf, "%.9g", d);
                s += buf;
                break;
            }
            default: s += "null";
        }
    }
    s += ']';
}

// ------------------------------------------------------------------ the handler

class KServeHandler : public HttpHandler {
public:
    KServeHandler(Repository& repo, const Options& opt, HttpServer& server, ShmRegistry& shm)
        : repo_(repo), opt_(opt), server_(server), shm_(shm) {}

    size_t body_limit(const HttpRequest& req, size_t server_limit) override {
        auto seg = split_path(req.path);
        if (seg.size() >= 3 && seg[0] == "v2" && seg[1] == "models")
            if (ModelEntry* e = repo_.find(seg[2]))
                if (e->config.max_request_bytes) return std::min<size_t>(server_limit, e->config.max_request_bytes);
        return server_limit;
    }

    void handle(const HttpRequest& req, HttpResponse& res) override {
        try {
            route(req, res);
        } catch (const BadRequest& b) {
            set_error(res, b.status, b.msg);
        }
    }

private:
    void route(const HttpRequest& req, HttpResponse& res) {
        auto seg = split_path(req.path);
        bool get = req.method == "GET", post = req.method == "POST";
        auto need = [&](bool ok, const char* allow) {
            if (!ok) {
                res.headers.emplace_back("Allow", allow);
                fail(405, "method " + req.method + " not allowed on " + req.path + " (use " + allow + ")");
            }
        };
        if (seg.size() == 1 && seg[0] == "metrics") {
            need(get, "GET");
            return metrics(res);
        }
        if (req.listener != 0) fail(404, "the metrics port serves only GET /metrics");
        if (seg.empty() || seg[0] != "v2") fail(404, "unknown endpoint " + req.path);
        if (seg.size() == 3 && seg[1] == "health" && seg[2] == "live") {
            need(get, "GET");
            return set_json(res, 200, json{{"live", true}});
        }
        if (seg.size() == 3 && seg[1] == "health" && seg[2] == "ready") {
            need(get, "GET");
            bool ready = !server_.draining();
            return set_json(res, ready ? 200 : 503, json{{"ready", ready}});
        }
        if (req.while_draining) {  // requests already in flight when the drain began still run
            res.close = true;
            fail(503, "server is shutting down");
        }
        if (seg.size() == 1) {
            need(get, "GET");
            return set_json(res, 200,
                            json{{"name", "jiffy"}, {"version", "0.1.0"},
                                 {"extensions", {"binary_tensor_data", "model_repository", "system_shared_memory"}}});
        }
        if (seg[1] == "repository") return repository(req, seg, post, res);
        if (seg[1] == "systemsharedmemory") return shm_.route(req, seg, res);  // serve/shm.h
        if (seg[1] != "models" || seg.size() < 3) fail(404, "unknown endpoint " + req.path);
        // /v2/models/{name}[/versions/{v}][/ready|/infer]
        const std::string& name = seg[2];
        size_t k = 3;
        std::string version;
        if (seg.size() >= 5 && seg[3] == "versions") {
            version = seg[4];
            k = 5;
        }
        std::string action = seg.size() > k ? seg[k] : "";
        if (seg.size() > k + 1 || (!action.empty() && action != "ready" && action != "infer"))
            fail(404, "unknown endpoint " + req.path);
        ModelEntry* e = repo_.find(name);
        if (action == "ready") {
            need(get, "GET");
            if (!e) fail(404, "unknown model '" + name + "'");
            bool ready = version.empty() ? e->ready() : find_version(e, version, false) != nullptr;
            json j{{"name", name}, {"ready", ready}};
            if (!version.empty()) j["version"] = version;
            return set_json(res, ready ? 200 : 400, j);
        }
        if (!e || !e->ready()) fail(404, "unknown model '" + name + "'" + (e ? " (not loaded: " + e->reason + ")" : ""));
        LoadedVersion* lv = find_version(e, version, true);
        if (action.empty()) {
            need(get, "GET");
            json vs = json::array();
            for (const auto& [v, p] : e->versions) vs.push_back(std::to_string(v));
            return set_json(res, 200,
                            json{{"name", name}, {"versions", vs}, {"platform", "onnx"},
                                 {"inputs", tensor_meta_json(lv->inputs)}, {"outputs", tensor_meta_json(lv->outputs)}});
        }
        need(post, "POST");
        int64_t t0 = now_us();
        bool ok = false;
        try {
            infer(req, name, lv, res);
            ok = true;
        } catch (const BadRequest&) {
            lv->metrics->observe(uint64_t(now_us() - t0), false);
            throw;
        }
        lv->metrics->observe(uint64_t(now_us() - t0), ok);
    }

    LoadedVersion* find_version(ModelEntry* e, const std::string& v, bool throw_404) {
        if (v.empty()) return e->latest();
        bool digits = !v.empty() && v.size() <= 18 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits) {
            auto it = e->versions.find(std::stoll(v));
            if (it != e->versions.end()) return it->second.get();
        }
        if (throw_404) fail(404, "unknown version '" + v + "' of model '" + e->name + "'");
        return nullptr;
    }

    // ---------------------------------------------------------------- infer

    struct InTensor {
        const TensorMeta* meta = nullptr;
        Shape shape;
        const uint8_t* data = nullptr;
        size_t nbytes = 0;
        std::vector<uint8_t> storage;  // JSON data converted
    };

    void infer(const HttpRequest& req, const std::string& name, LoadedVersion* lv, HttpResponse& res) {
        std::string_view body = req.body;
        std::string_view head = body, bin;
        if (const std::string* h = req.header("inference-header-content-length")) {
            if (h->empty() || h->size() > 18 || !std::all_of(h->begin(), h->end(), [](char c) { return c >= '0' && c <= '9'; }))
                fail(400, "invalid Inference-Header-Content-Length '" + *h + "'");
            uint64_t n = std::stoull(*h);
            if (n > body.size())
                fail(400, "Inference-Header-Content-Length " + *h + " exceeds the body size " + std::to_string(body.size()));
            head = body.substr(0, n);
            bin = body.substr(n);
        }
        json j;
        try {
            j = json::parse(head.begin(), head.end());
        } catch (const json::parse_error& e) {
            fail(400, std::string("malformed JSON in request: ") + e.what());
        }
        if (!j.is_object()) fail(400, "request must be a JSON object");
        for (auto it = j.begin(); it != j.end(); ++it)
            if (it.key() != "id" && it.key() != "parameters" && it.key() != "inputs" && it.key() != "outputs")
                fail(400, "unknown request field '" + it.key() + "' (expected id, parameters, inputs, outputs)");
        std::string id;
        if (j.contains("id")) {
            if (!j["id"].is_string()) fail(400, "'id' must be a string");
            id = j["id"].get<std::string>();
        }
        bool all_binary = false;
        if (j.contains("parameters")) {
            const json& p = j["parameters"];
            if (!p.is_object()) fail(400, "'parameters' must be an object");
            if (p.contains("binary_data_output")) {
                if (!p["binary_data_output"].is_boolean()) fail(400, "parameter 'binary_data_output' must be a boolean");
                all_binary = p["binary_data_output"].get<bool>();
            }
        }
        if (!j.contains("inputs") || !j["inputs"].is_array()) fail(400, "request needs an 'inputs' array");
        const json& jin = j["inputs"];
        std::vector<InTensor> ins(lv->inputs.size());
        size_t bin_off = 0;
        for (const json& t : jin) {
            if (!t.is_object()) fail(400, "each element of 'inputs' must be an object");
            if (!t.contains("name") || !t["name"].is_string()) fail(400, "an input has no 'name' string");
            std::string tn = t["name"].get<std::string>();
            size_t idx = 0;
            while (idx < lv->inputs.size() && lv->inputs[idx].name != tn) ++idx;
            if (idx == lv->inputs.size()) {
                std::string names;
                for (const TensorMeta& m : lv->inputs) names += (names.empty() ? "'" : ", '") + m.name + "'";
                fail(400, "unexpected input '" + tn + "' for model '" + name + "' (its inputs: " + names + ")");
            }
            InTensor& it = ins[idx];
            if (it.meta) fail(400, "input '" + tn + "' is given twice");
            const TensorMeta& m = lv->inputs[idx];
            it.meta = &m;
            for (auto kv = t.begin(); kv != t.end(); ++kv)
                if (kv.key() != "name" && kv.key() != "shape" && kv.key() != "datatype" && kv.key() != "parameters" &&
                    kv.key() != "data")
                    fail(400, "input '" + tn + "': unknown field '" + kv.key() + "'");
            if (!t.contains("datatype") || !t["datatype"].is_string()) fail(400, "input '" + tn + "': missing 'datatype'");
            std::string dt = t["datatype"].get<std::string>();
            if (dt != kserve_dtype(m.dtype)) {
                DType tmp;
                fail(400, "input '" + tn + "': datatype " + dt + (dtype_from_kserve(dt, &tmp) ? "" : " (unknown)") +
                              " does not match the model's " + kserve_dtype(m.dtype));
            }
            if (!t.contains("shape") || !t["shape"].is_array()) fail(400, "input '" + tn + "': missing 'shape' array");
            for (const json& d : t["shape"]) {
                if (!d.is_number_integer() || d.get<int64_t>() < 0)
                    fail(400, "input '" + tn + "': shape must hold non-negative integers, got " + t["shape"].dump());
                it.shape.push_back(d.get<int64_t>());
            }
            bool shape_ok = it.shape.size() == m.shape.size();
            for (size_t i = 0; shape_ok && i < m.shape.size(); ++i) shape_ok = m.shape[i] < 0 || m.shape[i] == it.shape[i];
            if (!shape_ok)
                fail(400, "input '" + tn + "': shape " + shape_json(it.shape) + " does not match the expected " +
                              shape_json(m.shape) + (lv->shapes.count(tn) ? " (fixed by config.yaml)" : ""));
            int64_t numel = shape_numel(it.shape);
            size_t esz = dtype_size(m.dtype);
            if (numel < 0 || uint64_t(numel) > (uint64_t(1) << 40) / esz) fail(400, "input '" + tn + "': shape is too large");
            size_t want = size_t(numel) * esz;
            int64_t bsize = -1;
            ShmRef shm_in;  // system shared memory extension (serve/shm.h)
            if (t.contains("parameters")) {
                const json& p = t["parameters"];
                if (!p.is_object()) fail(400, "input '" + tn + "': 'parameters' must be an object");
                std::string serr;
                if (shm_.resolve(p, "input '" + tn + "'", want, &shm_in, &serr) && !serr.empty()) fail(400, serr);
                if (p.contains("binary_data_size")) {
                    if (!p["binary_data_size"].is_number_integer() || p["binary_data_size"].get<int64_t>() < 0)
                        fail(400, "input '" + tn + "': binary_data_size must be a non-negative integer");
                    bsize = p["binary_data_size"].get<int64_t>();
                }
            }
            if (shm_in.region) {
                if (t.contains("data") || bsize >= 0) fail(400, "input '" + tn + "': has both shared memory and 'data'/binary_data_size");
                it.storage.assign(shm_in.data(), shm_in.data() + want);  // a snapshot: the client may rewrite the region
                it.data = it.storage.data();
                it.nbytes = want;
            } else if (bsize >= 0) {
                if (t.contains("data")) fail(400, "input '" + tn + "': has both 'data' and binary_data_size");
                if (uint64_t(bsize) != want)
                    fail(400, "input '" + tn + "': binary_data_size is " + std::to_string(bsize) + " bytes, expected " +
                                  std::to_string(want) + " for " + kserve_dtype(m.dtype) + " shape " + shape_json(it.shape));
                if (bin.size() - bin_off < want)
                    fail(400, "input '" + tn + "': binary data ends after " + std::to_string(bin.size() - bin_off) + " of " +
                                  std::to_string(want) + " bytes (check Inference-Header-Content-Length)");
                it.data = reinterpret_cast<const uint8_t*>(bin.data()) + bin_off;
                it.nbytes = want;
                bin_off += want;
            } else {
                if (!t.contains("data")) fail(400, "input '" + tn + "': no 'data' and no binary_data_size parameter");
                const json& d = t["data"];
                int64_t n = count_leaves(d);
                if (n < 0) fail(400, "input '" + tn + "': 'data' is nested too deeply");
                if (n != numel)
                    fail(400, "input '" + tn + "': " + std::to_string(n) + " data elements, expected " + std::to_string(numel) +
                                  " for shape " + shape_json(it.shape));
                it.storage.resize(want);
                DataCtx c{&tn, m.dtype, it.storage.data()};
                put_all(c, d);
                it.data = it.storage.data();
                it.nbytes = want;
            }
        }
        if (bin_off != bin.size())
            fail(400, std::to_string(bin.size() - bin_off) + " bytes of binary data after the JSON header are not claimed by any input's binary_data_size");
        for (size_t i = 0; i < ins.size(); ++i)
            if (!ins[i].meta) fail(400, "missing input '" + lv->inputs[i].name + "' for model '" + name + "'");

        // Response cache (serve/cache.h): key = model, version, files, inputs, requested outputs.
        CacheKey ckey;
        std::string id_json = j.contains("id") ? json(id).dump(-1, ' ', false, json::error_handler_t::replace) : "";
        ResponseCache* cache = lv->cache.get();
        if (cache && j.contains("outputs") && j["outputs"].dump().find("shared_memory_region") != std::string::npos) cache = nullptr;
        if (cache) {
            KeyHasher h;
            h.str(name);
            h.u64(uint64_t(lv->version));
            h.u64(lv->fingerprint);
            for (const InTensor& t : ins) {
                h.str(t.meta->name);
                h.u64(uint64_t(t.meta->dtype));
                h.u64(t.shape.size());
                h.bytes(t.shape.data(), t.shape.size() * sizeof(int64_t));
                h.bytes(t.data, t.nbytes);
            }
            h.str(j.contains("outputs") ? j["outputs"].dump() : "");
            h.u64(all_binary);
            ckey = h.digest();
            if (cache_respond(*cache, ckey, id_json, res, lv->metrics)) return;
        }

        // Plan: the one compiled at load, or per request shape (cached by the engine).
        std::shared_ptr<const Plan> plan = lv->fixed;
        if (!plan) {
            CompileOptions opt;
            opt.max_bytes = opt_.max_bytes;
            ValueMap values;
            for (const InTensor& t : ins) {
                opt.input_shapes[t.meta->name] = t.shape;
                if ((dtype_is_int(t.meta->dtype) || t.meta->dtype == DType::kBool) && shape_numel(t.shape) <= 64) {
                    auto v = std::make_shared<Tensor>(t.meta->dtype, t.shape);
                    std::memcpy(v->data(), t.data, t.nbytes);
                    values[t.meta->name] = v;
                }
            }
            Status st = lv->model->compile(opt, values, &plan);
            if (!st.ok()) fail(st.code() == Code::kInternal ? 500 : 400, "cannot run model '" + name + "' for these inputs: " + st.message());
        }
        Session* s = lv->session_for(plan);
        for (size_t i = 0; i < plan->inputs.size(); ++i) {
            const IoDesc& d = plan->inputs[i];
            const InTensor* t = nullptr;
            for (const InTensor& x : ins)
                if (x.meta->name == d.name) t = &x;
            if (!t || t->nbytes != d.nbytes) fail(500, "internal: plan input '" + d.name + "' does not match the request");
            std::memcpy(s->input_data(i), t->data, t->nbytes);
        }
        for (const auto& [idx, v] : plan->frozen_values)
            if (std::memcmp(s->input_data(idx), v->data(), v->nbytes()) != 0)
                fail(500, "internal: input '" + plan->inputs[idx].name + "' differs from the value its plan was compiled for");
        int64_t c0 = now_us();
        Status st = s->run();
        lv->metrics->compute_sum_us.fetch_add(uint64_t(now_us() - c0), std::memory_order_relaxed);
        if (!st.ok()) fail(st.code() == Code::kInvalid ? 400 : 500, "inference failed: " + st.message());

        // Outputs: all, or the requested subset in the requested order.
        struct Out {
            size_t idx;
            bool binary;
            ShmRef shm = {};  // written into a shared memory region (serve/shm.h)
        };
        std::vector<Out> outs;
        if (j.contains("outputs")) {
            const json& jo = j["outputs"];
            if (!jo.is_array()) fail(400, "'outputs' must be an array");
            for (const json& o : jo) {
                if (!o.is_object() || !o.contains("name") || !o["name"].is_string())
                    fail(400, "each requested output needs a 'name' string");
                std::string on = o["name"].get<std::string>();
                size_t idx = 0;
                while (idx < plan->outputs.size() && plan->outputs[idx].name != on) ++idx;
                if (idx == plan->outputs.size()) {
                    std::string names;
                    for (const IoDesc& d : plan->outputs) names += (names.empty() ? "'" : ", '") + d.name + "'";
                    fail(400, "unknown output '" + on + "' requested (model '" + name + "' has " + names + ")");
                }
                for (auto kv = o.begin(); kv != o.end(); ++kv)
                    if (kv.key() != "name" && kv.key() != "parameters") fail(400, "output '" + on + "': unknown field '" + kv.key() + "'");
                bool binary = all_binary;
                if (o.contains("parameters")) {
                    const json& p = o["parameters"];
                    if (!p.is_object()) fail(400, "output '" + on + "': 'parameters' must be an object");
                    if (p.contains("binary_data")) {
                        if (!p["binary_data"].is_boolean()) fail(400, "output '" + on + "': binary_data must be a boolean");
                        binary = p["binary_data"].get<bool>();
                    }
                }
                ShmRef so;
                std::string serr;
                if (o.contains("parameters") && shm_.resolve(o["parameters"], "output '" + on + "'", SIZE_MAX, &so, &serr)) {
                    if (!serr.empty()) fail(400, serr);
                    if (so.byte_size < plan->outputs[idx].nbytes)
                        fail(400, "output '" + on + "': shared_memory_byte_size " + std::to_string(so.byte_size) + " is smaller than the output's " +
                                      std::to_string(plan->outputs[idx].nbytes) + " bytes (region '" + so.region->name + "')");
                    binary = false;
                }
                for (const Out& x : outs)
                    if (x.idx == idx) fail(400, "output '" + on + "' is requested twice");
                outs.push_back({idx, binary, so});
            }
        } else {
            for (size_t i = 0; i < plan->outputs.size(); ++i) outs.push_back({i, all_binary});
        }

        std::string& r = res.body;
        r.reserve(256);
        r += "{\"model_name\":";
        r += json(name).dump();
        r += ",\"model_version\":\"" + std::to_string(lv->version) + "\"";
        if (j.contains("id")) r += ",\"id\":" + json(id).dump(-1, ' ', false, json::error_handler_t::replace);
        r += ",\"outputs\":[";
        size_t bin_total = 0;
        for (size_t k = 0; k < outs.size(); ++k) {
            const IoDesc& d = plan->outputs[outs[k].idx];
            if (k) r += ',';
            r += "{\"name\":" + json(d.name).dump(-1, ' ', false, json::error_handler_t::replace);
            r += ",\"datatype\":\"";
            r += kserve_dtype(d.dtype);
            r += "\",\"shape\":" + shape_json(d.shape);
            if (const ShmRef& so = outs[k].shm; so.region) {
                std::memcpy(so.data(), s->output_data(outs[k].idx), d.nbytes);
                r += ",\"parameters\":{\"shared_memory_region\":" + json(so.region->name).dump() +
                     ",\"shared_memory_offset\":" + std::to_string(so.offset) + ",\"shared_memory_byte_size\":" + std::to_string(d.nbytes) + "}}";
            } else if (outs[k].binary) {
                r += ",\"parameters\":{\"binary_data_size\":" + std::to_string(d.nbytes) + "}}";
                bin_total += d.nbytes;
            } else {
                r += ",\"data\":";
                append_data_json(r, d.dtype, s->output_data(outs[k].idx), shape_numel(d.shape));
                r += '}';
            }
        }
        r += "]}";
        res.status = 200;
        if (bin_total) {
            res.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.size()));
            res.content_type = "application/octet-stream";
            r.reserve(r.size() + bin_total);
            for (const Out& o : outs)
                if (o.binary) r.append(static_cast<const char*>(s->output_data(o.idx)), plan->outputs[o.idx].nbytes);
        } else {
            res.content_type = "application/json";
        }
        if (cache) cache_store(*cache, ckey, id_json, res, lv->metrics);  // serve/cache.h
    }

    // ---------------------------------------------------------------- repository extension

    void repository(const HttpRequest& req, const std::vector<std::string>& seg, bool post, HttpResponse& res) {
        json body = json::object();
        auto parse_body = [&] {
            if (req.body.empty()) return;
            try {
                body = json::parse(req.body.begin(), req.body.end());
            } catch (const json::parse_error& e) {
                fail(400, std::string("malformed JSON in request: ") + e.what());
            }
            if (!body.is_object()) fail(400, "request must be a JSON object");
        };
        if (seg.size() == 3 && seg[2] == "index") {
            if (!post) {
                res.headers.emplace_back("Allow", "POST");
                fail(405, "use POST for /v2/repository/index");
            }
            parse_body();
            bool only_ready = false;
            if (body.contains("ready")) {
                if (!body["ready"].is_boolean()) fail(400, "'ready' must be a boolean");
                only_ready = body["ready"].get<bool>();
            }
            std::set<std::string> names;
            for (const auto& n : repo_.scan()) names.insert(n);
            for (const auto& [n, e] : repo_.models()) names.insert(n);
            json a = json::array();
            for (const auto& n : names) {
                ModelEntry* e = repo_.find(n);
                if (e && e->ready()) {
                    // Loaded versions, and (hot reload) versions whose last load failed, with why.
                    std::set<int64_t> vs;
                    for (const auto& [v, lv] : e->versions) vs.insert(v);
                    for (const auto& [v, why] : e->version_reason) vs.insert(v);
                    for (int64_t v : vs) {
                        bool ready = e->versions.count(v) > 0;
                        if (only_ready && !ready) continue;
                        auto why = e->version_reason.find(v);
                        std::string reason = why == e->version_reason.end() ? "" : (ready ? "reload failed (still serving the previous files): " : "") + why->second;
                        a.push_back({{"name", n}, {"version", std::to_string(v)}, {"state", ready ? "READY" : "UNAVAILABLE"}, {"reason", reason}});
                    }
                } else if (!only_ready) {
                    a.push_back({{"name", n}, {"state", "UNAVAILABLE"}, {"reason", e ? e->reason : "not loaded"}});
                }
            }
            return set_json(res, 200, a);
        }
        if (seg.size() == 5 && seg[2] == "models" && (seg[4] == "load" || seg[4] == "unload")) {
            if (!post) {
                res.headers.emplace_back("Allow", "POST");
                fail(405, "use POST for /v2/repository/models/{name}/" + seg[4]);
            }
            parse_body();
            for (auto it = body.begin(); it != body.end(); ++it) {
                if (it.key() != "parameters") fail(400, "unknown field '" + it.key() + "' (expected parameters)");
                if (!it.value().is_object()) fail(400, "'parameters' must be an object");
                for (auto p = it.value().begin(); p != it.value().end(); ++p)
                    if (p.key() != "unload_dependents") fail(400, "unsupported " + seg[4] + " parameter '" + p.key() + "'");
            }
            const std::string& name = seg[3];
            if (!Repository::valid_name(name)) fail(400, "invalid model name '" + name + "'");
            if (seg[4] == "load") {
                std::error_code ec;
                if (!std::filesystem::is_directory(std::filesystem::path(repo_.root()) / name, ec))
                    fail(404, "unknown model '" + name + "': no such folder in the repository");
                Status st = repo_.load(name);
                if (!st.ok()) fail(400, "failed to load '" + name + "': " + st.message());
                std::fprintf(stderr, "jiffy serve: loaded model '%s'\n", name.c_str());
            } else {
                ModelEntry* e = repo_.find(name);
                if (!e) fail(404, "unknown model '" + name + "'");
                repo_.unload(name);
                std::fprintf(stderr, "jiffy serve: unloaded model '%s'\n", name.c_str());
            }
            res.status = 200;
            res.body.clear();
            return;
        }
        fail(404, "unknown endpoint " + req.path);
    }

    // ---------------------------------------------------------------- metrics

    void metrics(HttpResponse& res) {
        std::string& s = res.body;
        res.content_type = "text/plain; version=0.0.4";
        const auto& all = repo_.all_metrics();
        auto lbl = [](const VersionMetrics& m) { return "model=\"" + m.model + "\",version=\"" + m.version + "\""; };
        auto ld = [](const std::atomic<uint64_t>& a) { return std::to_string(a.load(std::memory_order_relaxed)); };
        s += "# HELP jiffy_inference_requests_total Inference requests received (successes and failures).\n"
             "# TYPE jiffy_inference_requests_total counter\n";
        for (const auto& m : all) s += "jiffy_inference_requests_total{" + lbl(*m) + "} " + ld(m->requests) + "\n";
        s += "# HELP jiffy_inference_failures_total Inference requests answered with an error.\n"
             "# TYPE jiffy_inference_failures_total counter\n";
        for (const auto& m : all) s += "jiffy_inference_failures_total{" + lbl(*m) + "} " + ld(m->failures) + "\n";
        s += "# HELP jiffy_inference_compute_microseconds_total Time spent running the model.\n"
             "# TYPE jiffy_inference_compute_microseconds_total counter\n";
        for (const auto& m : all) s += "jiffy_inference_compute_microseconds_total{" + lbl(*m) + "} " + ld(m->compute_sum_us) + "\n";
        s += "# HELP jiffy_inference_request_duration_us Server-side request latency (parse, run, serialize), microseconds.\n"
             "# TYPE jiffy_inference_request_duration_us histogram\n";
        for (const auto& m : all) {
            uint64_t cum = 0;
            for (int b = 0; b <= kNumLatencyBuckets; ++b) {
                cum += m->bucket[b].load(std::memory_order_relaxed);
                s += "jiffy_inference_request_duration_us_bucket{" + lbl(*m) + ",le=\"" +
                     (b < kNumLatencyBuckets ? std::to_string(kLatencyBucketsUs[b]) : std::string("+Inf")) + "\"} " +
                     std::to_string(cum) + "\n";
            }
            s += "jiffy_inference_request_duration_us_sum{" + lbl(*m) + "} " + ld(m->latency_sum_us) + "\n";
            s += "jiffy_inference_request_duration_us_count{" + lbl(*m) + "} " + std::to_string(cum) + "\n";
        }
        // Response cache (serve/cache.h).
        const std::pair<const char*, std::atomic<uint64_t> VersionMetrics::*> cache_counters[] = {
            {"jiffy_cache_hits_total{level=\"l1\",", &VersionMetrics::cache_hits_l1},
            {"jiffy_cache_hits_total{level=\"l2\",", &VersionMetrics::cache_hits_l2},
            {"jiffy_cache_misses_total{", &VersionMetrics::cache_misses},
            {"jiffy_cache_evictions_total{", &VersionMetrics::cache_evictions},
            {"jiffy_cache_redis_errors_total{", &VersionMetrics::cache_redis_errors}};
        for (const auto& [metric, field] : cache_counters) {
            std::string base(metric, std::strchr(metric, '{'));
            if (base != "jiffy_cache_hits_total" || field == &VersionMetrics::cache_hits_l1)
                s += "# TYPE " + base + " counter\n";
            for (const auto& m : all) s += std::string(metric) + lbl(*m) + "} " + ld((*m).*field) + "\n";
        }
        s += "# HELP jiffy_model_ready Whether a model version is loaded and ready.\n# TYPE jiffy_model_ready gauge\n";
        for (const auto& m : all) {
            ModelEntry* e = repo_.find(m->model);
            bool r = e && e->versions.count(std::stoll(m->version));
            s += "jiffy_model_ready{" + lbl(*m) + "} " + (r ? "1" : "0") + "\n";
        }
        res.status = 200;
    }

    Repository& repo_;
    const Options& opt_;
    HttpServer& server_;
    ShmRegistry& shm_;
};

int64_t parse_num(const std::string& flag, const std::string& s, int64_t lo, int64_t hi) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end || errno || v < lo || v > hi)
        throw ArgError{"bad value for " + flag + ": '" + s + "' (expected an integer in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + ")"};
    return v;
}

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw ArgError{"missing value after " + a};
            return argv[++i];
        };
        if (a == "--model-repository") o.repo = next();
        else if (a == "--host") o.host = next();
        else if (a == "--http-port") o.port = int(parse_num(a, next(), 0, 65535));
        else if (a == "--metrics-port") o.metrics_port = int(parse_num(a, next(), 0, 65535));
        else if (a == "--max-body-bytes") o.limits.max_body_bytes = size_t(parse_num(a, next(), 1, int64_t(1) << 40));
        else if (a == "--max-header-bytes") o.limits.max_header_bytes = size_t(parse_num(a, next(), 256, 1 << 24));
        else if (a == "--read-timeout-ms") o.limits.read_timeout_ms = int(parse_num(a, next(), 1, 86400000));
        else if (a == "--idle-timeout-ms") o.limits.idle_timeout_ms = int(parse_num(a, next(), 1, 86400000));
        else if (a == "--drain-ms") o.drain_ms = int(parse_num(a, next(), 0, 86400000));
        else if (a == "--exit-timeout-ms") o.exit_timeout_ms = int(parse_num(a, next(), 0, 86400000));
        else if (a == "--max-memory") o.max_bytes = uint64_t(parse_num(a, next(), 1, INT64_MAX));
        else if (a == "--no-exit-on-error") o.exit_on_error = false;
        else if (a == "--cache-redis") {
            o.cache_redis = next();
            std::string h;
            int p;
            if (!RedisL2::parse_address(o.cache_redis, &h, &p)) throw ArgError{"bad value for --cache-redis: '" + o.cache_redis + "' (expected HOST:PORT)"};
        } else if (a == "--cache-redis-timeout-ms") o.cache_redis_timeout_ms = int(parse_num(a, next(), 1, 60000));
        else if (a == "--repository-poll-ms") o.repository_poll_ms = int(parse_num(a, next(), 0, 86400000));
        else if (a == "--local-ring") {
            o.local_ring = next();
            if (!Repository::valid_name(o.local_ring)) throw ArgError{"bad value for --local-ring: '" + o.local_ring + "' (letters, digits, _ - .)"};
        }
        else if (a == "-h" || a == "--help") throw ArgError{""};
        else throw ArgError{"unknown option '" + a + "' (see jiffy serve --help)"};
    }
    if (o.repo.empty()) throw ArgError{"missing --model-repository DIR"};
    return o;
}

}  // namespace

int serve_main(int argc, char** argv) {
    Options opt;
    try {
        opt = parse_args(argc, argv);
    } catch (const ArgError& e) {
        if (e.msg.empty()) {
            std::printf("%s", kUsage);
            return 0;
        }
        std::fprintf(stderr, "jiffy: error: %s\n", e.msg.c_str());
        return 2;
    }
    std::error_code ec;
    if (!std::filesystem::is_directory(opt.repo, ec)) {
        std::fprintf(stderr, "jiffy: error: model repository '%s' is not a folder\n", opt.repo.c_str());
        return 2;
    }
    // Signals arrive through a signalfd in the loop (no async-signal-safety concerns).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);

    Repository repo(opt.repo, opt.max_bytes);
    std::unique_ptr<RedisL2> l2;
    if (!opt.cache_redis.empty()) {
        std::string h;
        int p = 0;
        RedisL2::parse_address(opt.cache_redis, &h, &p);
        l2 = std::make_unique<RedisL2>(h, p, opt.cache_redis_timeout_ms);
        repo.set_cache_l2(l2.get());
    }
    for (const std::string& name : repo.scan()) {
        Status st = repo.load(name);
        if (!st.ok()) {
            std::fprintf(stderr, "jiffy%s: model '%s': %s\n", opt.exit_on_error ? ": error" : " serve: warning",
                         name.c_str(), st.message().c_str());
            if (opt.exit_on_error) return 2;
            continue;
        }
        ModelEntry* e = repo.find(name);
        for (const auto& [v, lv] : e->versions)
            std::fprintf(stderr, "jiffy serve: loaded model '%s' version %lld (%s)\n", name.c_str(), (long long)v,
                         lv->fixed ? "plan compiled for fixed shapes" : "plans compiled per request shape");
    }

    HttpServer server(opt.limits);
    std::string err;
    int port = 0;
    if (server.listen(opt.host, opt.port, &port, &err) < 0) {
        std::fprintf(stderr, "jiffy: error: %s\n", err.c_str());
        return 2;
    }
    int mport = -1;
    if (opt.metrics_port >= 0 && server.listen(opt.host, opt.metrics_port, &mport, &err) < 0) {
        std::fprintf(stderr, "jiffy: error: %s\n", err.c_str());
        return 2;
    }
    bool stopping = false;
    server.watch(sfd, [&] {
        signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == ssize_t(sizeof si)) {
            if (!stopping) {
                stopping = true;
                std::fprintf(stderr, "jiffy serve: signal %u: not ready; finishing requests in flight\n", si.ssi_signo);
                server.drain(opt.drain_ms, opt.exit_timeout_ms);
            } else {
                server.stop();  // a second signal: exit now
            }
        }
    });
    ShmRegistry shm;
    KServeHandler handler(repo, opt, server, shm);
    // Hot reload (serve/reload.h): a background thread loads and warms up; the swap runs here.
    std::unique_ptr<Reloader> reloader;
    if (opt.repository_poll_ms > 0) reloader = std::make_unique<Reloader>(repo, server, opt.repository_poll_ms);
    // Local clients over a shared-memory ring (serve/shm_ring.h, jiffy/client.h).
    std::unique_ptr<RingServer> ring;
    if (!opt.local_ring.empty()) {
        ring = std::make_unique<RingServer>(repo, opt.max_bytes);
        Status st = ring->start(opt.local_ring);
        if (!st.ok()) {
            std::fprintf(stderr, "jiffy: error: --local-ring: %s\n", st.message().c_str());
            return 2;
        }
    }
    std::printf("jiffy serve: listening on http://%s:%d\n", opt.host.c_str(), port);
    if (mport >= 0) std::printf("jiffy serve: metrics on http://%s:%d/metrics\n", opt.host.c_str(), mport);
    std::fflush(stdout);
    server.run(handler);
    reloader.reset();
    ring.reset();
    std::fprintf(stderr, "jiffy serve: stopped\n");
    close(sfd);
    return 0;
}

}  // namespace jiffy::serve

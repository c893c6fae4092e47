// `jiffy serve`: argument parsing, the KServe v2 REST handler, metrics, signals.
#include "serve/serve.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>
#include <utility>

#include "serve/batcher.h"
#include "serve/cache.h"
#include "serve/http.h"
#include "serve/json_fast.h"
#include "serve/metrics.h"
#include "serve/realtime.h"
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
    "  --local-ring NAME       serve local clients over a shared-memory ring (jiffy/client.h)\n"
    "  --realtime              run the I/O thread and the ring thread SCHED_FIFO (warns once if not permitted)\n"
    "  --realtime-priority N   their SCHED_FIFO priority, 1..99 (default 10; implies --realtime)\n";

struct Options {
    std::string repo, host = "127.0.0.1";
    int port = 8000, metrics_port = -1;
    HttpLimits limits;
    int drain_ms = 500, exit_timeout_ms = 30000;
    uint64_t max_bytes = uint64_t(4) << 30;
    bool exit_on_error = true;
    std::string cache_redis, local_ring;
    int cache_redis_timeout_ms = 20, repository_poll_ms = 0;
    bool realtime = false;
    int realtime_priority = 10;
};

struct ArgError {
    std::string msg;
};

int64_t now_us() { return mono_us(); }

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
        repo_.reap();  // versions retired by a reload/unload whose worker has drained
        // A shared_ptr: a worker's job must not outlive its version (reload swaps on this thread,
        // and a replaced version is retired until its queue drains; serve/repository.h).
        std::shared_ptr<LoadedVersion> lv = find_version(e, version, true);
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
        try {
            infer(req, name, e, lv, t0, res);
        } catch (const BadRequest&) {
            lv->metrics->observe(uint64_t(now_us() - t0), false);
            throw;
        }
        if (!res.deferred) lv->metrics->observe(uint64_t(now_us() - t0), res.status == 200);  // else the worker does
    }

    std::shared_ptr<LoadedVersion> find_version(ModelEntry* e, const std::string& v, bool throw_404) {
        if (v.empty()) return e->versions.empty() ? nullptr : e->versions.rbegin()->second;
        bool digits = !v.empty() && v.size() <= 18 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits) {
            auto it = e->versions.find(std::stoll(v));
            if (it != e->versions.end()) return it->second;
        }
        if (throw_404) fail(404, "unknown version '" + v + "' of model '" + e->name + "'");
        return nullptr;
    }

    // ---------------------------------------------------------------- infer

    void infer(const HttpRequest& req, const std::string& name, ModelEntry* e, const std::shared_ptr<LoadedVersion>& lvp,
               int64_t t0, HttpResponse& res) {
        LoadedVersion* lv = lvp.get();
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
        InferRequest rq;
        RequestError err;
        InferSchema schema{&name, &lv->inputs, &lv->outputs, &lv->shapes};
        if (!parse_infer_request(head, bin, schema, &rq, &err)) fail(err.status, err.msg);
        if (const std::string* h = req.header("timeout"); h && rq.timeout_us == 0) {
            // Triton-style request header, microseconds (the `timeout` parameter wins).
            if (h->empty() || h->size() > 15 || !std::all_of(h->begin(), h->end(), [](char c) { return c >= '0' && c <= '9'; }))
                fail(400, "invalid Timeout header '" + *h + "' (expected microseconds)");
            rq.timeout_us = std::stoll(*h);
        }
        // System shared memory (serve/shm.h): inputs are copied out of their region now (the
        // client may rewrite it once answered; a queued request must not see that), outputs are
        // written into theirs by whichever thread runs the request.
        bool shm_out = false;
        for (InferInput& in : rq.inputs) {
            if (in.shm.region.empty()) continue;
            ShmRef ref;
            std::string serr;
            if (!shm_.check(in.shm.region, in.shm.offset, in.shm.byte_size, "input '" + in.meta->name + "'", in.nbytes, &ref, &serr))
                fail(400, serr);
            in.storage.assign(ref.data(), ref.data() + in.nbytes);
            in.data = in.storage.data();
        }
        for (InferOutputSpec& o : rq.outputs) {
            if (o.shm.region.empty()) continue;
            ShmRef ref;
            std::string serr;
            if (!shm_.check(o.shm.region, o.shm.offset, o.shm.byte_size, "output '" + lv->outputs[o.idx].name + "'", SIZE_MAX,
                            &ref, &serr))
                fail(400, serr);
            o.shm_region = std::move(ref.region);
            shm_out = true;
        }
        // Response cache (serve/cache.h), looked up before any queue: a hit never waits for the
        // worker or counts against admission. Key: model, version, files, inputs, requested outputs.
        // Responses that write shared memory are not cached (the side effect is the point).
        std::shared_ptr<ResponseCache> cache = shm_out ? nullptr : lv->cache;
        CacheKey ckey;
        std::string id_json;
        if (cache) {
            if (rq.has_id) append_json_string(id_json, rq.id);  // the writer's exact text (spliced on a hit)
            KeyHasher h;
            h.str(name);
            h.u64(uint64_t(lv->version));
            h.u64(lv->fingerprint);
            for (const InferInput& t : rq.inputs) {
                h.str(t.meta->name);
                h.u64(uint64_t(t.meta->dtype));
                h.u64(t.shape.size());
                h.bytes(t.shape.data(), t.shape.size() * sizeof(int64_t));
                h.bytes(t.data, t.nbytes);
            }
            h.u64(rq.has_outputs);
            h.u64(rq.outputs.size());
            for (const InferOutputSpec& o : rq.outputs) {
                h.u64(o.idx);
                h.u64(o.binary);
            }
            ckey = h.digest();
            if (cache_respond(*cache, ckey, id_json, res, lv->metrics)) return;
        }
        const SchedConfig& sc = e->config.sched;
        if (!sc.wants_worker()) {
            // Inline on the I/O thread: no hand-off at all (docs/serving.md: the fastest path for
            // microsecond models; no queue, so no batching or admission control).
            const InferRequest* p = &rq;
            int64_t rows = 1;
            execute(name, lv, &p, &rows, 1, false, opt_.max_bytes, &res);
            if (cache && res.status == 200) cache_store(*cache, ckey, id_json, res, lv->metrics);
            return;
        }
        if (!lv->exec) lv->exec = std::make_shared<Executor>(name, lv, sc, opt_.max_bytes, &server_);
        auto job = std::make_unique<Job>();
        if (!lv->exec->check(rq, &job->rows, &err)) fail(err.status, err.msg);
        for (InferInput& in : rq.inputs)  // the body is gone once handle() returns
            if (in.storage.empty() || in.data != in.storage.data()) {
                in.storage.assign(in.data, in.data + in.nbytes);
                in.data = in.storage.data();
            }
        job->rq = std::move(rq);
        job->t0_us = t0;
        job->deadline_us = job->rq.timeout_us > 0 ? t0 + job->rq.timeout_us : 0;
        job->token = req.token;
        job->cache = std::move(cache);
        job->cache_key = ckey;
        job->id_json = std::move(id_json);
        if (!lv->exec->submit(job)) {
            lv->metrics->rejections.fetch_add(1, std::memory_order_relaxed);
            res.headers.emplace_back("Retry-After", std::to_string(lv->exec->retry_after_s()));
            fail(503, "model '" + name + "' is overloaded: its queue is at the admission limit of " +
                          std::to_string(lv->exec->limit()) + " requests; retry later");
        }
        res.deferred = true;
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
        auto counter = [&](const char* name, const char* type, const char* help, auto get) {
            s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
            for (const auto& m : all) s += std::string(name) + "{" + lbl(*m) + "} " + std::to_string(get(*m)) + "\n";
        };
        auto ld = [](const auto& a) { return a.load(std::memory_order_relaxed); };
        counter("jiffy_inference_requests_total", "counter", "Inference requests received (successes and failures).",
                [&](const VersionMetrics& m) { return ld(m.requests); });
        counter("jiffy_inference_failures_total", "counter", "Inference requests answered with an error (rejections included).",
                [&](const VersionMetrics& m) { return ld(m.failures); });
        counter("jiffy_inference_rejections_total", "counter", "Requests refused by admission control (503) before queueing.",
                [&](const VersionMetrics& m) { return ld(m.rejections); });
        counter("jiffy_inference_timeouts_total", "counter", "Requests whose timeout expired in the queue (not run).",
                [&](const VersionMetrics& m) { return ld(m.timeouts); });
        counter("jiffy_inference_compute_microseconds_total", "counter", "Time spent running the model.",
                [&](const VersionMetrics& m) { return ld(m.compute_sum_us); });
        counter("jiffy_queue_depth", "gauge", "Requests waiting in the model's queue.",
                [&](const VersionMetrics& m) { return ld(m.queue_depth); });
        counter("jiffy_queue_limit", "gauge", "Admission controller's current queue depth limit (0: inline, no queue).",
                [&](const VersionMetrics& m) { return ld(m.queue_limit); });
        auto hist = [&](const char* name, const char* help, auto get) {
            s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
            for (const auto& m : all) {
                const auto& h = get(*m);
                uint64_t cum = 0;
                for (int b = 0; b <= h.size(); ++b) {
                    cum += h.bucket[b].load(std::memory_order_relaxed);
                    s += std::string(name) + "_bucket{" + lbl(*m) + ",le=\"" +
                         (b < h.size() ? std::to_string(h.bound(b)) : std::string("+Inf")) + "\"} " + std::to_string(cum) + "\n";
                }
                s += std::string(name) + "_sum{" + lbl(*m) + "} " + std::to_string(ld(h.sum)) + "\n";
                s += std::string(name) + "_count{" + lbl(*m) + "} " + std::to_string(cum) + "\n";
            }
        };
        hist("jiffy_inference_request_duration_us", "Server-side request latency (parse, queue, run, serialize), microseconds.",
             [](const VersionMetrics& m) -> const LatencyHistogram& { return m.total; });
        hist("jiffy_inference_queue_duration_us", "Time from the parsed request until the worker takes it, microseconds.",
             [](const VersionMetrics& m) -> const LatencyHistogram& { return m.queue; });
        hist("jiffy_inference_compute_duration_us", "Session::run per batch, microseconds.",
             [](const VersionMetrics& m) -> const LatencyHistogram& { return m.compute; });
        hist("jiffy_inference_batch_size", "Rows per model run (1 without batching).",
             [](const VersionMetrics& m) -> const BatchHistogram& { return m.batch; });
        // Response cache (serve/cache.h): hits by level (l1 in process, l2 Redis), misses (computed),
        // entries evicted by the byte bound, Redis commands that failed (counted as misses).
        s += "# HELP jiffy_cache_hits_total Requests answered from the response cache (level l1: in process, l2: Redis).\n"
             "# TYPE jiffy_cache_hits_total counter\n";
        for (const auto& m : all) {
            s += "jiffy_cache_hits_total{level=\"l1\"," + lbl(*m) + "} " + std::to_string(ld(m->cache_hits_l1)) + "\n";
            s += "jiffy_cache_hits_total{level=\"l2\"," + lbl(*m) + "} " + std::to_string(ld(m->cache_hits_l2)) + "\n";
        }
        counter("jiffy_cache_misses_total", "counter", "Cache lookups that missed (the request was computed).",
                [&](const VersionMetrics& m) { return ld(m.cache_misses); });
        counter("jiffy_cache_evictions_total", "counter", "Cache entries evicted by the byte bound.",
                [&](const VersionMetrics& m) { return ld(m.cache_evictions); });
        counter("jiffy_cache_redis_errors_total", "counter", "Redis commands that failed (counted as misses).",
                [&](const VersionMetrics& m) { return ld(m.cache_redis_errors); });
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
        else if (a == "--realtime") o.realtime = true;
        else if (a == "--realtime-priority") {
            o.realtime_priority = int(parse_num(a, next(), 1, 99));
            o.realtime = true;
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
    // --realtime: SCHED_FIFO for the I/O thread (here) and the ring thread; one warning if refused.
    std::atomic<bool> rt_warned{false};
    auto realtime = [&](const char* who) {
        std::string why;
        if (set_thread_fifo(opt.realtime_priority, &why)) {
            std::fprintf(stderr, "jiffy serve: %s thread runs SCHED_FIFO priority %d\n", who, opt.realtime_priority);
        } else if (!rt_warned.exchange(true)) {
            std::fprintf(stderr, "jiffy serve: warning: --realtime: SCHED_FIFO not permitted (%s); running SCHED_OTHER\n", why.c_str());
        }
    };
    std::unique_ptr<RingServer> ring;
    if (!opt.local_ring.empty()) {
        ring = std::make_unique<RingServer>(repo, opt.max_bytes);
        if (opt.realtime) ring->on_thread_start([&] { realtime("ring"); });
        Status st = ring->start(opt.local_ring);
        if (!st.ok()) {
            std::fprintf(stderr, "jiffy: error: --local-ring: %s\n", st.message().c_str());
            return 2;
        }
    }
    // Before "listening": whoever waits for that line finds the I/O thread's policy already set.
    if (opt.realtime) realtime("I/O");
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

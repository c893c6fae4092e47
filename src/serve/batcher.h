// Running inference for the server: inline on the I/O thread (run_inline), or on a model
// version's own worker thread fed by a bounded queue (Executor) that forms dynamic batches —
// requests from different connections concatenated along dim 0, run as one plan compiled for the
// batch's size (the engine caches a plan per shape), outputs split back per request. The queue's
// depth limit comes from an AdmissionController; a request over it is refused at once.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/admission.h"
#include "serve/cache.h"
#include "serve/http.h"
#include "serve/json_fast.h"
#include "serve/repository.h"

namespace jiffy::serve {

int64_t mono_us();

// Sets an error response: {"error": msg}.
void set_error_response(HttpResponse& res, int status, const std::string& msg);

// Runs `n` requests as one plan: concatenated along dim 0 when `batched` (rows[i] rows each),
// else n must be 1. Fills res[0..n). Caller owns the version's sessions (I/O thread or worker).
void execute(const std::string& model, LoadedVersion* lv, const InferRequest* const* rqs, const int64_t* rows, size_t n,
             bool batched, uint64_t max_bytes, HttpResponse* res);

struct Job {
    InferRequest rq;  // inputs own their bytes (storage)
    int64_t rows = 1;
    int64_t t0_us = 0;        // request parsed (for the total latency)
    int64_t deadline_us = 0;  // 0: none (the `timeout` parameter)
    uint64_t token = 0;       // HttpServer::complete
    // Response cache (serve/cache.h): a miss is stored here once computed, on the worker.
    std::shared_ptr<ResponseCache> cache;
    CacheKey cache_key;
    std::string id_json;
};

// The worker of one model version (LoadedVersion::exec). It keeps a raw pointer to its version:
// the version owns it, and outlives it (a replaced version is retired, drained, then dropped).
class Executor {
public:
    Executor(std::string model, LoadedVersion* lv, const SchedConfig& cfg, uint64_t max_bytes, HttpServer* server);
    ~Executor();  // answers queued requests 503, joins the worker
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    // I/O thread. Checks the request's batch dim (batched models): false with *err (400).
    bool check(const InferRequest& rq, int64_t* rows, RequestError* err) const;
    // I/O thread. Queues the job, or returns false when the queue is at its limit (the caller
    // answers 503 at once; the job is left untouched).
    bool submit(std::unique_ptr<Job>& job);
    int64_t limit() const { return adm_.limit(); }
    // I/O thread, when the version is replaced or unloaded: no new jobs; the worker runs what is
    // queued, then exits (finished()). The version must stay alive until then (Repository keeps
    // it in its retiring list; serve/repository.h).
    void retire();
    bool finished() const { return finished_.load(std::memory_order_acquire); }
    // Seconds a rejected client should wait before retrying (Retry-After).
    int retry_after_s() const;

private:
    void worker();
    void run_batch(std::vector<std::unique_ptr<Job>>& b);

    std::string model_;
    LoadedVersion* lv_;
    SchedConfig cfg_;
    uint64_t max_bytes_;
    HttpServer* server_;
    VersionMetrics* m_;
    AdmissionController adm_;
    int64_t hard_cap_;

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Job>> q_;
    std::atomic<int64_t> depth_{0}, rows_{0};
    std::atomic<bool> sleeping_{false};
    std::atomic<bool> stop_{false};
    std::atomic<bool> retiring_{false}, finished_{false};
    std::atomic<int64_t> avg_batch_us_{0};
    std::thread th_;
};

}  // namespace jiffy::serve

#include "serve/batcher.h"
#include "serve/realtime.h"

#include "serve/cache.h"
#include "serve/shm.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <sched.h>

namespace jiffy::serve {

namespace {

constexpr int64_t kWorkerSpinUs = 50;  // poll this long for the next request before sleeping

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

std::string shape_json(const Shape& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
}

struct ExecError {
    int status;
    std::string msg;
};

// The response for rows [row0, row0 + rows) of a batch of `total` rows (total 0: not batched).
void build_response(const std::string& model, const LoadedVersion& lv, const InferRequest& rq, const Plan& plan,
                    Session& s, int64_t row0, int64_t rows, int64_t total, HttpResponse& res) {
    // Shared memory outputs must fit their region slice (checked per request: a batch's other
    // requests are unaffected).
    for (const InferOutputSpec& o : rq.outputs) {
        if (!o.shm_region) continue;
        const IoDesc& d = plan.outputs[o.idx];
        size_t nbytes = total > 0 ? d.nbytes / size_t(total) * size_t(rows) : d.nbytes;
        if (o.shm.byte_size < nbytes) {
            set_error_response(res, 400, "output '" + d.name + "': shared_memory_byte_size " + std::to_string(o.shm.byte_size) +
                                             " is smaller than the output's " + std::to_string(nbytes) + " bytes (region '" +
                                             o.shm_region->name + "')");
            return;
        }
    }
    std::string& r = res.body;
    r.clear();
    r.reserve(256);
    r += "{\"model_name\":";
    append_json_string(r, model);
    r += ",\"model_version\":\"" + std::to_string(lv.version) + "\"";
    if (rq.has_id) {
        r += ",\"id\":";
        append_json_string(r, rq.id);
    }
    r += ",\"outputs\":[";
    size_t bin_total = 0;
    struct Slice {
        const char* p;
        size_t n;
    };
    Slice slices[64];
    std::vector<Slice> many;
    Slice* sl = rq.outputs.size() <= 64 ? slices : (many.resize(rq.outputs.size()), many.data());
    for (size_t k = 0; k < rq.outputs.size(); ++k) {
        const IoDesc& d = plan.outputs[rq.outputs[k].idx];
        Shape shape = d.shape;
        const char* p = static_cast<const char*>(s.output_data(rq.outputs[k].idx));
        size_t nbytes = d.nbytes;
        if (total > 0) {
            if (shape.empty() || shape[0] != total)
                throw ExecError{500, "output '" + d.name + "' has shape " + shape_json(shape) + ", not the batch size " +
                                         std::to_string(total) + " in dim 0 (model '" + model + "' cannot batch)"};
            size_t row = d.nbytes / size_t(total);
            p += size_t(row0) * row;
            nbytes = size_t(rows) * row;
            shape[0] = rows;
        }
        sl[k] = {p, nbytes};
        if (k) r += ',';
        r += "{\"name\":";
        append_json_string(r, d.name);
        r += ",\"datatype\":\"";
        r += kserve_dtype(d.dtype);
        r += "\",\"shape\":" + shape_json(shape);
        if (const InferOutputSpec& o = rq.outputs[k]; o.shm_region) {
            std::memcpy(o.shm_region->base + o.shm.offset, p, nbytes);
            r += ",\"parameters\":{\"shared_memory_region\":";
            append_json_string(r, o.shm_region->name);
            r += ",\"shared_memory_offset\":" + std::to_string(o.shm.offset) +
                 ",\"shared_memory_byte_size\":" + std::to_string(nbytes) + "}}";
        } else if (rq.outputs[k].binary) {
            r += ",\"parameters\":{\"binary_data_size\":" + std::to_string(nbytes) + "}}";
            bin_total += nbytes;
        } else {
            r += ",\"data\":";
            append_data_json(r, d.dtype, p, int64_t(nbytes / dtype_size(d.dtype)));
            r += '}';
        }
    }
    r += "]}";
    res.status = 200;
    if (bin_total) {
        res.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.size()));
        res.content_type = "application/octet-stream";
        r.reserve(r.size() + bin_total);
        for (size_t k = 0; k < rq.outputs.size(); ++k)
            if (rq.outputs[k].binary) r.append(sl[k].p, sl[k].n);
    } else {
        res.content_type = "application/json";
    }
}

}  // namespace

int64_t mono_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void set_error_response(HttpResponse& res, int status, const std::string& msg) {
    res.status = status;
    res.content_type = "application/json";
    res.body = "{\"error\":";
    append_json_string(res.body, msg);
    res.body += '}';
}

void execute(const std::string& model, LoadedVersion* lv, const InferRequest* const* rqs, const int64_t* rows, size_t n,
             bool batched, uint64_t max_bytes, HttpResponse* res) {
    try {
        const InferRequest& head = *rqs[0];
        int64_t total = 0;
        for (size_t j = 0; j < n; ++j) total += rows[j];
        std::shared_ptr<const Plan> plan = batched ? nullptr : lv->fixed;
        if (!plan) {
            CompileOptions opt;
            opt.max_bytes = max_bytes;
            ValueMap values;
            for (const InferInput& t : head.inputs) {
                Shape sh = t.shape;
                if (batched) sh[0] = total;
                opt.input_shapes[t.meta->name] = sh;
                if (!batched && (dtype_is_int(t.meta->dtype) || t.meta->dtype == DType::kBool) && shape_numel(t.shape) <= 64) {
                    auto v = std::make_shared<Tensor>(t.meta->dtype, t.shape);
                    std::memcpy(v->data(), t.data, t.nbytes);
                    values[t.meta->name] = v;
                }
            }
            Status st = lv->model->compile(opt, values, &plan);
            if (!st.ok())
                throw ExecError{st.code() == Code::kInternal ? 500 : 400,
                                "cannot run model '" + model + "' for these inputs: " + st.message()};
        }
        Session* s = lv->session_for(plan);
        for (size_t i = 0; i < plan->inputs.size(); ++i) {
            const IoDesc& d = plan->inputs[i];
            size_t k = 0;
            while (k < head.inputs.size() && head.inputs[k].meta->name != d.name) ++k;
            if (k == head.inputs.size()) throw ExecError{500, "internal: plan input '" + d.name + "' is not in the request"};
            uint8_t* dst = static_cast<uint8_t*>(s->input_data(i));
            size_t off = 0;
            for (size_t j = 0; j < n; ++j) {
                const InferInput& t = rqs[j]->inputs[k];
                if (off + t.nbytes > d.nbytes) break;
                std::memcpy(dst + off, t.data, t.nbytes);
                off += t.nbytes;
            }
            if (off != d.nbytes) throw ExecError{500, "internal: plan input '" + d.name + "' does not match the request"};
        }
        for (const auto& [idx, v] : plan->frozen_values)
            if (std::memcmp(s->input_data(idx), v->data(), v->nbytes()) != 0)
                throw ExecError{500, "internal: input '" + plan->inputs[idx].name + "' differs from the value its plan was compiled for"};
        int64_t c0 = mono_us();
        Status st = s->run();
        uint64_t cu = uint64_t(mono_us() - c0);
        lv->metrics->compute_sum_us.fetch_add(cu, std::memory_order_relaxed);
        lv->metrics->compute.observe(cu);
        lv->metrics->batch.observe(uint64_t(total > 0 ? total : 1));
        if (!st.ok()) throw ExecError{st.code() == Code::kInvalid ? 400 : 500, "inference failed: " + st.message()};
        int64_t row0 = 0;
        for (size_t j = 0; j < n; ++j) {
            build_response(model, *lv, *rqs[j], *plan, *s, row0, rows[j], batched ? total : 0, res[j]);
            row0 += rows[j];
        }
    } catch (const ExecError& e) {
        for (size_t j = 0; j < n; ++j) {
            res[j] = HttpResponse{};
            set_error_response(res[j], e.status, e.msg);
        }
    }
}

// ------------------------------------------------------------------ Executor

Executor::Executor(std::string model, LoadedVersion* lv, const SchedConfig& cfg, uint64_t max_bytes, HttpServer* server)
    : model_(std::move(model)),
      lv_(lv),
      cfg_(cfg),
      max_bytes_(max_bytes),
      server_(server),
      m_(lv->metrics),
      adm_(cfg.latency_target_us, cfg.max_queue_size > 0 ? cfg.max_queue_size : 1024,
           std::max<int64_t>(1, cfg.max_batch_size)),
      hard_cap_(cfg.max_queue_size > 0 ? cfg.max_queue_size : 1024) {
    m_->queue_limit.store(adm_.limit(), std::memory_order_relaxed);
    th_ = std::thread([this] { worker(); });
}

Executor::~Executor() {
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_.store(true);
    }
    cv_.notify_all();
    th_.join();
    for (auto& j : q_) {
        HttpResponse r;
        set_error_response(r, 503, "model '" + model_ + "' was unloaded while the request was queued");
        m_->observe(uint64_t(mono_us() - j->t0_us), false);
        server_->complete(j->token, std::move(r));
    }
    m_->queue_depth.fetch_sub(int64_t(q_.size()), std::memory_order_relaxed);
}

bool Executor::check(const InferRequest& rq, int64_t* rows, RequestError* err) const {
    *rows = 1;
    if (cfg_.max_batch_size <= 0) return true;
    int64_t b = -1;
    for (const InferInput& t : rq.inputs) {
        if (t.shape.empty()) {
            *err = {400, "input '" + t.meta->name + "': model '" + model_ + "' batches along dim 0 but the shape is a scalar"};
            return false;
        }
        if (b >= 0 && t.shape[0] != b) {
            *err = {400, "input '" + t.meta->name + "': batch dim " + std::to_string(t.shape[0]) + " differs from the other inputs' " +
                             std::to_string(b)};
            return false;
        }
        b = t.shape[0];
    }
    if (b < 1 || b > cfg_.max_batch_size) {
        *err = {400, "batch dim " + std::to_string(b) + " of the inputs is outside 1.." + std::to_string(cfg_.max_batch_size) +
                         " (max_batch_size of model '" + model_ + "')"};
        return false;
    }
    *rows = b;
    return true;
}

int Executor::retry_after_s() const {
    // Time to drain the present queue, at least a second (Retry-After counts whole seconds).
    int64_t us = depth_.load(std::memory_order_relaxed) * std::max<int64_t>(1, avg_batch_us_.load(std::memory_order_relaxed));
    return int(std::clamp<int64_t>((us + 999999) / 1000000, 1, 60));
}

void Executor::retire() {
    {
        std::lock_guard<std::mutex> g(mu_);
        retiring_.store(true);
    }
    cv_.notify_all();
}

bool Executor::submit(std::unique_ptr<Job>& job) {
    if (retiring_.load(std::memory_order_relaxed)) return false;
    int64_t lim = std::min(adm_.limit(), hard_cap_);
    if (depth_.load(std::memory_order_relaxed) >= lim) return false;
    {
        std::lock_guard<std::mutex> g(mu_);
        rows_.fetch_add(job->rows, std::memory_order_relaxed);
        q_.push_back(std::move(job));
        depth_.fetch_add(1, std::memory_order_seq_cst);
    }
    m_->queue_depth.fetch_add(1, std::memory_order_relaxed);
    if (sleeping_.load(std::memory_order_seq_cst)) cv_.notify_one();
    return true;
}

void Executor::worker() {
    drop_realtime();  // made by a --realtime I/O thread: computing threads stay SCHED_OTHER
    std::vector<std::unique_ptr<Job>> batch;
    const bool batching = cfg_.dynamic_batching && cfg_.max_batch_size > 1;
    auto preferred = [&](int64_t r) {
        return std::find(cfg_.preferred_batch_sizes.begin(), cfg_.preferred_batch_sizes.end(), r) !=
               cfg_.preferred_batch_sizes.end();
    };
    while (!stop_.load(std::memory_order_relaxed)) {
        // Wait for work: spin briefly (a futex wake costs ~20 us here), then sleep.
        if (depth_.load(std::memory_order_acquire) == 0) {
            int64_t t0 = mono_us();
            // sched_yield, not a bare pause loop: on a 2-core box the client and the I/O thread
            // need the core more than this spin does (a pause-only spin tripled the p50).
            while (depth_.load(std::memory_order_acquire) == 0 && mono_us() - t0 < kWorkerSpinUs) sched_yield();
            if (depth_.load(std::memory_order_acquire) == 0) {
                std::unique_lock<std::mutex> lk(mu_);
                sleeping_.store(true, std::memory_order_seq_cst);
                cv_.wait(lk, [&] { return stop_.load() || retiring_.load() || depth_.load(std::memory_order_seq_cst) > 0; });
                sleeping_.store(false, std::memory_order_relaxed);
            }
            if (stop_.load()) break;
            if (depth_.load(std::memory_order_acquire) == 0) {
                if (retiring_.load()) break;  // drained: the version was replaced or unloaded
                continue;
            }
        }
        // A batch: wait up to max_queue_delay_us after the oldest request for more rows, unless
        // the rows queued already fill max_batch_size or make a preferred size.
        if (batching) {
            int64_t first;
            {
                std::lock_guard<std::mutex> g(mu_);
                first = q_.front()->t0_us;
            }
            int64_t until = first + cfg_.max_queue_delay_us;
            for (;;) {
                int64_t r = rows_.load(std::memory_order_acquire);
                if (r >= cfg_.max_batch_size || preferred(r) || stop_.load() || retiring_.load()) break;
                int64_t now = mono_us();
                if (now >= until) break;
                if (until - now > 200) {
                    std::unique_lock<std::mutex> lk(mu_);
                    sleeping_.store(true, std::memory_order_seq_cst);
                    cv_.wait_for(lk, std::chrono::microseconds(std::min<int64_t>(until - now - 100, 1000)));
                    sleeping_.store(false, std::memory_order_relaxed);
                } else {
                    for (int i = 0; i < 32; ++i) cpu_relax();
                }
            }
        }
        batch.clear();
        int64_t now = mono_us();
        {
            std::lock_guard<std::mutex> g(mu_);
            int64_t total = 0;
            while (!q_.empty()) {
                Job& j = *q_.front();
                if (!batch.empty()) {
                    if (!batching || total + j.rows > cfg_.max_batch_size) break;
                    // Same trailing dims as the batch's first request, or it waits for the next.
                    const InferRequest& h = batch.front()->rq;
                    bool same = true;
                    for (size_t i = 0; same && i < h.inputs.size(); ++i)
                        same = std::equal(h.inputs[i].shape.begin() + 1, h.inputs[i].shape.end(), j.rq.inputs[i].shape.begin() + 1,
                                          j.rq.inputs[i].shape.end());
                    if (!same) break;
                }
                total += j.rows;
                batch.push_back(std::move(q_.front()));
                q_.pop_front();
                if (!batching) break;
            }
            depth_.fetch_sub(int64_t(batch.size()), std::memory_order_relaxed);
            rows_.fetch_sub(total, std::memory_order_relaxed);
        }
        m_->queue_depth.fetch_sub(int64_t(batch.size()), std::memory_order_relaxed);
        // Requests whose timeout expired in the queue fail without running.
        size_t keep = 0;
        for (auto& j : batch) {
            m_->queue.observe(uint64_t(now - j->t0_us));
            if (j->deadline_us && now >= j->deadline_us) {
                HttpResponse r;
                set_error_response(r, 504, "request timeout of " + std::to_string(j->deadline_us - j->t0_us) +
                                               " us expired after " + std::to_string(now - j->t0_us) +
                                               " us in the queue of model '" + model_ + "'; not run");
                m_->timeouts.fetch_add(1, std::memory_order_relaxed);
                m_->observe(uint64_t(now - j->t0_us), false);
                server_->complete(j->token, std::move(r));
                continue;
            }
            batch[keep++] = std::move(j);
        }
        batch.resize(keep);
        if (!batch.empty()) run_batch(batch);
    }
    batch.clear();
    finished_.store(true, std::memory_order_release);
}

void Executor::run_batch(std::vector<std::unique_ptr<Job>>& b) {
    size_t n = b.size();
    std::vector<const InferRequest*> rqs(n);
    std::vector<int64_t> rows(n);
    std::vector<HttpResponse> res(n);
    for (size_t j = 0; j < n; ++j) {
        rqs[j] = &b[j]->rq;
        rows[j] = b[j]->rows;
    }
    int64_t t0 = mono_us();
    execute(model_, lv_, rqs.data(), rows.data(), n, cfg_.max_batch_size > 0, max_bytes_, res.data());
    int64_t now = mono_us();
    int64_t prev = avg_batch_us_.load(std::memory_order_relaxed);
    avg_batch_us_.store(prev ? (prev * 7 + (now - t0)) / 8 : now - t0, std::memory_order_relaxed);
    for (size_t j = 0; j < n; ++j) {
        bool ok = res[j].status == 200;
        if (ok && b[j]->cache) cache_store(*b[j]->cache, b[j]->cache_key, b[j]->id_json, res[j], m_);  // serve/cache.h
        m_->observe(uint64_t(now - b[j]->t0_us), ok);
        adm_.record(now - b[j]->t0_us, now, now - t0, int64_t(n));
        server_->complete(b[j]->token, std::move(res[j]));
    }
    m_->queue_limit.store(adm_.limit(), std::memory_order_relaxed);
}

}  // namespace jiffy::serve

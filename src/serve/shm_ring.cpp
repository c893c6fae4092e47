#include "serve/shm_ring.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <string_view>

#include "serve/repository.h"

namespace jiffy::serve {

namespace ring {

int futex_wait(std::atomic<uint32_t>* w, uint32_t expected, int timeout_ms) {
    timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    return int(syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAIT, expected, timeout_ms >= 0 ? &ts : nullptr, nullptr, 0));
}

void futex_wake(std::atomic<uint32_t>* w, int n) { syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE, n, nullptr, nullptr, 0); }

void Writer::put(const void* s, size_t k) {
    if (void* d = take(k)) std::memcpy(d, s, k);
}

}  // namespace ring

using namespace ring;

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string shape_json(const Shape& s) {  // as the HTTP path writes shapes
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
}

// How long the server spins over the slots after its last request before it sleeps.
constexpr int64_t kServerSpinUs = 200;

}  // namespace

struct RingServer::Prepared {
    std::string model;
    int64_t version = -1;  // as asked: -1 follows the latest version
    std::shared_ptr<LoadedVersion> lv;
    std::shared_ptr<const Plan> plan;
    std::unique_ptr<Session> session;  // bound to the slot's areas once: no copy, no rebinding
    std::vector<size_t> in_off, out_off;  // per plan input / output: offset in the request / response area
    uint64_t gen = 0;                     // Repository::generation() when lv was resolved
};

struct RingServer::SlotState {
    uint32_t epoch = 0;
    std::vector<std::unique_ptr<Prepared>> prepared;
    size_t req_low = kAreaBytes, resp_low = kAreaBytes;  // prepared regions lie at and above these
};

namespace {
constexpr size_t kMaxPrepared = 64;  // per client
inline size_t up64(size_t n) { return (n + 63) & ~size_t(63); }
bool same_io(const std::vector<IoDesc>& a, const std::vector<IoDesc>& b) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k)
        if (a[k].name != b[k].name || a[k].dtype != b[k].dtype || a[k].shape != b[k].shape || a[k].nbytes != b[k].nbytes) return false;
    return true;
}
}  // namespace

struct RingServer::SessionSlot {
    std::shared_ptr<const Plan> plan;
    std::unique_ptr<Session> session;
    std::vector<const void*> bound;  // inputs bound to a slot's request area (zero copy)
};

RingServer::RingServer(Repository& repo, uint64_t max_bytes)
    : repo_(repo), max_bytes_(max_bytes), slots_(std::make_unique<SlotState[]>(kSlots)) {}

RingServer::~RingServer() {
    if (base_) {
        Control* c = control(base_);
        c->shutdown.store(1, std::memory_order_seq_cst);
        stop_ = true;
        c->doorbell.fetch_add(1);
        futex_wake(&c->doorbell, 1);
        for (uint32_t i = 0; i < kSlots; ++i) futex_wake(&slot(base_, i)->resp_seq, 1 << 20);
    }
    if (thread_.joinable()) thread_.join();
    if (base_) {
        munmap(base_, total_bytes());
        shm_unlink(shm_.c_str());
    }
}

Status RingServer::start(const std::string& name) {
    shm_ = shm_name(name);
    shm_unlink(shm_.c_str());  // a stale ring from a server that died
    int fd = shm_open(shm_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return invalid("cannot create shared memory ", shm_, ": ", std::strerror(errno));
    if (ftruncate(fd, off_t(total_bytes())) != 0) {
        close(fd);
        shm_unlink(shm_.c_str());
        return invalid("cannot size shared memory ", shm_, ": ", std::strerror(errno));
    }
    void* m = mmap(nullptr, total_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        shm_unlink(shm_.c_str());
        return invalid("cannot map shared memory ", shm_, ": ", std::strerror(errno));
    }
    base_ = m;
    Control* c = new (base_) Control{};
    c->slots = kSlots;
    c->area_bytes = kAreaBytes;
    c->server_pid = uint32_t(getpid());
    for (uint32_t i = 0; i < kSlots; ++i) new (slot(base_, i)) SlotHeader{};
    std::atomic_thread_fence(std::memory_order_seq_cst);
    c->layout = kLayoutVersion;
    __atomic_store_n(&c->magic, kMagic, __ATOMIC_RELEASE);  // last: clients check it
    thread_ = std::thread([this] {
        if (on_start_) on_start_();
        loop();
    });
    return {};
}

bool RingServer::pending() const {
    for (uint32_t i = 0; i < kSlots; ++i) {
        SlotHeader* s = slot(base_, i);
        if (s->req_seq.load(std::memory_order_seq_cst) != s->resp_seq.load(std::memory_order_relaxed)) return true;
    }
    return false;
}

void RingServer::loop() {
    Control* c = control(base_);
    int64_t last_work = now_us();
    uint32_t iter = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
        bool any = false;
        for (uint32_t i = 0; i < kSlots; ++i) {
            SlotHeader* s = slot(base_, i);
            if (s->req_seq.load(std::memory_order_acquire) != s->resp_seq.load(std::memory_order_relaxed)) {
                handle(i);
                any = true;
            }
        }
        if (any) {
            last_work = now_us();
            continue;
        }
        if ((++iter & 63) != 0) {
            cpu_relax();
            continue;
        }
        if (int64_t idle = now_us() - last_work; idle < kServerSpinUs) {
            if (idle > 50) sched_yield();  // let a client on this core run (see client.cpp)
            continue;
        }
        // Sleep: announce it, look once more (a client that posted before seeing the flag), wait.
        uint32_t d = c->doorbell.load(std::memory_order_seq_cst);
        c->server_sleeping.store(1, std::memory_order_seq_cst);
        if (!pending() && !stop_.load()) futex_wait(&c->doorbell, d, 200);
        c->server_sleeping.store(0, std::memory_order_seq_cst);
        last_work = now_us();
    }
}

void RingServer::handle(uint32_t i) {
    SlotHeader* sh = slot(base_, i);
    SlotState& ss_i = slots_[i];
    if (uint32_t ep = sh->epoch.load(std::memory_order_acquire); ep != ss_i.epoch) {  // a new client
        ss_i.prepared.clear();
        ss_i.req_low = ss_i.resp_low = kAreaBytes;
        ss_i.epoch = ep;
    }
    uint32_t seq = sh->req_seq.load(std::memory_order_acquire);
    const uint32_t op = sh->req_op;
    if (op == kOpRun) return run_prepared(i, seq);
    const bool prep = op == kOpPrepare;
    Reader rd{request_area(base_, i), std::min<size_t>(sh->req_bytes, ss_i.req_low)};
    Writer w{response_area(base_, i), ss_i.resp_low};
    std::string err;
    int64_t t0 = now_us();
    VersionMetrics* metrics = nullptr;
    auto finish = [&](bool ok) {
        if (!ok) {
            w = Writer{response_area(base_, i), ss_i.resp_low};
            if (err.size() > 4096) err.resize(4096);
            w.num<uint32_t>(1);
            w.num<uint32_t>(uint32_t(err.size()));
            w.put(err.data(), err.size());
        }
        if (metrics) metrics->observe(uint64_t(now_us() - t0), ok);
        sh->resp_bytes = uint32_t(w.n);
        sh->resp_status = ok ? 0 : 1;
        sh->resp_seq.store(seq, std::memory_order_seq_cst);
        if (sh->client_waiting.load(std::memory_order_seq_cst)) futex_wake(&sh->resp_seq, 1);
    };
    uint32_t mlen = rd.num<uint32_t>(), nin = rd.num<uint32_t>();
    int64_t version = rd.num<int64_t>();
    const uint8_t* mp = rd.take(mlen);
    if (!rd.ok || nin > 4096 || (op != kOpInfer && !prep)) {
        err = "malformed request in the ring (model name, input count or request kind out of bounds)";
        return finish(false);
    }
    std::string_view model(reinterpret_cast<const char*>(mp), mlen);
    const uint64_t gen = repo_.generation();  // before get(): a change after it is seen later
    std::shared_ptr<LoadedVersion> lv = repo_.get(std::string(model), version);
    if (!lv) {
        err = version < 0 ? "unknown model '" + std::string(model) + "'"
                          : "unknown version " + std::to_string(version) + " of model '" + std::string(model) + "'";
        return finish(false);
    }
    metrics = lv->metrics;
    // Inputs, checked as the HTTP path checks them: name, datatype, shape, byte count.
    struct In {
        const TensorMeta* meta;
        Shape shape;
        const uint8_t* data;
        size_t nbytes;
    };
    In ins[64];
    size_t order[64];  // request input k -> model input index (prepare answers in request order)
    if (lv->inputs.size() > 64) {
        err = "model '" + std::string(model) + "' has more inputs than the ring supports (64)";
        return finish(false);
    }
    for (size_t k = 0; k < lv->inputs.size(); ++k) ins[k].meta = nullptr;
    for (uint32_t k = 0; k < nin; ++k) {
        uint32_t nl = rd.num<uint32_t>(), dl = rd.num<uint32_t>(), rank = rd.num<uint32_t>();
        rd.num<uint32_t>();
        uint64_t nbytes = rd.num<uint64_t>();
        if (!rd.ok || rank > 16) {
            err = "malformed request in the ring (input " + std::to_string(k) + ")";
            return finish(false);
        }
        const uint8_t* dims = rd.take(rank * 8);
        const uint8_t* np = rd.take(nl);
        const uint8_t* dp = rd.take(dl);
        const uint8_t* data = nullptr;
        if (!prep) {
            rd.align64();
            data = rd.take(nbytes);
        }
        if (!rd.ok) {
            err = "malformed request in the ring (input " + std::to_string(k) + " runs past the request)";
            return finish(false);
        }
        std::string_view tn(reinterpret_cast<const char*>(np), nl), dt(reinterpret_cast<const char*>(dp), dl);
        size_t idx = 0;
        while (idx < lv->inputs.size() && lv->inputs[idx].name != tn) ++idx;
        if (idx == lv->inputs.size()) {
            std::string names;
            for (const TensorMeta& m : lv->inputs) names += (names.empty() ? "'" : ", '") + m.name + "'";
            err = "unexpected input '" + std::string(tn) + "' for model '" + std::string(model) + "' (its inputs: " + names + ")";
            return finish(false);
        }
        if (k < 64) order[k] = idx;
        In& in = ins[idx];
        const TensorMeta& m = lv->inputs[idx];
        if (in.meta) {
            err = "input '" + std::string(tn) + "' is given twice";
            return finish(false);
        }
        in.meta = &m;
        if (dt != kserve_dtype(m.dtype)) {
            err = "input '" + m.name + "': datatype " + std::string(dt) + " does not match the model's " + kserve_dtype(m.dtype);
            return finish(false);
        }
        in.shape.resize(rank);
        std::memcpy(in.shape.data(), dims, rank * 8);
        bool shape_ok = rank == m.shape.size();
        for (size_t d = 0; shape_ok && d < rank; ++d) shape_ok = in.shape[d] >= 0 && (m.shape[d] < 0 || m.shape[d] == in.shape[d]);
        if (!shape_ok) {
            err = "input '" + m.name + "': shape " + shape_json(in.shape) + " does not match the expected " + shape_json(m.shape);
            return finish(false);
        }
        int64_t numel = shape_numel(in.shape);
        if (prep && nbytes == 0 && numel >= 0) nbytes = uint64_t(numel) * dtype_size(m.dtype);  // 0: derive it
        if (numel < 0 || uint64_t(numel) * dtype_size(m.dtype) != nbytes) {
            err = "input '" + m.name + "': " + std::to_string(nbytes) + " bytes, expected " +
                  std::to_string(uint64_t(std::max<int64_t>(numel, 0)) * dtype_size(m.dtype)) + " for " + kserve_dtype(m.dtype) +
                  " shape " + shape_json(in.shape);
            return finish(false);
        }
        in.data = data;
        in.nbytes = nbytes;
    }
    for (size_t k = 0; k < lv->inputs.size(); ++k)
        if (!ins[k].meta) {
            err = "missing input '" + lv->inputs[k].name + "' for model '" + std::string(model) + "'";
            return finish(false);
        }
    if (prep) {
        std::shared_ptr<const Plan> plan = lv->fixed;
        if (!plan) {
            CompileOptions opt;
            opt.max_bytes = max_bytes_;
            for (size_t k = 0; k < lv->inputs.size(); ++k) opt.input_shapes[ins[k].meta->name] = ins[k].shape;
            Status st = lv->model->compile(opt, {}, &plan);
            if (!st.ok()) {
                err = "cannot prepare model '" + std::string(model) + "' for these shapes: " + st.message() + " (use infer())";
                return finish(false);
            }
        }
        if (!plan->frozen_values.empty()) {
            err = "model '" + std::string(model) + "' needs input values to compile; it cannot be prepared (use infer())";
            return finish(false);
        }
        if (ss_i.prepared.size() >= kMaxPrepared) {
            err = "this client has " + std::to_string(kMaxPrepared) + " prepared requests, the most a ring slot holds";
            return finish(false);
        }
        auto p = std::make_unique<Prepared>();
        size_t rl = ss_i.req_low, pl = ss_i.resp_low;
        for (const IoDesc& d : plan->inputs) p->in_off.push_back(rl = rl > up64(d.nbytes) ? rl - up64(d.nbytes) : 0);
        for (const IoDesc& d : plan->outputs) p->out_off.push_back(pl = pl > up64(d.nbytes) ? pl - up64(d.nbytes) : 0);
        if (rl < kAreaBytes / 4 || pl < kAreaBytes / 4) {
            err = "the prepared requests of this client would take more than 3/4 of the ring's areas (" + std::to_string(kAreaBytes) +
                  " bytes each)";
            return finish(false);
        }
        p->model.assign(model);
        p->version = version < 0 ? -1 : version;
        p->lv = lv;
        p->plan = plan;
        p->gen = gen;
        p->session = std::make_unique<Session>(plan);
        for (size_t k = 0; k < plan->inputs.size(); ++k) p->session->bind_input(k, request_area(base_, i) + p->in_off[k]);
        for (size_t k = 0; k < plan->outputs.size(); ++k) p->session->bind_output(k, response_area(base_, i) + p->out_off[k]);
        w = Writer{response_area(base_, i), pl};
        w.num<uint32_t>(0);
        w.num<uint32_t>(uint32_t(ss_i.prepared.size()));
        w.num<uint32_t>(nin);
        w.num<uint32_t>(uint32_t(plan->outputs.size()));
        for (uint32_t k = 0; k < nin; ++k) {
            const std::string& name = lv->inputs[order[k]].name;
            size_t q = 0;
            while (q < plan->inputs.size() && plan->inputs[q].name != name) ++q;
            if (q == plan->inputs.size()) {
                err = "internal: model input '" + name + "' is not an input of its plan";
                return finish(false);
            }
            w.num<uint64_t>(p->in_off[q]);
            w.num<uint64_t>(plan->inputs[q].nbytes);
        }
        for (size_t k = 0; k < plan->outputs.size(); ++k) {
            const IoDesc& d = plan->outputs[k];
            const char* dt = kserve_dtype(d.dtype);
            w.num<uint32_t>(uint32_t(d.name.size()));
            w.num<uint32_t>(uint32_t(std::strlen(dt)));
            w.num<uint32_t>(uint32_t(d.shape.size()));
            w.num<uint32_t>(0);
            w.num<uint64_t>(d.nbytes);
            w.num<uint64_t>(p->out_off[k]);
            w.put(d.shape.data(), d.shape.size() * 8);
            w.put(d.name.data(), d.name.size());
            w.put(dt, std::strlen(dt));
        }
        if (!w.ok) {
            err = "the description of model '" + std::string(model) + "' does not fit the ring's response area";
            return finish(false);
        }
        ss_i.req_low = rl;
        ss_i.resp_low = pl;
        ss_i.prepared.push_back(std::move(p));
        return finish(true);
    }
    std::shared_ptr<const Plan> plan = lv->fixed;
    if (!plan) {
        CompileOptions opt;
        opt.max_bytes = max_bytes_;
        ValueMap values;
        for (size_t k = 0; k < lv->inputs.size(); ++k) {
            const In& t = ins[k];
            opt.input_shapes[t.meta->name] = t.shape;
            if ((dtype_is_int(t.meta->dtype) || t.meta->dtype == DType::kBool) && shape_numel(t.shape) <= 64) {
                auto v = std::make_shared<Tensor>(t.meta->dtype, t.shape);
                std::memcpy(v->data(), t.data, t.nbytes);
                values[t.meta->name] = v;
            }
        }
        Status st = lv->model->compile(opt, values, &plan);
        if (!st.ok()) {
            err = "cannot run model '" + std::string(model) + "' for these inputs: " + st.message();
            return finish(false);
        }
    }
    auto& ss = sessions_[plan.get()];
    if (!ss) {
        if (sessions_.size() > 256) {  // plans of unloaded versions: start over
            sessions_.clear();
            return handle(i);
        }
        ss = std::make_unique<SessionSlot>();
        ss->plan = plan;
        ss->session = std::make_unique<Session>(plan);
    }
    Session* s = ss->session.get();
    for (size_t k = 0; k < plan->inputs.size(); ++k) {
        const IoDesc& d = plan->inputs[k];
        const In* t = nullptr;
        for (size_t q = 0; q < lv->inputs.size(); ++q)
            if (ins[q].meta->name == d.name) t = &ins[q];
        if (!t || t->nbytes != d.nbytes) {
            err = "internal: plan input '" + d.name + "' does not match the request";
            return finish(false);
        }
        // Zero copy: the session reads the input where the client wrote it (64-byte aligned).
        if (ss->bound.size() != plan->inputs.size()) ss->bound.assign(plan->inputs.size(), nullptr);
        if (ss->bound[k] != t->data) {
            s->bind_input(k, t->data);
            ss->bound[k] = t->data;
        }
    }
    for (const auto& [idx, v] : plan->frozen_values)
        if (std::memcmp(s->input_data(idx), v->data(), v->nbytes()) != 0) {
            err = "internal: input '" + plan->inputs[idx].name + "' differs from the value its plan was compiled for";
            return finish(false);
        }
    int64_t c0 = now_us();
    Status st = s->run();
    metrics->compute_sum_us.fetch_add(uint64_t(now_us() - c0), std::memory_order_relaxed);
    if (!st.ok()) {
        err = "inference failed: " + st.message();
        return finish(false);
    }
    w.num<uint32_t>(0);
    w.num<uint32_t>(uint32_t(plan->outputs.size()));
    for (size_t k = 0; k < plan->outputs.size(); ++k) {
        const IoDesc& d = plan->outputs[k];
        const char* dt = kserve_dtype(d.dtype);
        w.num<uint32_t>(uint32_t(d.name.size()));
        w.num<uint32_t>(uint32_t(std::strlen(dt)));
        w.num<uint32_t>(uint32_t(d.shape.size()));
        w.num<uint32_t>(0);
        w.num<uint64_t>(d.nbytes);
        w.put(d.shape.data(), d.shape.size() * 8);
        w.put(d.name.data(), d.name.size());
        w.put(dt, std::strlen(dt));
        w.align64();
        w.put(s->output_data(k), d.nbytes);
    }
    if (!w.ok) {
        err = "the outputs of model '" + std::string(model) + "' do not fit the ring's response area (" + std::to_string(kAreaBytes) + " bytes)";
        return finish(false);
    }
    finish(true);
}

}  // namespace jiffy::serve

namespace jiffy::serve {

// A prepared request: the inputs are where the session reads them and the outputs go where the
// client reads them, so this is a generation check, the run and the answer.
void RingServer::run_prepared(uint32_t i, uint32_t seq) {
    SlotHeader* sh = slot(base_, i);
    SlotState& st = slots_[i];
    const int64_t t0 = now_us();
    const uint32_t h = sh->req_handle;
    Prepared* p = h < st.prepared.size() ? st.prepared[h].get() : nullptr;
    std::string err;
    VersionMetrics* metrics = nullptr;
    if (!p) {
        err = "unknown prepared request " + std::to_string(h) + " (prepare() it on this client first)";
    } else if (uint64_t g = repo_.generation(); g != p->gen) {
        // The repository changed: follow a reload when the new version has the same inputs and outputs.
        std::shared_ptr<LoadedVersion> lv = repo_.get(p->model, p->version);
        if (!lv) {
            err = p->version < 0 ? "unknown model '" + p->model + "' (unloaded since prepare())"
                                 : "unknown version " + std::to_string(p->version) + " of model '" + p->model + "' (unloaded since prepare())";
        } else if (lv != p->lv) {
            if (!lv->fixed || !same_io(lv->fixed->inputs, p->plan->inputs) || !same_io(lv->fixed->outputs, p->plan->outputs) ||
                !lv->fixed->frozen_values.empty()) {
                err = "model '" + p->model + "' changed its inputs or outputs since prepare(): prepare it again";
            } else {
                auto s = std::make_unique<Session>(lv->fixed);
                for (size_t k = 0; k < p->in_off.size(); ++k) s->bind_input(k, request_area(base_, i) + p->in_off[k]);
                for (size_t k = 0; k < p->out_off.size(); ++k) s->bind_output(k, response_area(base_, i) + p->out_off[k]);
                p->session = std::move(s);
                p->plan = lv->fixed;
                p->lv = lv;
            }
        }
        if (err.empty()) p->gen = g;
    }
    if (err.empty()) {
        metrics = p->lv->metrics;
        int64_t c0 = now_us();
        Status rs = p->session->run();
        metrics->compute_sum_us.fetch_add(uint64_t(now_us() - c0), std::memory_order_relaxed);
        if (!rs.ok()) err = "inference failed: " + rs.message();
    }
    bool ok = err.empty();
    if (ok) {
        sh->resp_bytes = 0;
    } else {
        Writer w{response_area(base_, i), st.resp_low};
        if (err.size() > 4096) err.resize(4096);
        w.num<uint32_t>(1);
        w.num<uint32_t>(uint32_t(err.size()));
        w.put(err.data(), err.size());
        sh->resp_bytes = uint32_t(w.n);
    }
    if (metrics) metrics->observe(uint64_t(now_us() - t0), ok);
    sh->resp_status = ok ? 0 : 1;
    sh->resp_seq.store(seq, std::memory_order_seq_cst);
    if (sh->client_waiting.load(std::memory_order_seq_cst)) futex_wake(&sh->resp_seq, 1);
}

}  // namespace jiffy::serve

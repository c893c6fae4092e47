// The local client (include/jiffy/client.h) over the ring of serve/shm_ring.h.
#include "jiffy/client.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "serve/shm_ring.h"

namespace jiffy::client {

using namespace jiffy::serve::ring;

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

bool alive(uint32_t pid) { return pid && (kill(pid_t(pid), 0) == 0 || errno != ESRCH); }

}  // namespace

std::unique_ptr<LocalClient> LocalClient::connect(const std::string& ring, std::string* err, int spin_us) {
    std::string name = shm_name(ring);
    int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) {
        *err = "cannot open local ring '" + ring + "' (" + name + "): " + std::strerror(errno) +
               " (is `jiffy serve --local-ring " + ring + "` running?)";
        return nullptr;
    }
    struct stat st{};
    if (fstat(fd, &st) != 0 || uint64_t(st.st_size) < total_bytes()) {
        close(fd);
        *err = "local ring '" + ring + "' has an unexpected size (a different jiffy version?)";
        return nullptr;
    }
    void* m = mmap(nullptr, total_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        *err = "cannot map local ring '" + ring + "': " + std::strerror(errno);
        return nullptr;
    }
    Control* c = control(m);
    if (__atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != kMagic || c->layout != kLayoutVersion || c->slots != kSlots ||
        c->area_bytes != kAreaBytes || c->shutdown.load()) {
        munmap(m, total_bytes());
        *err = "local ring '" + ring + "' is not ready (server starting, stopped, or a different jiffy version)";
        return nullptr;
    }
    uint32_t me = uint32_t(getpid());
    for (int pass = 0; pass < 2; ++pass)
        for (uint32_t i = 0; i < kSlots; ++i) {
            SlotHeader* s = slot(m, i);
            uint32_t owner = s->owner.load();
            // Second pass: take over slots of clients that died without releasing them.
            if (owner != 0 && (pass == 0 || alive(owner))) continue;
            if (!s->owner.compare_exchange_strong(owner, me)) continue;
            // A previous owner may have left a request in flight: wait for its answer.
            int64_t end = now_us() + 1000000;
            while (s->resp_seq.load() != s->req_seq.load() && now_us() < end) usleep(100);
            if (s->resp_seq.load() != s->req_seq.load()) {
                s->owner.store(0);
                continue;
            }
            std::unique_ptr<LocalClient> cl(new LocalClient);
            cl->base_ = m;
            cl->slot_ = i;
            cl->seq_ = s->req_seq.load();
            cl->spin_us_ = spin_us;
            cl->req_low_ = kAreaBytes;
            s->epoch.fetch_add(1);  // the server drops the previous owner's prepared requests
            return cl;
        }
    munmap(m, total_bytes());
    *err = "local ring '" + ring + "' has no free slot (" + std::to_string(kSlots) + " clients connected)";
    return nullptr;
}

LocalClient::~LocalClient() {
    if (!base_) return;
    slot(base_, slot_)->owner.store(0);
    munmap(base_, total_bytes());
}

bool LocalClient::encode(const std::string& model, int64_t version, const std::vector<Tensor>& inputs, bool with_data,
                         std::string* err) {
    Writer w{request_area(base_, slot_), req_low_};
    w.num<uint32_t>(uint32_t(model.size()));
    w.num<uint32_t>(uint32_t(inputs.size()));
    w.num<int64_t>(version < 0 ? -1 : version);
    w.put(model.data(), model.size());
    for (const Tensor& t : inputs) {
        w.num<uint32_t>(uint32_t(t.name.size()));
        w.num<uint32_t>(uint32_t(t.datatype.size()));
        w.num<uint32_t>(uint32_t(t.shape.size()));
        w.num<uint32_t>(0);
        w.num<uint64_t>(t.nbytes);
        w.put(t.shape.data(), t.shape.size() * 8);
        w.put(t.name.data(), t.name.size());
        w.put(t.datatype.data(), t.datatype.size());
        if (!with_data) continue;
        w.align64();
        if (t.nbytes && !t.data) {
            *err = "input '" + t.name + "': data is null";
            return false;
        }
        w.put(t.data, t.nbytes);
    }
    if (!w.ok) {
        *err = "request too large for the local ring (" + std::to_string(req_low_) + " bytes per request" +
               (req_low_ < kAreaBytes ? " beside this client's prepared requests)" : ")");
        return false;
    }
    req_n_ = w.n;
    return true;
}

bool LocalClient::round_trip(uint32_t op, uint32_t handle, size_t req_bytes, std::string* err) {
    Control* c = control(base_);
    SlotHeader* s = slot(base_, slot_);
    if (c->shutdown.load(std::memory_order_relaxed)) {
        *err = "the server has shut down";
        return false;
    }
    s->req_op = op;
    s->req_handle = handle;
    s->req_bytes = uint32_t(req_bytes);
    uint32_t seq = ++seq_;
    s->req_seq.store(seq, std::memory_order_seq_cst);
    if (c->server_sleeping.load(std::memory_order_seq_cst)) {
        c->doorbell.fetch_add(1, std::memory_order_seq_cst);
        futex_wake(&c->doorbell, 1);
    }
    // Wait: spin, then sleep on resp_seq.
    // Past 50 us of spinning, yield now and then: if the server thread shares this core (a busy
    // machine), a pure spin would keep it from running until the time slice ends.
    int64_t spin_start = 0;
    for (uint32_t k = 0; s->resp_seq.load(std::memory_order_acquire) != seq; ++k) {
        if ((k & 255) == 255) {
            int64_t t = now_us();
            if (!spin_start) spin_start = t;
            else if (t - spin_start >= spin_us_) break;
            else if (t - spin_start >= 50) sched_yield();
        }
        cpu_relax();
    }
    while (s->resp_seq.load(std::memory_order_acquire) != seq) {
        s->client_waiting.store(1, std::memory_order_seq_cst);
        uint32_t cur = s->resp_seq.load(std::memory_order_seq_cst);
        if (cur != seq) futex_wait(&s->resp_seq, cur, 100);
        s->client_waiting.store(0, std::memory_order_relaxed);
        if (s->resp_seq.load(std::memory_order_acquire) != seq &&
            (c->shutdown.load() || !alive(c->server_pid))) {
            *err = "the server has shut down";
            return false;
        }
    }
    return true;
}

std::string LocalClient::error_text() const {
    const SlotHeader* s = slot(base_, slot_);
    Reader r{response_area(base_, slot_), std::min<size_t>(s->resp_bytes, kAreaBytes)};
    r.num<uint32_t>();
    uint32_t n = r.num<uint32_t>();
    const uint8_t* p = r.take(n);
    return p ? std::string(reinterpret_cast<const char*>(p), n) : "malformed error response";
}

bool LocalClient::infer(const std::string& model, int64_t version, const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs,
                        std::string* err) {
    if (!encode(model, version, inputs, true, err) || !round_trip(kOpInfer, 0, req_n_, err)) return false;
    SlotHeader* s = slot(base_, slot_);
    Reader r{response_area(base_, slot_), std::min<size_t>(s->resp_bytes, kAreaBytes)};
    uint32_t status = r.num<uint32_t>(), n = r.num<uint32_t>();
    if (status != 0) {
        const uint8_t* p = r.take(n);
        *err = p ? std::string(reinterpret_cast<const char*>(p), n) : "malformed error response";
        return false;
    }
    outputs->resize(n);
    for (uint32_t k = 0; k < n; ++k) {
        Tensor& o = (*outputs)[k];
        uint32_t nl = r.num<uint32_t>(), dl = r.num<uint32_t>(), rank = r.num<uint32_t>();
        r.num<uint32_t>();
        uint64_t nbytes = r.num<uint64_t>();
        const uint8_t* dims = rank <= 16 ? r.take(size_t(rank) * 8) : nullptr;
        const uint8_t* np = r.take(nl);
        const uint8_t* dp = r.take(dl);
        r.align64();
        const uint8_t* data = r.take(nbytes);
        if (!r.ok || !dims) {
            *err = "malformed response from the local ring";
            return false;
        }
        o.shape.resize(rank);
        std::memcpy(o.shape.data(), dims, size_t(rank) * 8);
        o.name.assign(reinterpret_cast<const char*>(np), nl);
        o.datatype.assign(reinterpret_cast<const char*>(dp), dl);
        o.data = data;
        o.nbytes = nbytes;
    }
    return true;
}

Prepared* LocalClient::prepare(const std::string& model, int64_t version, const std::vector<Tensor>& inputs, std::string* err) {
    if (!encode(model, version, inputs, false, err) || !round_trip(kOpPrepare, 0, req_n_, err)) return nullptr;
    const SlotHeader* s = slot(base_, slot_);
    if (s->resp_status != 0) {
        *err = error_text();
        return nullptr;
    }
    Reader r{response_area(base_, slot_), std::min<size_t>(s->resp_bytes, kAreaBytes)};
    r.num<uint32_t>();
    auto p = std::make_unique<Prepared>();
    p->client_ = this;
    p->handle_ = r.num<uint32_t>();
    uint32_t nin = r.num<uint32_t>(), nout = r.num<uint32_t>();
    if (!r.ok || nin != inputs.size() || nout > 4096) {
        *err = "malformed prepare answer from the local ring";
        return nullptr;
    }
    size_t low = req_low_;
    for (uint32_t k = 0; k < nin; ++k) {
        uint64_t off = r.num<uint64_t>(), nbytes = r.num<uint64_t>();
        if (!r.ok || off > kAreaBytes || nbytes > kAreaBytes - off) {
            *err = "malformed prepare answer from the local ring";
            return nullptr;
        }
        Tensor t = inputs[k];
        t.data = request_area(base_, slot_) + off;
        t.nbytes = nbytes;
        p->in_ptr_.push_back(request_area(base_, slot_) + off);
        low = std::min<size_t>(low, off);
        p->in_.push_back(std::move(t));
    }
    for (uint32_t k = 0; k < nout; ++k) {
        uint32_t nl = r.num<uint32_t>(), dl = r.num<uint32_t>(), rank = r.num<uint32_t>();
        r.num<uint32_t>();
        uint64_t nbytes = r.num<uint64_t>(), off = r.num<uint64_t>();
        const uint8_t* dims = rank <= 16 ? r.take(size_t(rank) * 8) : nullptr;
        const uint8_t* np = r.take(nl);
        const uint8_t* dp = r.take(dl);
        if (!r.ok || !dims || off > kAreaBytes || nbytes > kAreaBytes - off) {
            *err = "malformed prepare answer from the local ring";
            return nullptr;
        }
        Tensor o;
        o.shape.resize(rank);
        std::memcpy(o.shape.data(), dims, size_t(rank) * 8);
        o.name.assign(reinterpret_cast<const char*>(np), nl);
        o.datatype.assign(reinterpret_cast<const char*>(dp), dl);
        o.data = response_area(base_, slot_) + off;
        o.nbytes = nbytes;
        p->out_.push_back(std::move(o));
    }
    req_low_ = low;
    prepared_.push_back(std::move(p));
    return prepared_.back().get();
}

bool Prepared::run(std::string* err) {
    if (!client_->round_trip(kOpRun, handle_, 0, err)) return false;
    if (slot(client_->base_, client_->slot_)->resp_status != 0) {
        *err = client_->error_text();
        return false;
    }
    return true;
}

}  // namespace jiffy::client

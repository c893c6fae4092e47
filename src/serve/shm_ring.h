// The local fast path: `jiffy serve --local-ring NAME` creates the POSIX shared memory object
// /jiffy-ring-NAME holding a control block and kSlots slots, each with a request and a response
// area. A client (include/jiffy/client.h) claims a slot, writes a request (model, version, input
// tensors) into its request area and bumps req_seq; a server thread spinning over the slots
// sees it, runs the model (its own sessions: Session objects are not thread-safe) and writes the
// outputs or an error into the response area, then publishes resp_seq. Both sides spin on those
// sequence words for a bounded time, then sleep on them with FUTEX_WAIT and are woken with
// FUTEX_WAKE only when the other side announced that it sleeps: while both are busy no syscall
// is made per request.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"

namespace jiffy {
struct Plan;
}

namespace jiffy::serve {

class Repository;

namespace ring {

inline constexpr uint32_t kMagic = 0x4a52494e;  // "JRIN"
inline constexpr uint32_t kLayoutVersion = 2;
inline constexpr uint32_t kSlots = 8;
inline constexpr size_t kAreaBytes = size_t(1) << 20;  // request and response area, each
inline constexpr size_t kHeaderBytes = 4096;             // the control block's page
inline constexpr size_t kSlotHeaderBytes = 256;

struct Control {
    uint32_t magic, layout, slots;
    uint32_t server_pid;
    uint64_t area_bytes;
    alignas(64) std::atomic<uint32_t> doorbell;         // futex word: bumped to wake a sleeping server
    std::atomic<uint32_t> server_sleeping;              // the server is (about to be) in FUTEX_WAIT
    alignas(64) std::atomic<uint32_t> shutdown;         // the server is gone or going
};

// Request kinds (SlotHeader::req_op).
enum Op : uint32_t {
    kOpInfer = 0,    // a self-describing request (model, version, inputs with their data)
    kOpPrepare = 1,  // the same without data: the server resolves the model once, places the
                     // inputs in the request area and the outputs in the response area, and
                     // answers a handle
    kOpRun = 2,      // run prepared request req_handle: inputs already in place, nothing to parse
};

// Each side writes only its own cache line (no false sharing of the hot words).
struct SlotHeader {
    alignas(64) std::atomic<uint32_t> owner;       // pid of the client holding the slot; 0 free
    std::atomic<uint32_t> epoch;                   // bumped by each client that claims the slot
    // Written by the client.
    alignas(64) std::atomic<uint32_t> req_seq;     // a new request is posted
    uint32_t req_op, req_handle, req_bytes;
    std::atomic<uint32_t> client_waiting;          // the client is (about to be) in FUTEX_WAIT
    // Written by the server.
    alignas(64) std::atomic<uint32_t> resp_seq;    // the response for req_seq is ready (futex word)
    uint32_t resp_status, resp_bytes;              // status 0 ok, else the error is in the response area
};
static_assert(sizeof(SlotHeader) <= kSlotHeaderBytes);

inline size_t total_bytes() { return kHeaderBytes + kSlots * kSlotHeaderBytes + kSlots * 2 * kAreaBytes; }
inline std::string shm_name(const std::string& ring) { return "/jiffy-ring-" + ring; }
inline Control* control(void* base) { return static_cast<Control*>(base); }
inline SlotHeader* slot(void* base, uint32_t i) {
    return reinterpret_cast<SlotHeader*>(static_cast<uint8_t*>(base) + kHeaderBytes + i * kSlotHeaderBytes);
}
inline uint8_t* request_area(void* base, uint32_t i) {
    return static_cast<uint8_t*>(base) + kHeaderBytes + kSlots * kSlotHeaderBytes + size_t(i) * 2 * kAreaBytes;
}
inline uint8_t* response_area(void* base, uint32_t i) { return request_area(base, i) + kAreaBytes; }

// futex on a word in shared memory (not FUTEX_PRIVATE: the waiter may be another process).
int futex_wait(std::atomic<uint32_t>* w, uint32_t expected, int timeout_ms);
void futex_wake(std::atomic<uint32_t>* w, int n);

// Messages. Infer and prepare request: u32 model_len, u32 n_inputs, i64 version (-1 latest), model bytes, then per
// input: u32 name_len, u32 dtype_len, u32 rank, u32 pad, u64 nbytes, i64 dims[rank], name, dtype,
// padding to 64, data. Response: u32 status (0 ok), u32 n (outputs, or the error's length), then
// the error text or per output the same record as an input. A prepare request carries no data;
// its answer: u32 status, u32 handle, u32 n_inputs, u32 n_outputs, u64 request-area offset and u64
// nbytes per input (in the request's order), then per output u32 name_len, u32 dtype_len, u32 rank, u32 pad,
// u64 nbytes, u64 response-area offset, i64 dims[rank], name, dtype. Prepared regions are placed
// from the top of each area down; infer requests and answers use the space below them.
struct Writer {
    uint8_t* p;
    size_t cap, n = 0;
    bool ok = true;
    void* take(size_t k) {
        if (!ok || k > cap - n) {
            ok = false;
            return nullptr;
        }
        void* r = p + n;
        n += k;
        return r;
    }
    void put(const void* s, size_t k);
    template <typename T> void num(T v) { put(&v, sizeof v); }
    void align64() { n = (n + 63) & ~size_t(63); ok = ok && n <= cap; }
};
struct Reader {
    const uint8_t* p;
    size_t cap, n = 0;
    bool ok = true;
    const uint8_t* take(size_t k) {
        if (!ok || k > cap - n) {
            ok = false;
            return nullptr;
        }
        const uint8_t* r = p + n;
        n += k;
        return r;
    }
    template <typename T> T num() {
        T v{};
        if (const uint8_t* s = take(sizeof v)) __builtin_memcpy(&v, s, sizeof v);
        return v;
    }
    void align64() { n = (n + 63) & ~size_t(63); ok = ok && n <= cap; }
};

}  // namespace ring

class RingServer {
public:
    RingServer(Repository& repo, uint64_t max_bytes);
    ~RingServer();
    Status start(const std::string& name);  // creates the shm object and the server thread
    // Called on the ring thread once, before it serves (e.g. to set its scheduling policy).
    void on_thread_start(std::function<void()> f) { on_start_ = std::move(f); }

private:
    void loop();
    bool pending() const;
    void handle(uint32_t i);
    void run_prepared(uint32_t i, uint32_t seq);
    struct Prepared;
    struct SlotState;  // per slot: the client's prepared requests and the areas they hold
    Repository& repo_;
    uint64_t max_bytes_;
    std::string shm_;
    void* base_ = nullptr;
    std::atomic<bool> stop_{false};
    std::thread thread_;
    std::function<void()> on_start_;
    struct SessionSlot;
    std::map<const Plan*, std::unique_ptr<SessionSlot>> sessions_;  // the ring thread's own
    std::unique_ptr<SlotState[]> slots_;
};

}  // namespace jiffy::serve

// Response cache: an in-process LRU with TTL and a byte bound per model (opt-in in config.yaml:
// `response_cache: {enable: true, ttl_ms: N, max_bytes: N}`), keyed by a 128-bit XXH3 hash of
// the model, version, file fingerprint, every input's name/datatype/shape/bytes and the requested
// outputs; optionally backed by Redis (`jiffy serve --cache-redis HOST:PORT`) as a second level
// shared across restarts and processes. A Redis failure counts as a miss (and an error), never
// as a failed request. See docs/serving.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "serve/metrics.h"

struct redisContext;

namespace jiffy::serve {

struct HttpResponse;

struct CacheKey {
    uint64_t lo = 0, hi = 0;
    bool operator==(const CacheKey& o) const { return lo == o.lo && hi == o.hi; }
    std::string hex() const;
};

// Streaming XXH3-128 over the request's identity. Strings are length-prefixed, so field
// boundaries cannot shift ("ab"+"c" differs from "a"+"bc").
class KeyHasher {
public:
    KeyHasher();
    ~KeyHasher();
    KeyHasher(const KeyHasher&) = delete;
    KeyHasher& operator=(const KeyHasher&) = delete;
    void bytes(const void* p, size_t n);
    void str(std::string_view s);
    void u64(uint64_t v) { bytes(&v, sizeof v); }
    CacheKey digest() const;

private:
    void* st_;  // XXH3_state_t
};

// An encoded response: the body without the request's `id` (spliced back in on a hit at id_at),
// its content type, and the JSON header length for binary responses (0: pure JSON).
struct CachedResponse {
    std::string content_type, body;
    size_t id_at = 0;
    size_t json_len = 0;
    std::string encode() const;                  // for Redis
    bool decode(std::string_view s);             // false: not one of ours
};

// The second level: one Redis connection shared by all models (a lock around each command;
// short timeouts; after a failure no reconnect is tried for `retry_ms`).
class RedisL2 {
public:
    RedisL2(std::string host, int port, int timeout_ms);
    ~RedisL2();
    // 1 hit, 0 miss, -1 error (counted by the caller).
    int get(const CacheKey& k, std::string* value);
    bool set(const CacheKey& k, const std::string& value, int64_t ttl_ms);
    static bool parse_address(const std::string& s, std::string* host, int* port);

private:
    bool ensure_connected();  // under mu_
    void drop();              // under mu_
    std::string host_;
    int port_, timeout_ms_;
    std::mutex mu_;
    redisContext* c_ = nullptr;
    int64_t next_try_ms_ = 0;
};

class ResponseCache {
public:
    ResponseCache(int64_t ttl_ms, uint64_t max_bytes, RedisL2* l2) : ttl_ms_(ttl_ms), max_bytes_(max_bytes), l2_(l2) {}
    int64_t ttl_ms() const { return ttl_ms_; }
    uint64_t max_bytes() const { return max_bytes_; }
    // L1, then L2 (a hit there is promoted into L1). Counts hits/misses/errors in `m`.
    bool lookup(const CacheKey& k, CachedResponse* out, VersionMetrics* m);
    void insert(const CacheKey& k, CachedResponse r, VersionMetrics* m);
    size_t bytes() const;

private:
    struct Entry {
        CacheKey key;
        std::shared_ptr<const CachedResponse> r;
        int64_t expires_ms;  // 0: never
        size_t cost;
    };
    struct KeyHash {
        size_t operator()(const CacheKey& k) const { return size_t(k.lo); }
    };
    void insert_l1(const CacheKey& k, std::shared_ptr<const CachedResponse> r, VersionMetrics* m);
    int64_t ttl_ms_;
    uint64_t max_bytes_;
    RedisL2* l2_;
    mutable std::mutex mu_;
    std::list<Entry> lru_;  // front = most recently used
    std::unordered_map<CacheKey, std::list<Entry>::iterator, KeyHash> map_;
    size_t bytes_ = 0;
};

// Hooks for the infer handler. `id_json`: the request's id as JSON text ("" when it has none).
// cache_respond fills `res` from a hit; cache_store keeps a successful response.
bool cache_respond(ResponseCache& c, const CacheKey& k, const std::string& id_json, HttpResponse& res, VersionMetrics* m);
void cache_store(ResponseCache& c, const CacheKey& k, const std::string& id_json, const HttpResponse& res, VersionMetrics* m);

}  // namespace jiffy::serve

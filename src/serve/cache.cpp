#include "serve/cache.h"

#include <hiredis/hiredis.h>
#include <xxhash.h>

#include <chrono>
#include <cstring>

#include "serve/http.h"

namespace jiffy::serve {

namespace {

int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void bump(std::atomic<uint64_t> VersionMetrics::*f, VersionMetrics* m) {
    if (m) (m->*f).fetch_add(1, std::memory_order_relaxed);
}

constexpr uint32_t kMagic = 0x4a524331;  // "JRC1"

void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
bool get_u64(std::string_view& s, uint64_t* v) {
    if (s.size() < 8) return false;
    std::memcpy(v, s.data(), 8);
    s.remove_prefix(8);
    return true;
}

}  // namespace

std::string CacheKey::hex() const {
    static const char* d = "0123456789abcdef";
    std::string r(32, '0');
    for (int i = 0; i < 16; ++i) {
        r[size_t(i)] = d[(hi >> (60 - 4 * i)) & 15];
        r[size_t(16 + i)] = d[(lo >> (60 - 4 * i)) & 15];
    }
    return r;
}

KeyHasher::KeyHasher() : st_(XXH3_createState()) { XXH3_128bits_reset(static_cast<XXH3_state_t*>(st_)); }
KeyHasher::~KeyHasher() { XXH3_freeState(static_cast<XXH3_state_t*>(st_)); }
void KeyHasher::bytes(const void* p, size_t n) { XXH3_128bits_update(static_cast<XXH3_state_t*>(st_), p, n); }
void KeyHasher::str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
}
CacheKey KeyHasher::digest() const {
    XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(st_));
    return {h.low64, h.high64};
}

// ------------------------------------------------------------------ encoded responses

std::string CachedResponse::encode() const {
    std::string s;
    s.reserve(body.size() + content_type.size() + 40);
    put_u64(s, kMagic);
    put_u64(s, content_type.size());
    s += content_type;
    put_u64(s, id_at);
    put_u64(s, json_len);
    s += body;
    return s;
}

bool CachedResponse::decode(std::string_view s) {
    uint64_t magic, n, a, j;
    if (!get_u64(s, &magic) || magic != kMagic || !get_u64(s, &n) || n > s.size()) return false;
    content_type.assign(s.data(), n);
    s.remove_prefix(n);
    if (!get_u64(s, &a) || !get_u64(s, &j)) return false;
    body.assign(s.data(), s.size());
    if (a > body.size() || j > body.size()) return false;
    id_at = a;
    json_len = j;
    return true;
}

// ------------------------------------------------------------------ Redis

RedisL2::RedisL2(std::string host, int port, int timeout_ms) : host_(std::move(host)), port_(port), timeout_ms_(timeout_ms) {}
RedisL2::~RedisL2() { drop(); }

bool RedisL2::parse_address(const std::string& s, std::string* host, int* port) {
    size_t c = s.rfind(':');
    if (c == std::string::npos || c == 0 || c + 1 == s.size() || s.size() - c > 6) return false;
    for (size_t i = c + 1; i < s.size(); ++i)
        if (s[i] < '0' || s[i] > '9') return false;
    int p = std::atoi(s.c_str() + c + 1);
    if (p <= 0 || p > 65535) return false;
    *host = s.substr(0, c);
    *port = p;
    return true;
}

void RedisL2::drop() {
    if (c_) redisFree(c_);
    c_ = nullptr;
}

bool RedisL2::ensure_connected() {
    if (c_) return true;
    int64_t now = now_ms();
    if (now < next_try_ms_) return false;  // a recent failure: don't pay a connect per request
    next_try_ms_ = now + 1000;
    timeval tv{timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
    c_ = redisConnectWithTimeout(host_.c_str(), port_, tv);
    if (!c_ || c_->err) {
        drop();
        return false;
    }
    redisSetTimeout(c_, tv);
    return true;
}

int RedisL2::get(const CacheKey& k, std::string* value) {
    std::lock_guard<std::mutex> g(mu_);
    if (!ensure_connected()) return -1;
    std::string key = "jiffy:rc:" + k.hex();
    auto* r = static_cast<redisReply*>(redisCommand(c_, "GET %b", key.data(), key.size()));
    if (!r) {
        drop();
        return -1;
    }
    int rc = -1;
    if (r->type == REDIS_REPLY_NIL) rc = 0;
    else if (r->type == REDIS_REPLY_STRING) {
        value->assign(r->str, r->len);
        rc = 1;
    }
    freeReplyObject(r);
    return rc;
}

bool RedisL2::set(const CacheKey& k, const std::string& value, int64_t ttl_ms) {
    std::lock_guard<std::mutex> g(mu_);
    if (!ensure_connected()) return false;
    std::string key = "jiffy:rc:" + k.hex();
    redisReply* r;
    if (ttl_ms > 0)
        r = static_cast<redisReply*>(redisCommand(c_, "SET %b %b PX %lld", key.data(), key.size(), value.data(), value.size(),
                                                  (long long)ttl_ms));
    else
        r = static_cast<redisReply*>(redisCommand(c_, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
    if (!r) {
        drop();
        return false;
    }
    bool ok = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    return ok;
}

// ------------------------------------------------------------------ the LRU

size_t ResponseCache::bytes() const {
    std::lock_guard<std::mutex> g(mu_);
    return bytes_;
}

bool ResponseCache::lookup(const CacheKey& k, CachedResponse* out, VersionMetrics* m) {
    {
        std::lock_guard<std::mutex> g(mu_);
        auto it = map_.find(k);
        if (it != map_.end()) {
            Entry& e = *it->second;
            if (e.expires_ms && now_ms() >= e.expires_ms) {
                bytes_ -= e.cost;
                lru_.erase(it->second);
                map_.erase(it);
            } else {
                lru_.splice(lru_.begin(), lru_, it->second);
                *out = *e.r;
                bump(&VersionMetrics::cache_hits_l1, m);
                return true;
            }
        }
    }
    if (l2_) {
        std::string v;
        int rc = l2_->get(k, &v);
        if (rc < 0) bump(&VersionMetrics::cache_redis_errors, m);
        if (rc > 0) {
            auto r = std::make_shared<CachedResponse>();
            if (r->decode(v)) {
                *out = *r;
                bump(&VersionMetrics::cache_hits_l2, m);
                insert_l1(k, std::move(r), m);
                return true;
            }
            bump(&VersionMetrics::cache_redis_errors, m);  // a value that is not ours
        }
    }
    bump(&VersionMetrics::cache_misses, m);
    return false;
}

void ResponseCache::insert_l1(const CacheKey& k, std::shared_ptr<const CachedResponse> r, VersionMetrics* m) {
    size_t cost = r->body.size() + r->content_type.size() + 96;  // + node and map overhead
    if (cost > max_bytes_) return;
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(k);
    if (it != map_.end()) {
        bytes_ -= it->second->cost;
        lru_.erase(it->second);
        map_.erase(it);
    }
    while (bytes_ + cost > max_bytes_ && !lru_.empty()) {
        bytes_ -= lru_.back().cost;
        map_.erase(lru_.back().key);
        lru_.pop_back();
        bump(&VersionMetrics::cache_evictions, m);
    }
    lru_.push_front({k, std::move(r), ttl_ms_ > 0 ? now_ms() + ttl_ms_ : 0, cost});
    map_[k] = lru_.begin();
    bytes_ += cost;
}

void ResponseCache::insert(const CacheKey& k, CachedResponse r, VersionMetrics* m) {
    auto p = std::make_shared<const CachedResponse>(std::move(r));
    if (l2_ && !l2_->set(k, p->encode(), ttl_ms_)) bump(&VersionMetrics::cache_redis_errors, m);
    insert_l1(k, std::move(p), m);
}

// ------------------------------------------------------------------ hooks

bool cache_respond(ResponseCache& c, const CacheKey& k, const std::string& id_json, HttpResponse& res, VersionMetrics* m) {
    CachedResponse r;
    if (!c.lookup(k, &r, m)) return false;
    std::string ins = id_json.empty() ? std::string() : ",\"id\":" + id_json;
    res.status = 200;
    res.content_type = r.content_type;
    res.body.assign(r.body, 0, r.id_at);
    res.body += ins;
    res.body.append(r.body, r.id_at, std::string::npos);
    if (r.json_len) res.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.json_len + ins.size()));
    return true;
}

void cache_store(ResponseCache& c, const CacheKey& k, const std::string& id_json, const HttpResponse& res, VersionMetrics* m) {
    if (res.status != 200) return;
    CachedResponse r;
    r.content_type = res.content_type;
    size_t json_len = res.body.size();
    for (const auto& [h, v] : res.headers)
        if (h == "Inference-Header-Content-Length") json_len = size_t(std::strtoull(v.c_str(), nullptr, 10));
    if (json_len > res.body.size()) return;
    // The id belongs to the request, not to the result: store the body without it.
    size_t at = std::string::npos, cut = 0;
    if (!id_json.empty()) {
        std::string seg = ",\"id\":" + id_json;
        at = std::string_view(res.body).substr(0, json_len).find(seg);
        if (at == std::string::npos) return;  // not where we expect it: don't cache
        cut = seg.size();
    } else {
        at = std::string_view(res.body).substr(0, json_len).find(",\"outputs\":");
        if (at == std::string::npos) at = 0;
    }
    r.id_at = at;
    r.body.reserve(res.body.size() - cut);
    r.body.assign(res.body, 0, at);
    r.body.append(res.body, at + cut, std::string::npos);
    r.json_len = json_len == res.body.size() ? 0 : json_len - cut;
    c.insert(k, std::move(r), m);
}

}  // namespace jiffy::serve

#include "serve/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "serve/http.h"

namespace jiffy::serve {

using json = nlohmann::json;

namespace {

void reply(HttpResponse& res, int status, const json& j) {
    res.status = status;
    res.content_type = "application/json";
    res.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
}
void reply_error(HttpResponse& res, int status, const std::string& msg) { reply(res, status, json{{"error", msg}}); }

bool get_u64(const json& j, const char* k, uint64_t* v, bool required, std::string* err, const std::string& what) {
    if (!j.contains(k)) {
        if (required) *err = what + ": missing '" + k + "'";
        return !required;
    }
    const json& x = j[k];
    if (!x.is_number_integer() || (x.is_number_integer() && !x.is_number_unsigned() && x.get<int64_t>() < 0)) {
        *err = what + ": '" + k + "' must be a non-negative integer";
        return false;
    }
    *v = x.get<uint64_t>();
    return true;
}

}  // namespace

ShmRegion::~ShmRegion() {
    if (map) munmap(map, map_len);
}

std::shared_ptr<ShmRegion> ShmRegistry::find(const std::string& name) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = regions_.find(name);
    return it == regions_.end() ? nullptr : it->second;
}

size_t ShmRegistry::size() {
    std::lock_guard<std::mutex> g(mu_);
    return regions_.size();
}

std::string ShmRegistry::register_region(const std::string& name, const json& body) {
    std::string what = "shared memory region '" + name + "'";
    if (!body.is_object()) return what + ": request must be a JSON object {\"key\", \"offset\", \"byte_size\"}";
    for (auto it = body.begin(); it != body.end(); ++it)
        if (it.key() != "key" && it.key() != "offset" && it.key() != "byte_size")
            return what + ": unknown field '" + it.key() + "' (expected key, offset, byte_size)";
    if (!body.contains("key") || !body["key"].is_string()) return what + ": missing 'key' string (the shm_open name)";
    std::string key = body["key"].get<std::string>();
    uint64_t offset = 0, size = 0;
    std::string err;
    if (!get_u64(body, "offset", &offset, false, &err, what) || !get_u64(body, "byte_size", &size, true, &err, what)) return err;
    if (size == 0) return what + ": byte_size must be positive";
    if (key.empty() || key.size() > 250 || key.find('/', 1) != std::string::npos)
        return what + ": invalid key '" + key + "' (a POSIX shared memory name like /myshm)";
    {
        std::lock_guard<std::mutex> g(mu_);
        if (regions_.count(name)) return what + " is already registered (unregister it first)";
    }
    int fd = shm_open(key.c_str(), O_RDWR, 0);
    if (fd < 0) return what + ": cannot open shared memory '" + key + "': " + std::strerror(errno);
    struct stat st{};
    if (fstat(fd, &st) != 0 || uint64_t(st.st_size) < offset || uint64_t(st.st_size) - offset < size) {
        close(fd);
        return what + ": offset " + std::to_string(offset) + " + byte_size " + std::to_string(size) +
               " exceeds the size of '" + key + "' (" + std::to_string(uint64_t(st.st_size)) + " bytes)";
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = offset / uint64_t(page) * uint64_t(page);
    size_t len = size_t(offset - start + size);
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(start));
    close(fd);
    if (m == MAP_FAILED) return what + ": cannot map '" + key + "': " + std::strerror(errno);
    auto r = std::make_shared<ShmRegion>();
    r->name = name;
    r->key = key;
    r->offset = offset;
    r->byte_size = size;
    r->map = m;
    r->map_len = len;
    r->base = static_cast<uint8_t*>(m) + (offset - start);
    std::lock_guard<std::mutex> g(mu_);
    if (regions_.count(name)) return what + " is already registered (unregister it first)";
    regions_[name] = std::move(r);
    return "";
}

void ShmRegistry::route(const HttpRequest& req, const std::vector<std::string>& seg, HttpResponse& res) {
    // seg[0] = "v2", seg[1] = "systemsharedmemory"
    bool region = seg.size() >= 4 && seg[2] == "region";
    std::string name = region ? seg[3] : "";
    std::string action = region ? (seg.size() == 5 ? seg[4] : "") : (seg.size() == 3 ? seg[2] : "");
    if ((region && seg.size() != 5) || (!region && seg.size() != 3) ||
        (action != "status" && action != "register" && action != "unregister") || (action == "register" && !region))
        return reply_error(res, 404, "unknown endpoint " + req.path);
    bool get = req.method == "GET", post = req.method == "POST";
    if (action == "status") {
        if (!get) {
            res.headers.emplace_back("Allow", "GET");
            return reply_error(res, 405, "method " + req.method + " not allowed on " + req.path + " (use GET)");
        }
        json a = json::array();
        std::lock_guard<std::mutex> g(mu_);
        for (const auto& [n, r] : regions_)
            if (!region || n == name) a.push_back({{"name", n}, {"key", r->key}, {"offset", r->offset}, {"byte_size", r->byte_size}});
        if (region && a.empty()) return reply_error(res, 404, "unknown shared memory region '" + name + "'");
        return reply(res, 200, a);
    }
    if (!post) {
        res.headers.emplace_back("Allow", "POST");
        return reply_error(res, 405, "method " + req.method + " not allowed on " + req.path + " (use POST)");
    }
    if (action == "register") {
        json body;
        try {
            body = json::parse(req.body.begin(), req.body.end());
        } catch (const json::parse_error& e) {
            return reply_error(res, 400, std::string("malformed JSON in request: ") + e.what());
        }
        std::string err = register_region(name, body);
        if (!err.empty()) return reply_error(res, 400, err);
    } else {
        std::shared_ptr<ShmRegion> gone;  // unmapped once no request uses it
        std::lock_guard<std::mutex> g(mu_);
        if (region) {
            auto it = regions_.find(name);
            if (it == regions_.end()) return reply_error(res, 400, "unknown shared memory region '" + name + "'");
            gone = std::move(it->second);
            regions_.erase(it);
        } else {
            regions_.clear();
        }
    }
    res.status = 200;
    res.content_type = "application/json";
    res.body.clear();
}

bool ShmRegistry::resolve(const json& p, const std::string& what, size_t want, ShmRef* out, std::string* err) {
    if (!p.is_object() || !p.contains("shared_memory_region")) return false;
    if (!p["shared_memory_region"].is_string()) {
        *err = what + ": shared_memory_region must be a string";
        return true;
    }
    std::string name = p["shared_memory_region"].get<std::string>();
    uint64_t off = 0, size = 0;
    if (!get_u64(p, "shared_memory_offset", &off, false, err, what) || !get_u64(p, "shared_memory_byte_size", &size, true, err, what))
        return true;
    check(name, off, size, what, want, out, err);  // *err set on failure
    return true;
}

bool ShmRegistry::check(const std::string& name, uint64_t off, uint64_t size, const std::string& what, size_t want,
                        ShmRef* out, std::string* err) {
    auto r = find(name);
    if (!r) {
        *err = what + ": unknown shared memory region '" + name + "' (register it first)";
        return false;
    }
    if (off > r->byte_size || size > r->byte_size - off) {
        *err = what + ": shared_memory_offset " + std::to_string(off) + " + shared_memory_byte_size " + std::to_string(size) +
               " is outside shared memory region '" + name + "' (" + std::to_string(r->byte_size) + " bytes)";
        return false;
    }
    if (want != SIZE_MAX && size != want) {
        *err = what + ": shared_memory_byte_size is " + std::to_string(size) + " bytes, expected " + std::to_string(want) +
               " (region '" + name + "')";
        return false;
    }
    out->region = std::move(r);
    out->offset = off;
    out->byte_size = size;
    return true;
}

}  // namespace jiffy::serve

// Triton's system shared-memory extension: clients register POSIX shared-memory objects
// (shm_open names) as named regions; infer inputs and outputs that name a region, offset and
// byte size are read from / written into it, so tensor bytes never cross the socket.
//   POST /v2/systemsharedmemory/region/{name}/register   {"key": "/shm", "offset": 0, "byte_size": N}
//   POST /v2/systemsharedmemory[/region/{name}]/unregister
//   GET  /v2/systemsharedmemory[/region/{name}]/status   [{"name","key","offset","byte_size"}]
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace jiffy::serve {

struct HttpRequest;
struct HttpResponse;

struct ShmRegion {
    std::string name, key;
    uint64_t offset = 0, byte_size = 0;
    void* map = nullptr;     // the mapping (from the page holding `offset`)
    size_t map_len = 0;
    uint8_t* base = nullptr;  // = the object's byte `offset`
    ~ShmRegion();
};

// A tensor's place in a region, from its `parameters`.
struct ShmRef {
    std::shared_ptr<ShmRegion> region;
    uint64_t offset = 0, byte_size = 0;
    uint8_t* data() const { return region->base + offset; }
};

class ShmRegistry {
public:
    // Answers /v2/systemsharedmemory/...; seg = the path's segments ("v2", "systemsharedmemory", ...).
    void route(const HttpRequest& req, const std::vector<std::string>& seg, HttpResponse& res);
    // Reads shared_memory_region/_offset/_byte_size from a tensor's parameters. Returns false
    // when the tensor names no region; fills *err (a 400 message) when the parameters are wrong,
    // the region is unknown, or [offset, offset + byte_size) is outside it or differs from
    // `want` bytes (want = SIZE_MAX: any size).
    bool resolve(const nlohmann::json& params, const std::string& what, size_t want, ShmRef* out, std::string* err);
    // The same checks for parameters already parsed (serve/json_fast.h): false with *err on failure.
    bool check(const std::string& region, uint64_t offset, uint64_t byte_size, const std::string& what, size_t want,
               ShmRef* out, std::string* err);
    std::shared_ptr<ShmRegion> find(const std::string& name);
    size_t size();

private:
    std::string register_region(const std::string& name, const nlohmann::json& body);  // "" or an error
    std::mutex mu_;
    std::map<std::string, std::shared_ptr<ShmRegion>> regions_;
};

}  // namespace jiffy::serve

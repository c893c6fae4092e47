// `jiffy serve` extensions end to end: response cache (L1 LRU/TTL, Redis L2 with a real
// redis-server started here), the system shared-memory extension, the local ring client, and hot
// reload. Each test starts the real server binary on loopback.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "jiffy/client.h"
#include "serve_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using serve_test::Client;
using serve_test::Response;
using serve_test::Server;

namespace {

const std::string kSrc = JIFFY_SOURCE_DIR;
const std::string kBin = JIFFY_BINARY;
const std::string kJarvis = kSrc + "/.cache/models/hey_jarvis_v0.1.onnx";

struct TmpDir {
    std::string path;
    TmpDir() {
        char t[] = "/tmp/jiffy_serve_ext_XXXXXX";
        path = mkdtemp(t);
    }
    ~TmpDir() { fs::remove_all(path); }
};

void write(const std::string& p, const std::string& s) {
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << s;
}

void put_model(const std::string& repo, const std::string& name, int version, const std::string& src = kJarvis) {
    fs::create_directories(repo + "/" + name + "/" + std::to_string(version));
    fs::copy_file(src, repo + "/" + name + "/" + std::to_string(version) + "/model.onnx", fs::copy_options::overwrite_existing);
}

std::vector<float> random_floats(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

json jarvis_request(const std::vector<float>& x) {
    return json{{"inputs", {{{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}}, {"data", x}}}}};
}

std::string err_of(const Response& r) {
    try {
        return json::parse(r.body).at("error").get<std::string>();
    } catch (...) {
        return "<no error field: " + r.body + ">";
    }
}

// A counter from /metrics ("name{labels}" exactly as printed); -1 when absent.
long metric(int port, const std::string& series) {
    Client c(port);
    Response r = c.request("GET", "/metrics");
    size_t k = r.body.find(series + " ");
    if (k == std::string::npos) return -1;
    return std::atol(r.body.c_str() + k + series.size() + 1);
}

std::string series(const std::string& name, const std::string& model, const std::string& level = "") {
    return name + "{" + (level.empty() ? "" : "level=\"" + level + "\",") + "model=\"" + model + "\",version=\"1\"}";
}

int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

// redis-server on a free port, no persistence; killed by the destructor.
struct Redis {
    pid_t pid = -1;
    int port = 0;
    bool start(const std::string& log) {
        port = free_port();
        pid = fork();
        if (pid == 0) {
            FILE* f = std::fopen(log.c_str(), "w");
            if (f) {
                dup2(fileno(f), 1);
                dup2(fileno(f), 2);
            }
            std::string p = std::to_string(port);
            execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   nullptr);
            _exit(127);
        }
        for (int i = 0; i < 200; ++i) {  // up to 4 s for it to accept
            Client c(port, 200);
            if (c.ok()) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
    }
    void kill_now() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
            pid = -1;
        }
    }
    ~Redis() { kill_now(); }
};

}  // namespace

// ------------------------------------------------------------------ response cache

TEST(ServeCache, HitTtlAndLruBound) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "jarvis", 1);
    write(repo + "/jarvis/config.yaml", "response_cache:\n  enable: true\n  ttl_ms: 700\n  max_bytes: 100000\n");
    put_model(repo, "small", 1);
    write(repo + "/small/config.yaml", "response_cache: {enable: true, ttl_ms: 0, max_bytes: 1500}\n");
    put_model(repo, "nocache", 1);
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", repo}, t.path + "/server.log"));
    Client c(s.port());
    auto x = random_floats(16 * 96, 1);
    json req = jarvis_request(x);
    Response a = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "jarvis")), 1);
    Response b = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    ASSERT_EQ(b.status, 200);
    EXPECT_EQ(a.body, b.body);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "jarvis", "l1")), 1);
    // The id is the request's, not the cached one.
    req["id"] = "req-7";
    Response d = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    ASSERT_EQ(d.status, 200);
    EXPECT_EQ(json::parse(d.body)["id"], "req-7");
    EXPECT_EQ(json::parse(d.body)["outputs"], json::parse(a.body)["outputs"]);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "jarvis", "l1")), 2);
    // Binary output requested: another key; a hit returns the same bytes and header.
    req["parameters"] = {{"binary_data_output", true}};
    Response e1 = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    Response e2 = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    ASSERT_EQ(e1.status, 200);
    EXPECT_EQ(e1.body, e2.body);
    EXPECT_EQ(e1.header("inference-header-content-length"), e2.header("inference-header-content-length"));
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "jarvis")), 2);
    // Different input bytes: a miss.
    x[5] += 0.25f;
    ASSERT_EQ(c.request("POST", "/v2/models/jarvis/infer", jarvis_request(x).dump()).status, 200);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "jarvis")), 3);
    // TTL: after 700 ms the entry is gone.
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    Response f = c.request("POST", "/v2/models/jarvis/infer", jarvis_request(x).dump());
    ASSERT_EQ(f.status, 200);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "jarvis")), 4);

    // LRU bound: 1500 bytes hold only a few responses.
    std::vector<std::string> bodies;
    for (int i = 0; i < 20; ++i) {
        Response r = c.request("POST", "/v2/models/small/infer", jarvis_request(random_floats(16 * 96, 100 + i)).dump());
        ASSERT_EQ(r.status, 200);
        bodies.push_back(r.body);
    }
    long ev = metric(s.port(), series("jiffy_cache_evictions_total", "small"));
    EXPECT_GE(ev, 10);
    // The newest is still cached, the oldest was evicted.
    Response last = c.request("POST", "/v2/models/small/infer", jarvis_request(random_floats(16 * 96, 119)).dump());
    EXPECT_EQ(last.body, bodies.back());
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "small", "l1")), 1);
    Response first = c.request("POST", "/v2/models/small/infer", jarvis_request(random_floats(16 * 96, 100)).dump());
    EXPECT_EQ(first.body, bodies.front());
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "small", "l1")), 1);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "small")), 21);
    // A model without response_cache is never cached.
    for (int i = 0; i < 2; ++i) ASSERT_EQ(c.request("POST", "/v2/models/nocache/infer", jarvis_request(x).dump()).status, 200);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "nocache")), 0);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "nocache", "l1")), 0);
}

TEST(ServeCache, ConfigErrorsNameTheLine) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "jarvis", 1);
    write(repo + "/jarvis/config.yaml", "response_cache:\n  enable: true\n  ttl: 5\n");
    Server s;
    EXPECT_FALSE(s.start(kBin, {"--model-repository", repo}, t.path + "/server.log"));
    EXPECT_EQ(s.wait_exit(5000), 2);
    std::ifstream f(t.path + "/server.log");
    std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_NE(log.find("config.yaml:3: unknown key 'ttl' in response_cache"), std::string::npos) << log;
}

TEST(ServeCache, RedisSecondLevelSurvivesRestartAndOutage) {
    TmpDir t;
    Redis redis;
    ASSERT_TRUE(redis.start(t.path + "/redis.log")) << "redis-server did not start";
    std::string repo = t.path + "/repo";
    put_model(repo, "jarvis", 1);
    write(repo + "/jarvis/config.yaml", "response_cache: {enable: true, ttl_ms: 60000}\n");
    std::vector<std::string> args = {"--model-repository", repo, "--cache-redis", "127.0.0.1:" + std::to_string(redis.port)};
    json req = jarvis_request(random_floats(16 * 96, 3));
    std::string body;
    {
        Server s;
        ASSERT_TRUE(s.start(kBin, args, t.path + "/server1.log"));
        Client c(s.port());
        Response r = c.request("POST", "/v2/models/jarvis/infer", req.dump());
        ASSERT_EQ(r.status, 200);
        body = r.body;
        EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "jarvis")), 1);
        EXPECT_EQ(metric(s.port(), series("jiffy_cache_redis_errors_total", "jarvis")), 0);
    }
    Server s;  // a new process: L1 empty, Redis still has the response
    ASSERT_TRUE(s.start(kBin, args, t.path + "/server2.log"));
    Client c(s.port());
    Response r = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.body, body);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "jarvis", "l2")), 1);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "jarvis")), 0);
    // Redis dies: requests still succeed, errors are counted, L1 still hits.
    redis.kill_now();
    json req2 = jarvis_request(random_floats(16 * 96, 4));
    for (int i = 0; i < 3; ++i) {
        Response q = c.request("POST", "/v2/models/jarvis/infer", req2.dump());
        ASSERT_EQ(q.status, 200) << q.body;
    }
    EXPECT_GE(metric(s.port(), series("jiffy_cache_redis_errors_total", "jarvis")), 1);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "jarvis", "l1")), 2);
    EXPECT_EQ(c.request("GET", "/v2/health/ready").status, 200);
}

// ------------------------------------------------------------------ system shared memory

struct ShmObject {
    std::string name;
    size_t size;
    uint8_t* p = nullptr;
    ShmObject(std::string n, size_t sz) : name(std::move(n)), size(sz) {
        shm_unlink(name.c_str());
        int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || ftruncate(fd, off_t(sz)) != 0) return;
        void* m = mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m != MAP_FAILED) p = static_cast<uint8_t*>(m);
    }
    ~ShmObject() {
        if (p) munmap(p, size);
        shm_unlink(name.c_str());
    }
};

TEST(ServeSharedMemory, RegisterInferStatusUnregister) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "jarvis", 1);
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", repo}, t.path + "/server.log"));
    Client c(s.port());
    ShmObject in("/jiffy_test_in_" + std::to_string(getpid()), 16384), out("/jiffy_test_out_" + std::to_string(getpid()), 4096);
    ASSERT_TRUE(in.p && out.p);
    auto x = random_floats(16 * 96, 9);
    std::memcpy(in.p + 128, x.data(), x.size() * 4);
    Response r = c.request("POST", "/v2/systemsharedmemory/region/input0/register",
                           json{{"key", in.name}, {"offset", 0}, {"byte_size", 16384}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    r = c.request("POST", "/v2/systemsharedmemory/region/output0/register", json{{"key", out.name}, {"offset", 1024}, {"byte_size", 64}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    r = c.request("GET", "/v2/systemsharedmemory/status");
    ASSERT_EQ(r.status, 200);
    json st = json::parse(r.body);
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0]["name"], "input0");
    EXPECT_EQ(st[0]["key"], in.name);
    EXPECT_EQ(st[0]["byte_size"], 16384);
    r = c.request("GET", "/v2/systemsharedmemory/region/output0/status");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(json::parse(r.body), json::parse(R"([{"name":"output0","key":")" + out.name + R"(","offset":1024,"byte_size":64}])"));
    EXPECT_NE(c.request("GET", "/v2").body.find("system_shared_memory"), std::string::npos);
    // Registering twice, or an object that does not exist, or beyond its size: 400.
    EXPECT_EQ(c.request("POST", "/v2/systemsharedmemory/region/input0/register", json{{"key", in.name}, {"byte_size", 8}}.dump()).status, 400);
    r = c.request("POST", "/v2/systemsharedmemory/region/nope/register", json{{"key", "/jiffy_no_such_shm"}, {"byte_size", 8}}.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("jiffy_no_such_shm"), std::string::npos);
    r = c.request("POST", "/v2/systemsharedmemory/region/big/register", json{{"key", in.name}, {"offset", 100}, {"byte_size", 16384}}.dump());
    EXPECT_EQ(r.status, 400) << r.body;

    // The JSON path, for reference.
    Response ref = c.request("POST", "/v2/models/jarvis/infer", jarvis_request(x).dump());
    ASSERT_EQ(ref.status, 200);
    float want = json::parse(ref.body)["outputs"][0]["data"][0].get<float>();
    // Input and output through shared memory.
    json req = {{"inputs", {{{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}},
                             {"parameters", {{"shared_memory_region", "input0"}, {"shared_memory_offset", 128}, {"shared_memory_byte_size", 6144}}}}}},
                {"outputs", {{{"name", "53"}, {"parameters", {{"shared_memory_region", "output0"}, {"shared_memory_byte_size", 64}}}}}}};
    r = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body);
    EXPECT_FALSE(j["outputs"][0].contains("data"));
    EXPECT_EQ(j["outputs"][0]["parameters"]["shared_memory_region"], "output0");
    EXPECT_EQ(j["outputs"][0]["parameters"]["shared_memory_byte_size"], 4);
    float got;
    std::memcpy(&got, out.p + 1024, 4);
    EXPECT_EQ(got, want);
    // Shared memory input, JSON output.
    req.erase("outputs");
    r = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(json::parse(r.body)["outputs"][0]["data"][0].get<float>(), want);
    // Out of bounds, wrong size, unknown region: 400 naming the region.
    json bad = req;
    bad["inputs"][0]["parameters"]["shared_memory_offset"] = 12000;
    r = c.request("POST", "/v2/models/jarvis/infer", bad.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("outside shared memory region 'input0'"), std::string::npos) << err_of(r);
    bad = req;
    bad["inputs"][0]["parameters"]["shared_memory_byte_size"] = 6000;
    r = c.request("POST", "/v2/models/jarvis/infer", bad.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("expected 6144"), std::string::npos) << err_of(r);
    bad = req;
    bad["inputs"][0]["parameters"]["shared_memory_region"] = "ghost";
    r = c.request("POST", "/v2/models/jarvis/infer", bad.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("unknown shared memory region 'ghost'"), std::string::npos) << err_of(r);
    json small = {{"inputs", req["inputs"]},
                  {"outputs", {{{"name", "53"}, {"parameters", {{"shared_memory_region", "output0"}, {"shared_memory_offset", 62}, {"shared_memory_byte_size", 2}}}}}}};
    r = c.request("POST", "/v2/models/jarvis/infer", small.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("output0"), std::string::npos) << err_of(r);
    // Unregister one, then all.
    EXPECT_EQ(c.request("POST", "/v2/systemsharedmemory/region/output0/unregister").status, 200);
    EXPECT_EQ(c.request("GET", "/v2/systemsharedmemory/region/output0/status").status, 404);
    EXPECT_EQ(c.request("POST", "/v2/systemsharedmemory/region/output0/unregister").status, 400);
    EXPECT_EQ(c.request("POST", "/v2/systemsharedmemory/unregister").status, 200);
    EXPECT_EQ(json::parse(c.request("GET", "/v2/systemsharedmemory/status").body), json::array());
    r = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(c.request("GET", "/v2/systemsharedmemory/region/input0/register").status, 405);
}

// The per-version worker (execution: worker, serve/batcher.h) with the cache and shared memory:
// a cache hit is answered on the I/O thread without queueing, a miss is stored by the worker
// (the fast JSON writer's text, id spliced out and back in), shm inputs and outputs work there.
TEST(ServeWorkerPath, CacheHitNeverQueuesAndSharedMemoryWorks) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "wk", 1);
    write(repo + "/wk/config.yaml", "execution: worker\nresponse_cache: {enable: true, ttl_ms: 0, max_bytes: 100000}\n");
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", repo}, t.path + "/server.log"));
    Client c(s.port());
    const std::string queued = "jiffy_inference_queue_duration_us_count{model=\"wk\",version=\"1\"}";
    auto x = random_floats(16 * 96, 21);
    json req = jarvis_request(x);
    req["id"] = "first \"one\" \xc3\xa9";  // escapes and UTF-8: the splice must match the writer's text
    Response a = c.request("POST", "/v2/models/wk/infer", req.dump());
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(json::parse(a.body)["id"], req["id"]);
    EXPECT_EQ(metric(s.port(), queued), 1);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_misses_total", "wk")), 1);
    // Same inputs, no id: a hit, without the stored request's id, and not queued.
    json plain = jarvis_request(x);
    Response b = c.request("POST", "/v2/models/wk/infer", plain.dump());
    ASSERT_EQ(b.status, 200) << b.body;
    json jb = json::parse(b.body);
    EXPECT_FALSE(jb.contains("id")) << b.body;
    EXPECT_EQ(jb["outputs"], json::parse(a.body)["outputs"]);
    EXPECT_EQ(b.header("content-type"), "application/json");
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "wk", "l1")), 1);
    EXPECT_EQ(metric(s.port(), queued), 1);
    // Another id: a hit with that id.
    plain["id"] = "x2";
    Response d = c.request("POST", "/v2/models/wk/infer", plain.dump());
    ASSERT_EQ(d.status, 200);
    EXPECT_EQ(json::parse(d.body)["id"], "x2");
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "wk", "l1")), 2);
    EXPECT_EQ(metric(s.port(), queued), 1);
    EXPECT_EQ(metric(s.port(), "jiffy_inference_requests_total{model=\"wk\",version=\"1\"}"), 3);

    // Shared memory through the worker: input copied at parse time, output written by the worker.
    ShmObject in("/jiffy_test_win_" + std::to_string(getpid()), 8192), out("/jiffy_test_wout_" + std::to_string(getpid()), 4096);
    ASSERT_TRUE(in.p && out.p);
    auto y = random_floats(16 * 96, 22);
    std::memcpy(in.p, y.data(), y.size() * 4);
    ASSERT_EQ(c.request("POST", "/v2/systemsharedmemory/region/wi/register", json{{"key", in.name}, {"byte_size", 8192}}.dump()).status, 200);
    ASSERT_EQ(c.request("POST", "/v2/systemsharedmemory/region/wo/register", json{{"key", out.name}, {"byte_size", 64}}.dump()).status, 200);
    Response ref = c.request("POST", "/v2/models/wk/infer", jarvis_request(y).dump());
    ASSERT_EQ(ref.status, 200);
    float want = json::parse(ref.body)["outputs"][0]["data"][0].get<float>();
    json sreq = {{"inputs", {{{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}},
                              {"parameters", {{"shared_memory_region", "wi"}, {"shared_memory_byte_size", 6144}}}}}},
                 {"outputs", {{{"name", "53"}, {"parameters", {{"shared_memory_region", "wo"}, {"shared_memory_offset", 8}, {"shared_memory_byte_size", 16}}}}}}};
    for (int i = 0; i < 2; ++i) {  // twice: a shared memory output is never answered from the cache
        std::memset(out.p, 0, 64);
        long q0 = metric(s.port(), queued);
        Response r = c.request("POST", "/v2/models/wk/infer", sreq.dump());
        ASSERT_EQ(r.status, 200) << r.body;
        EXPECT_EQ(json::parse(r.body)["outputs"][0]["parameters"]["shared_memory_region"], "wo");
        float got;
        std::memcpy(&got, out.p + 8, 4);
        EXPECT_EQ(got, want);
        EXPECT_EQ(metric(s.port(), queued), q0 + 1);
    }
    // Shared memory input, JSON output: cacheable like any request (same bytes as `y`: a hit).
    json sin = sreq;
    sin.erase("outputs");
    Response r = c.request("POST", "/v2/models/wk/infer", sin.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["outputs"][0]["data"][0].get<float>(), want);
    EXPECT_EQ(metric(s.port(), series("jiffy_cache_hits_total", "wk", "l1")), 3);
    // An output slice too small fails that request only, with the region's name.
    json small = sreq;
    small["outputs"][0]["parameters"]["shared_memory_byte_size"] = 2;
    r = c.request("POST", "/v2/models/wk/infer", small.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("'wo'"), std::string::npos) << err_of(r);
    small["outputs"][0]["parameters"]["shared_memory_byte_size"] = "16";
    r = c.request("POST", "/v2/models/wk/infer", small.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("shared_memory_byte_size must be a non-negative integer"), std::string::npos) << err_of(r);
}

// ------------------------------------------------------------------ local ring client

TEST(ServeLocalRing, SameResultsAsHttpAndClearErrors) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "jarvis", 1);
    write(repo + "/jarvis/config.yaml", "inputs:\n  x.1: [1, 16, 96]\n");
    std::string ring = "test" + std::to_string(getpid());
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", repo, "--local-ring", ring}, t.path + "/server.log"));
    std::string err;
    EXPECT_EQ(jiffy::client::LocalClient::connect("no_such_ring", &err), nullptr);
    EXPECT_NE(err.find("no_such_ring"), std::string::npos);
    auto cl = jiffy::client::LocalClient::connect(ring, &err);
    ASSERT_NE(cl, nullptr) << err;
    Client c(s.port());
    std::vector<jiffy::client::Tensor> out;
    for (int i = 0; i < 5; ++i) {
        auto x = random_floats(16 * 96, 20 + i);
        Response r = c.request("POST", "/v2/models/jarvis/infer", jarvis_request(x).dump());
        ASSERT_EQ(r.status, 200);
        float want = json::parse(r.body)["outputs"][0]["data"][0].get<float>();
        ASSERT_TRUE(cl->infer("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err)) << err;
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].name, "53");
        EXPECT_EQ(out[0].datatype, "FP32");
        EXPECT_EQ(out[0].shape, (std::vector<int64_t>{1, 1}));
        ASSERT_EQ(out[0].nbytes, 4u);
        EXPECT_EQ(*static_cast<const float*>(out[0].data), want);
    }
    auto x = random_floats(16 * 96, 5);
    EXPECT_FALSE(cl->infer("nope", -1, {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err));
    EXPECT_NE(err.find("unknown model 'nope'"), std::string::npos) << err;
    EXPECT_FALSE(cl->infer("jarvis", 7, {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err));
    EXPECT_NE(err.find("unknown version 7"), std::string::npos) << err;
    EXPECT_FALSE(cl->infer("jarvis", -1, {{"x.1", "FP32", {1, 96, 16}, x.data(), x.size() * 4}}, &out, &err));
    EXPECT_NE(err.find("shape [1,96,16] does not match the expected [1,16,96]"), std::string::npos) << err;
    EXPECT_FALSE(cl->infer("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}, x.data(), 100}}, &out, &err));
    EXPECT_NE(err.find("100 bytes, expected 6144"), std::string::npos) << err;
    EXPECT_FALSE(cl->infer("jarvis", -1, {{"x.1", "INT64", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err));
    EXPECT_NE(err.find("datatype INT64 does not match the model's FP32"), std::string::npos) << err;
    EXPECT_FALSE(cl->infer("jarvis", -1, {{"y", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err));
    EXPECT_NE(err.find("unexpected input 'y'"), std::string::npos) << err;
    EXPECT_FALSE(cl->infer("jarvis", -1, {}, &out, &err));
    EXPECT_NE(err.find("missing input 'x.1'"), std::string::npos) << err;
    std::vector<float> huge(2 << 20);
    EXPECT_FALSE(cl->infer("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}, huge.data(), huge.size() * 4}}, &out, &err));
    EXPECT_NE(err.find("too large"), std::string::npos) << err;
    // Many sequential calls, a second client alongside; the first client still works after errors.
    auto cl2 = jiffy::client::LocalClient::connect(ring, &err);
    ASSERT_NE(cl2, nullptr) << err;
    float first = 0;
    for (int i = 0; i < 2000; ++i) {
        auto& cc = (i & 1) ? cl2 : cl;
        ASSERT_TRUE(cc->infer("jarvis", 1, {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err)) << i << ": " << err;
        float y = *static_cast<const float*>(out[0].data);
        if (i == 0) first = y;
        ASSERT_EQ(y, first);
    }
    // An idle pause (both sides go to sleep on futexes), then a call still completes.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE(cl->infer("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err)) << err;
    // The server's request counter saw the ring requests.
    EXPECT_GE(metric(s.port(), series("jiffy_inference_requests_total", "jarvis")), 2000 + 5 + 8);
    // Server stops: the client gets an error, not a hang.
    s.signal(SIGKILL);
    s.wait_exit(5000);
    EXPECT_FALSE(cl->infer("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err));
    EXPECT_NE(err.find("shut down"), std::string::npos) << err;
}

TEST(ServeLocalRing, PreparedRequestInPlaceFollowsReloadAndFailsClearly) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "jarvis", 1);
    write(repo + "/jarvis/config.yaml", "inputs:\n  x.1: [1, 16, 96]\n");
    std::string ring = "prep" + std::to_string(getpid());
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", repo, "--local-ring", ring}, t.path + "/server.log"));
    std::string err;
    auto cl = jiffy::client::LocalClient::connect(ring, &err);
    ASSERT_NE(cl, nullptr) << err;
    jiffy::client::Prepared* p = cl->prepare("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}}}, &err);
    ASSERT_NE(p, nullptr) << err;
    ASSERT_EQ(p->num_inputs(), 1u);
    EXPECT_EQ(p->inputs()[0].nbytes, 6144u);  // derived by the server from the shape
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p->input(0)) % 64, 0u);
    ASSERT_EQ(p->outputs().size(), 1u);
    EXPECT_EQ(p->outputs()[0].name, "53");
    EXPECT_EQ(p->outputs()[0].datatype, "FP32");
    EXPECT_EQ(p->outputs()[0].shape, (std::vector<int64_t>{1, 1}));
    Client c(s.port());
    std::vector<jiffy::client::Tensor> out;
    auto http_score = [&](const std::vector<float>& x) {
        Response r = c.request("POST", "/v2/models/jarvis/infer", jarvis_request(x).dump());
        EXPECT_EQ(r.status, 200) << r.body;
        return json::parse(r.body)["outputs"][0]["data"][0].get<float>();
    };
    auto score = [&] { return *static_cast<const float*>(p->outputs()[0].data); };
    std::vector<float> want;
    for (int i = 0; i < 5; ++i) {
        auto x = random_floats(16 * 96, 40 + i);
        want.push_back(http_score(x));
        std::memcpy(p->input(0), x.data(), x.size() * 4);
        ASSERT_TRUE(p->run(&err)) << err;
        EXPECT_EQ(score(), want.back());
    }
    // infer() on the same client uses the space below the prepared buffers: the prepared input
    // and output survive it.
    auto y = random_floats(16 * 96, 99);
    ASSERT_TRUE(cl->infer("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}, y.data(), y.size() * 4}}, &out, &err)) << err;
    EXPECT_EQ(*static_cast<const float*>(out[0].data), http_score(y));
    EXPECT_EQ(score(), want.back());
    ASSERT_TRUE(p->run(&err)) << err;
    EXPECT_EQ(score(), want.back());
    // A second prepared request gets its own buffers.
    jiffy::client::Prepared* p2 = cl->prepare("jarvis", 1, {{"x.1", "FP32", {1, 16, 96}, nullptr, 6144}}, &err);
    ASSERT_NE(p2, nullptr) << err;
    EXPECT_NE(p2->input(0), p->input(0));
    std::memcpy(p2->input(0), y.data(), y.size() * 4);
    ASSERT_TRUE(p2->run(&err)) << err;
    ASSERT_TRUE(p->run(&err)) << err;
    EXPECT_EQ(score(), want.back());
    EXPECT_EQ(*static_cast<const float*>(p2->outputs()[0].data), http_score(y));
    // prepare() checks like infer().
    EXPECT_EQ(cl->prepare("nope", -1, {{"x.1", "FP32", {1, 16, 96}}}, &err), nullptr);
    EXPECT_NE(err.find("unknown model 'nope'"), std::string::npos) << err;
    EXPECT_EQ(cl->prepare("jarvis", -1, {{"x.1", "FP32", {1, 96, 16}}}, &err), nullptr);
    EXPECT_NE(err.find("shape [1,96,16] does not match the expected [1,16,96]"), std::string::npos) << err;
    EXPECT_EQ(cl->prepare("jarvis", -1, {{"x.1", "INT64", {1, 16, 96}}}, &err), nullptr);
    EXPECT_NE(err.find("datatype INT64"), std::string::npos) << err;
    EXPECT_EQ(cl->prepare("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}, nullptr, 100}}, &err), nullptr);
    EXPECT_NE(err.find("100 bytes, expected 6144"), std::string::npos) << err;
    EXPECT_EQ(cl->prepare("jarvis", -1, {}, &err), nullptr);
    EXPECT_NE(err.find("missing input 'x.1'"), std::string::npos) << err;
    // Unloaded: run() fails naming why; loaded again (a new version object, same inputs and
    // outputs): the prepared request follows it.
    ASSERT_EQ(c.request("POST", "/v2/repository/models/jarvis/unload", "").status, 200);
    EXPECT_FALSE(p->run(&err));
    EXPECT_NE(err.find("unloaded since prepare()"), std::string::npos) << err;
    ASSERT_EQ(c.request("POST", "/v2/repository/models/jarvis/load", "").status, 200);
    ASSERT_TRUE(p->run(&err)) << err;
    EXPECT_EQ(score(), want.back());
    EXPECT_GE(metric(s.port(), series("jiffy_inference_requests_total", "jarvis")), 5 + 2 + 1);
    // A new client in the same slot starts with no prepared requests.
    cl.reset();
    auto cl2 = jiffy::client::LocalClient::connect(ring, &err);
    ASSERT_NE(cl2, nullptr) << err;
    jiffy::client::Prepared* q = cl2->prepare("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}}}, &err);
    ASSERT_NE(q, nullptr) << err;
    std::memcpy(q->input(0), y.data(), y.size() * 4);
    ASSERT_TRUE(q->run(&err)) << err;
    EXPECT_EQ(*static_cast<const float*>(q->outputs()[0].data), http_score(y));
    s.signal(SIGKILL);
    s.wait_exit(5000);
    EXPECT_FALSE(q->run(&err));
    EXPECT_NE(err.find("shut down"), std::string::npos) << err;
}

static std::string read_all(const std::string& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// --realtime: the I/O thread (the main thread) and the ring thread run SCHED_FIFO at the given
// priority where permitted (root here); elsewhere one warning line and SCHED_OTHER.
TEST(ServeRealtime, IoAndRingThreadsRunFifoOrWarnOnce) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "jarvis", 1);
    write(repo + "/jarvis/config.yaml", "inputs:\n  x.1: [1, 16, 96]\n");
    std::string ring = "rt" + std::to_string(getpid());
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", repo, "--local-ring", ring, "--realtime-priority", "12"}, t.path + "/server.log"));
    std::string err;
    auto cl = jiffy::client::LocalClient::connect(ring, &err);  // the ring thread is up once it answers
    ASSERT_NE(cl, nullptr) << err;
    auto x = random_floats(16 * 96, 3);
    std::vector<jiffy::client::Tensor> out;
    ASSERT_TRUE(cl->infer("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, &out, &err)) << err;
    // /proc/PID/task/TID/stat: field 40 rt_priority, 41 policy (after the ")" of the name).
    auto sched_of = [&](const std::string& tid) {
        std::ifstream f("/proc/" + std::to_string(s.pid()) + "/task/" + tid + "/stat");
        std::string line((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        std::istringstream rest(line.substr(line.rfind(')') + 2));
        std::vector<std::string> v;
        for (std::string w; rest >> w;) v.push_back(w);
        return v.size() > 38 ? std::make_pair(std::stoi(v[37]), std::stoi(v[38])) : std::make_pair(-1, -1);  // (prio, policy)
    };
    int fifo = 0;
    for (const auto& d : std::filesystem::directory_iterator("/proc/" + std::to_string(s.pid()) + "/task"))
        if (auto [prio, policy] = sched_of(d.path().filename().string()); policy == SCHED_FIFO) {
            EXPECT_EQ(prio, 12);
            ++fifo;
        }
    auto main_thread = sched_of(std::to_string(s.pid()));
    std::string log = read_all(t.path + "/server.log");
    sched_param sp{};
    sp.sched_priority = 1;
    bool permitted = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;  // can this user do it? (then back)
    sp.sched_priority = 0;
    if (permitted) sched_setscheduler(0, SCHED_OTHER, &sp);
    if (permitted) {
        EXPECT_EQ(main_thread, std::make_pair(12, int(SCHED_FIFO))) << log;
        EXPECT_EQ(fifo, 2) << log;  // I/O and ring threads; nothing else
        EXPECT_NE(log.find("I/O thread runs SCHED_FIFO priority 12"), std::string::npos) << log;
        EXPECT_NE(log.find("ring thread runs SCHED_FIFO priority 12"), std::string::npos) << log;
    } else {
        EXPECT_EQ(fifo, 0);
        size_t w = log.find("warning: --realtime: SCHED_FIFO not permitted");
        EXPECT_NE(w, std::string::npos) << log;
        EXPECT_EQ(log.find("warning: --realtime", w + 1), std::string::npos) << log;  // once
    }
    // A bad priority is refused at start.
    Server bad;
    EXPECT_FALSE(bad.start(kBin, {"--model-repository", repo, "--realtime-priority", "100"}, t.path + "/bad.log"));
    EXPECT_NE(read_all(t.path + "/bad.log").find("--realtime-priority"), std::string::npos);
}

// ------------------------------------------------------------------ hot reload

TEST(ServeHotReload, NewVersionSwitchesWithoutFailuresAndBadVersionKeepsOld) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "hr", 1);
    write(repo + "/hr/config.yaml", "inputs:\n  x.1: [1, 16, 96]\nwarmup_runs: 2\n");
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", repo, "--repository-poll-ms", "50"}, t.path + "/server.log"));
    std::string body = jarvis_request(random_floats(16 * 96, 11)).dump();
    std::atomic<bool> stop{false};
    std::atomic<int> ok{0}, failed{0}, v2{0};
    std::string last_fail;
    std::thread load([&] {
        Client c(s.port());
        while (!stop) {
            Response r = c.request("POST", "/v2/models/hr/infer", body);
            if (r.status != 200) {
                ++failed;
                last_fail = std::to_string(r.status) + " " + r.body;
                continue;
            }
            ++ok;
            if (json::parse(r.body)["model_version"] == "2") ++v2;
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    put_model(repo, "hr", 2);
    for (int i = 0; i < 100 && v2 == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_GT(v2.load(), 0) << "version 2 never served";
    // A corrupt version 3: loading fails, version 2 keeps serving, the index says why.
    write(repo + "/hr/3/model.onnx", "this is not an onnx file");
    json v3;
    Client c(s.port());
    for (int i = 0; i < 100; ++i) {
        json idx = json::parse(c.request("POST", "/v2/repository/index").body);
        for (const json& e : idx)
            if (e["name"] == "hr" && e.value("version", "") == "3") v3 = e;
        if (!v3.is_null()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    int before = v2;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = true;
    load.join();
    ASSERT_FALSE(v3.is_null()) << "index never listed version 3";
    EXPECT_EQ(v3["state"], "UNAVAILABLE");
    EXPECT_NE(v3["reason"].get<std::string>().find("3/model.onnx"), std::string::npos) << v3.dump();
    EXPECT_GT(v2.load(), before) << "version 2 stopped serving";
    EXPECT_EQ(failed.load(), 0) << last_fail;
    EXPECT_GT(ok.load(), 20);
    json idx = json::parse(c.request("POST", "/v2/repository/index").body);
    bool v2_ready = false;
    for (const json& e : idx)
        if (e["name"] == "hr" && e.value("version", "") == "2") v2_ready = e["state"] == "READY";
    EXPECT_TRUE(v2_ready) << idx.dump();
    Response r = c.request("POST", "/v2/models/hr/infer", body);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(json::parse(r.body)["model_version"], "2");
}

// Hot reload of a model with a worker and a queue, under concurrent load: requests queued on the
// old version when the new one is swapped in still run there (the old worker drains, then stops);
// none fails or is dropped.
TEST(ServeHotReload, WorkerDrainsQueuedRequestsAcrossSwaps) {
    TmpDir t;
    std::string repo = t.path + "/repo";
    put_model(repo, "hq", 1);
    write(repo + "/hq/config.yaml", "inputs:\n  x.1: [1, 16, 96]\nwarmup_runs: 1\nexecution: worker\nmax_queue_size: 4096\n");
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", repo, "--repository-poll-ms", "20"}, t.path + "/server.log"));
    std::string body = jarvis_request(random_floats(16 * 96, 12)).dump();
    std::atomic<bool> stop{false};
    std::atomic<int> ok{0}, failed{0}, newest{0};
    std::mutex fail_mu;
    std::string last_fail;
    std::vector<std::thread> load;
    for (int k = 0; k < 4; ++k)
        load.emplace_back([&] {
            Client c(s.port());
            while (!stop) {
                Response r = c.request("POST", "/v2/models/hq/infer", body);
                if (r.status != 200) {
                    ++failed;
                    std::lock_guard<std::mutex> g(fail_mu);
                    last_fail = std::to_string(r.status) + " " + r.body;
                    continue;
                }
                ++ok;
                if (json::parse(r.body)["model_version"] == "3") ++newest;
            }
        });
    // Replace version 1 in place (same number: its worker is retired), then add 2 and 3.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    fs::copy_file(kJarvis, repo + "/hq/1/model.onnx.tmp");
    fs::rename(repo + "/hq/1/model.onnx.tmp", repo + "/hq/1/model.onnx");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    put_model(repo, "hq", 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    put_model(repo, "hq", 3);
    for (int i = 0; i < 100 && newest == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = true;
    for (auto& th : load) th.join();
    EXPECT_GT(newest.load(), 0) << "version 3 never served";
    EXPECT_EQ(failed.load(), 0) << last_fail;
    EXPECT_GT(ok.load(), 40);
    Client c(s.port());
    Response m = c.request("GET", "/metrics");
    EXPECT_NE(m.body.find("jiffy_queue_depth{model=\"hq\",version=\"1\"} 0"), std::string::npos) << m.body;
}

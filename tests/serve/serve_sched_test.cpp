// `jiffy serve` scheduling end to end (real server binary, real loopback HTTP): dynamic batching
// across connections, admission control (503 + Retry-After), queue timeouts, and the metrics.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "serve_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using serve_test::Client;
using serve_test::Response;
using serve_test::Server;

namespace {

const std::string kSrc = JIFFY_SOURCE_DIR;
std::string g_tmp, g_repo;
bool g_ok = false;
Server* g_server = nullptr;

void write(const std::string& p, const std::string& s) {
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << s;
}

bool make_model(const std::string& name, int d, int layers, const std::string& config) {
    std::string dir = g_repo + "/" + name + "/1";
    fs::create_directories(dir);
    write(g_repo + "/" + name + "/config.yaml", config);
    return std::system(("/usr/bin/python3 " + kSrc + "/tests/serve/make_batch_model.py " + dir + " " + std::to_string(d) + " " +
                        std::to_string(layers) + " 2>/dev/null")
                           .c_str()) == 0;
}

class Env : public ::testing::Environment {
public:
    void SetUp() override {
        char t[] = "/tmp/jiffy_sched_test_XXXXXX";
        g_tmp = mkdtemp(t);
        g_repo = g_tmp + "/repo";
        // Same weights (seeded) in every model: results compare across them.
        g_ok = make_model("inl", 16, 2, "execution: inline\n") &&
               make_model("bat", 16, 2, "max_batch_size: 8\ndynamic_batching:\n  max_queue_delay_us: 400000\n  preferred_batch_sizes: [4]\n") &&
               make_model("slow", 256, 40, "max_queue_size: 2\n") &&
               make_model("slowt", 256, 40, "max_queue_size: 64\n");
        if (!g_ok) return;
        g_server = new Server;
        if (!g_server->start(JIFFY_BINARY, {"--model-repository", g_repo}, g_tmp + "/server.log")) g_ok = false;
    }
    void TearDown() override {
        if (g_server) {
            g_server->signal(SIGTERM);
            g_server->wait_exit(5000);
            delete g_server;
        }
        fs::remove_all(g_tmp);
    }
};
::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Env);

std::string req_body(int rows, int d, unsigned seed, int64_t timeout_us = 0) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> x(size_t(rows * d));
    for (float& v : x) v = u(rng);
    json j{{"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {rows, d}}, {"data", x}}}}};
    if (timeout_us) j["parameters"] = {{"timeout", timeout_us}};
    return j.dump();
}

std::string post(const std::string& model, const std::string& body) {
    return "POST /v2/models/" + model + "/infer HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
}

double metric(const std::string& text, const std::string& series) {
    size_t p = text.find(series + " ");
    return p == std::string::npos ? -1 : std::atof(text.c_str() + p + series.size() + 1);
}

#define NEED_ENV() \
    if (!g_ok) GTEST_SKIP() << "python3-onnx not available or the server did not start"

TEST(ServeSched, ConcurrentRequestsRunAsOneBatchWithUnbatchedResults) {
    NEED_ENV();
    const int n = 4;
    std::vector<std::unique_ptr<Client>> cs;
    for (int i = 0; i < n; ++i) cs.push_back(std::make_unique<Client>(g_server->port()));
    // Requests of 1, 2, 1, 1 rows from four connections: 5 rows in at most two batches (the 400 ms
    // delay; a loaded machine may deliver the last request after the preferred size of 4 is reached),
    // so at least one batch holds rows of several requests.
    int rows[n] = {1, 2, 1, 1};
    for (int i = 0; i < n; ++i) ASSERT_TRUE(cs[size_t(i)]->send_raw(post("bat", req_body(rows[i], 16, unsigned(10 + i)))));
    Client ref(g_server->port());
    for (int i = 0; i < n; ++i) {
        Response r = cs[size_t(i)]->read_response();
        ASSERT_EQ(r.status, 200) << r.body;
        json j = json::parse(r.body);
        EXPECT_EQ(j["outputs"][0]["shape"], json({rows[i], 16}));
        Response u = ref.request("POST", "/v2/models/inl/infer", req_body(rows[i], 16, unsigned(10 + i)));
        ASSERT_EQ(u.status, 200) << u.body;
        json k = json::parse(u.body);
        ASSERT_EQ(j["outputs"][0]["data"].size(), k["outputs"][0]["data"].size());
        for (size_t e = 0; e < k["outputs"][0]["data"].size(); ++e)
            EXPECT_NEAR(j["outputs"][0]["data"][e].get<double>(), k["outputs"][0]["data"][e].get<double>(), 1e-5) << i << " " << e;
    }
    std::string m = ref.request("GET", "/metrics").body;
    // All four in one run of 5 rows: the batch histogram's count is 1 with no run of one row.
    EXPECT_LE(metric(m, "jiffy_inference_batch_size_count{model=\"bat\",version=\"1\"}"), 2) << m;
    EXPECT_EQ(metric(m, "jiffy_inference_batch_size_sum{model=\"bat\",version=\"1\"}"), 5);
    // A batch dim over max_batch_size is a 400 naming the limit.
    Response r = ref.request("POST", "/v2/models/bat/infer", req_body(9, 16, 1));
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(r.body.find("max_batch_size"), std::string::npos) << r.body;
}

TEST(ServeSched, OverloadIsRejectedAtOnceWith503AndRetryAfter) {
    NEED_ENV();
    const int n = 12;
    std::vector<std::unique_ptr<Client>> cs;
    for (int i = 0; i < n; ++i) cs.push_back(std::make_unique<Client>(g_server->port()));
    std::string body = req_body(1, 256, 3);
    for (int i = 0; i < n; ++i) ASSERT_TRUE(cs[size_t(i)]->send_raw(post("slow", body)));
    int ok = 0, rejected = 0;
    for (int i = 0; i < n; ++i) {
        Response r = cs[size_t(i)]->read_response();
        if (r.status == 200) ++ok;
        if (r.status == 503) {
            ++rejected;
            EXPECT_FALSE(r.header("retry-after").empty());
            EXPECT_GE(std::atoi(r.header("retry-after").c_str()), 1);
            EXPECT_NE(r.body.find("overloaded"), std::string::npos) << r.body;
        }
    }
    EXPECT_EQ(ok + rejected, n);
    EXPECT_GE(ok, 1);
    EXPECT_GE(rejected, 1);  // queue limit 2 against 12 simultaneous requests
    Client c(g_server->port());
    std::string m = c.request("GET", "/metrics").body;
    EXPECT_EQ(metric(m, "jiffy_inference_rejections_total{model=\"slow\",version=\"1\"}"), rejected);
}

TEST(ServeSched, TimeoutExpiredInQueueFailsWithoutRunning) {
    NEED_ENV();
    std::vector<std::unique_ptr<Client>> cs;
    for (int i = 0; i < 5; ++i) cs.push_back(std::make_unique<Client>(g_server->port()));
    std::string body = req_body(1, 256, 4);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(cs[size_t(i)]->send_raw(post("slowt", body)));
    // Behind four runs of the slow model, a 1 us timeout expires in the queue.
    ASSERT_TRUE(cs[4]->send_raw(post("slowt", req_body(1, 256, 4, 1))));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(cs[size_t(i)]->read_response().status, 200);
    Response r = cs[4]->read_response();
    EXPECT_EQ(r.status, 504) << r.body;
    EXPECT_NE(r.body.find("timeout"), std::string::npos) << r.body;
    // The header form, and bad values.
    Client c(g_server->port());
    r = c.request("POST", "/v2/models/slowt/infer", req_body(1, 256, 4), {{"Timeout", "abc"}});
    EXPECT_EQ(r.status, 400);
    r = c.request("POST", "/v2/models/slowt/infer", req_body(1, 256, 4, -1));
    EXPECT_EQ(r.status, 400);
    std::string m = c.request("GET", "/metrics").body;
    EXPECT_GE(metric(m, "jiffy_inference_timeouts_total{model=\"slowt\",version=\"1\"}"), 1);
}

TEST(ServeSched, MetricsExposeHistogramsAndCounters) {
    NEED_ENV();
    Client c(g_server->port());
    ASSERT_EQ(c.request("POST", "/v2/models/inl/infer", req_body(1, 16, 1)).status, 200);
    std::string m = c.request("GET", "/metrics").body;
    for (const char* s : {"# TYPE jiffy_inference_requests_total counter", "# TYPE jiffy_inference_failures_total counter",
                          "# TYPE jiffy_inference_rejections_total counter", "# TYPE jiffy_cache_hits_total counter",
                          "# TYPE jiffy_queue_depth gauge", "# TYPE jiffy_queue_limit gauge",
                          "# TYPE jiffy_inference_request_duration_us histogram",
                          "# TYPE jiffy_inference_queue_duration_us histogram",
                          "# TYPE jiffy_inference_compute_duration_us histogram", "# TYPE jiffy_inference_batch_size histogram",
                          "jiffy_inference_compute_duration_us_bucket{model=\"inl\",version=\"1\",le=\"+Inf\"}"})
        EXPECT_NE(m.find(s), std::string::npos) << s;
    EXPECT_GE(metric(m, "jiffy_inference_requests_total{model=\"inl\",version=\"1\"}"), 1);
    EXPECT_EQ(metric(m, "jiffy_queue_limit{model=\"slow\",version=\"1\"}"), 2);
    // A bad scheduling key in config.yaml names file and line.
    write(g_repo + "/badcfg/config.yaml", "max_batch_size: 4\ndynamic_batching:\n  max_delay: 3\n");
    fs::create_directories(g_repo + "/badcfg/1");
    fs::copy_file(g_repo + "/inl/1/model.onnx", g_repo + "/badcfg/1/model.onnx");
    Response r = c.request("POST", "/v2/repository/models/badcfg/load");
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(r.body.find("config.yaml:3: unknown key 'max_delay'"), std::string::npos) << r.body;
}

}  // namespace

// `jiffy serve` end to end: the real server binary on an ephemeral loopback port, driven over
// real HTTP; results compared with the engine run in-process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "jiffy/jiffy.hpp"
#include "serve_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using serve_test::Client;
using serve_test::Response;
using serve_test::Server;

namespace {

const std::string kSrc = JIFFY_SOURCE_DIR;
const std::string kBin = JIFFY_BINARY;
const std::string kModels = kSrc + "/.cache/models/";

std::string g_repo;  // the test repository
std::string g_tmp;
bool g_types = false;  // types model generated (python3-onnx available)
Server* g_server = nullptr;

void write(const std::string& p, const std::string& s) {
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << s;
}

void put_model(const std::string& src, const std::string& name, int version) {
    fs::create_directories(g_repo + "/" + name + "/" + std::to_string(version));
    fs::copy_file(src, g_repo + "/" + name + "/" + std::to_string(version) + "/model.onnx",
                  fs::copy_options::overwrite_existing);
}

std::vector<float> random_floats(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// The engine's own output for a one-input float model.
std::vector<float> engine_run(const std::string& model, const std::string& input, const std::vector<int64_t>& shape,
                              const std::vector<float>& x, size_t out_index = 0) {
    namespace ja = jiffy::api;
    ja::Error err;
    auto m = ja::Model::load(model, &err);
    EXPECT_FALSE(err) << err.message;
    auto plan = m.compile({{input, shape}}, &err);
    EXPECT_FALSE(err) << err.message;
    auto r = plan.runner();
    std::memcpy(r.input(0), x.data(), x.size() * 4);
    EXPECT_FALSE(r.run());
    const float* y = static_cast<const float*>(r.output(out_index));
    return std::vector<float>(y, y + plan.outputs()[out_index].nbytes / 4);
}

json jarvis_request(const std::vector<float>& x) {
    return json{{"inputs", {{{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}}, {"data", x}}}}};
}

Response post_json(Client& c, const std::string& path, const json& j) { return c.request("POST", path, j.dump()); }

std::string err_of(const Response& r) {
    try {
        return json::parse(r.body).at("error").get<std::string>();
    } catch (...) {
        return "<no error field: " + r.body + ">";
    }
}

class ServeEnv : public ::testing::Environment {
public:
    void SetUp() override {
        char tmpl[] = "/tmp/jiffy_serve_test_XXXXXX";
        g_tmp = mkdtemp(tmpl);
        g_repo = g_tmp + "/repo";
        put_model(kModels + "hey_jarvis_v0.1.onnx", "jarvis", 1);
        write(g_repo + "/jarvis/config.yaml", "# hey jarvis: fixed input shape\ninputs:\n  x.1: [1, 16, 96]\nmax_request_bytes: 100000\n");
        put_model(kModels + "mlp_64_128_128_10.onnx", "mlp", 1);
        put_model(kModels + "mlp_64_128_128_10.onnx", "mlp", 3);
        write(g_repo + "/mlp/config.yaml", "version_policy: all\n");
        put_model(kModels + "silero_vad_v5.onnx", "silero", 1);
        fs::create_directories(g_repo + "/types/1");
        g_types = std::system(("/usr/bin/python3 " + kSrc + "/tests/serve/make_types_model.py " + g_repo +
                               "/types/1 2>/dev/null").c_str()) == 0;
        if (!g_types) fs::remove_all(g_repo + "/types");
        g_server = new Server;
        ASSERT_TRUE(g_server->start(kBin, {"--model-repository", g_repo, "--read-timeout-ms", "400"}, g_tmp + "/server.log"))
            << "server did not start; see " << g_tmp << "/server.log";
    }
    void TearDown() override {
        delete g_server;
        g_server = nullptr;
        fs::remove_all(g_tmp);
    }
};

const auto* kEnv = ::testing::AddGlobalTestEnvironment(new ServeEnv);

int port() { return g_server->port(); }

}  // namespace

TEST(ServeHealth, LiveReadyAndServerMetadata) {
    Client c(port());
    ASSERT_TRUE(c.ok());
    Response r = c.request("GET", "/v2/health/live");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(json::parse(r.body)["live"], true);
    r = c.request("GET", "/v2/health/ready");
    EXPECT_EQ(r.status, 200);
    r = c.request("GET", "/v2");
    ASSERT_EQ(r.status, 200);
    json j = json::parse(r.body);
    EXPECT_EQ(j["name"], "jiffy");
    EXPECT_NE(j["extensions"].dump().find("binary_tensor_data"), std::string::npos);
    EXPECT_NE(j["extensions"].dump().find("model_repository"), std::string::npos);
    // Keep-alive: many requests on one connection.
    for (int i = 0; i < 50; ++i) ASSERT_EQ(c.request("GET", "/v2/health/live").status, 200);
}

TEST(ServeMetadata, ModelsVersionsShapes) {
    Client c(port());
    Response r = c.request("GET", "/v2/models/jarvis");
    ASSERT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body);
    EXPECT_EQ(j["name"], "jarvis");
    EXPECT_EQ(j["platform"], "onnx");
    EXPECT_EQ(j["versions"], json({"1"}));
    EXPECT_EQ(j["inputs"][0]["name"], "x.1");
    EXPECT_EQ(j["inputs"][0]["datatype"], "FP32");
    EXPECT_EQ(j["inputs"][0]["shape"], json({1, 16, 96}));
    EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
    EXPECT_EQ(j["outputs"][0]["shape"], json({1, 1}));

    r = c.request("GET", "/v2/models/mlp");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(json::parse(r.body)["versions"], json({"1", "3"}));
    EXPECT_EQ(c.request("GET", "/v2/models/mlp/versions/3").status, 200);
    EXPECT_EQ(c.request("GET", "/v2/models/mlp/versions/1/ready").status, 200);

    r = c.request("GET", "/v2/models/silero");
    ASSERT_EQ(r.status, 200);
    j = json::parse(r.body);
    EXPECT_EQ(j["inputs"][0]["shape"], json({-1, -1}));  // symbolic dims
    EXPECT_EQ(j["inputs"][2]["name"], "sr");
    EXPECT_EQ(j["inputs"][2]["datatype"], "INT64");
    EXPECT_EQ(j["inputs"][2]["shape"], json::array());

    r = c.request("GET", "/v2/models/nosuch");
    EXPECT_EQ(r.status, 404);
    EXPECT_NE(err_of(r).find("nosuch"), std::string::npos);
    r = c.request("GET", "/v2/models/mlp/versions/2");
    EXPECT_EQ(r.status, 404);
    EXPECT_NE(err_of(r).find("version '2'"), std::string::npos);
    EXPECT_EQ(c.request("GET", "/v2/models/nosuch/ready").status, 404);
    EXPECT_EQ(c.request("GET", "/v2/models/jarvis/ready").status, 200);
    EXPECT_EQ(c.request("GET", "/v2/nothing").status, 404);
    r = c.request("POST", "/v2/models/jarvis");
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(r.header("allow"), "GET");
}

TEST(ServeInfer, JsonMatchesEngine) {
    auto x = random_floats(16 * 96, 1);
    auto want = engine_run(kModels + "hey_jarvis_v0.1.onnx", "x.1", {1, 16, 96}, x);
    Client c(port());
    json req = jarvis_request(x);
    req["id"] = "req-7";
    Response r = post_json(c, "/v2/models/jarvis/infer", req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json");
    json j = json::parse(r.body);
    EXPECT_EQ(j["model_name"], "jarvis");
    EXPECT_EQ(j["model_version"], "1");
    EXPECT_EQ(j["id"], "req-7");
    ASSERT_EQ(j["outputs"].size(), 1u);
    EXPECT_EQ(j["outputs"][0]["name"], "53");
    EXPECT_EQ(j["outputs"][0]["shape"], json({1, 1}));
    auto got = j["outputs"][0]["data"].get<std::vector<float>>();
    EXPECT_EQ(got, want);  // bit-exact: floats are printed with 9 significant digits

    // Nested data and a versioned path give the same.
    json nested = json::array();
    json rows = json::array();
    for (int i = 0; i < 16; ++i) rows.push_back(std::vector<float>(x.begin() + i * 96, x.begin() + (i + 1) * 96));
    nested.push_back(rows);
    req["inputs"][0]["data"] = nested;
    r = post_json(c, "/v2/models/jarvis/versions/1/infer", req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["outputs"][0]["data"].get<std::vector<float>>(), want);

    // mlp, both versions.
    auto xm = random_floats(64, 2);
    auto wm = engine_run(kModels + "mlp_64_128_128_10.onnx", "x", {1, 64}, xm);
    for (const char* path : {"/v2/models/mlp/infer", "/v2/models/mlp/versions/1/infer"}) {
        r = post_json(c, path, json{{"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {1, 64}}, {"data", xm}}}}});
        ASSERT_EQ(r.status, 200) << r.body;
        EXPECT_EQ(json::parse(r.body)["outputs"][0]["data"].get<std::vector<float>>(), wm);
    }
    EXPECT_EQ(json::parse(r.body)["model_version"], "1");
}

TEST(ServeInfer, BinaryMatchesEngine) {
    auto x = random_floats(16 * 96, 3);
    auto want = engine_run(kModels + "hey_jarvis_v0.1.onnx", "x.1", {1, 16, 96}, x);
    json head{{"inputs", {{{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}},
                           {"parameters", {{"binary_data_size", x.size() * 4}}}}}},
              {"parameters", {{"binary_data_output", true}}}};
    std::string h = head.dump();
    std::string body = h + std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4);
    Client c(port());
    Response r = c.request("POST", "/v2/models/jarvis/infer", body,
                           {{"Inference-Header-Content-Length", std::to_string(h.size())},
                            {"Content-Type", "application/octet-stream"}});
    ASSERT_EQ(r.status, 200) << r.body;
    size_t hl = size_t(std::atoll(r.header("inference-header-content-length").c_str()));
    ASSERT_GT(hl, 0u);
    json j = json::parse(r.body.substr(0, hl));
    EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 4);
    EXPECT_FALSE(j["outputs"][0].contains("data"));
    ASSERT_EQ(r.body.size(), hl + 4);
    float y;
    std::memcpy(&y, r.body.data() + hl, 4);
    EXPECT_EQ(y, want[0]);

    // Binary input, JSON output (per-output binary_data false overrides nothing requested).
    head.erase("parameters");
    head["outputs"] = {{{"name", "53"}}};
    h = head.dump();
    body = h + std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4);
    r = c.request("POST", "/v2/models/jarvis/infer", body, {{"Inference-Header-Content-Length", std::to_string(h.size())}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("inference-header-content-length"), "");
    EXPECT_EQ(json::parse(r.body)["outputs"][0]["data"][0].get<float>(), want[0]);

    // JSON input, binary output requested per output.
    json req = jarvis_request(x);
    req["outputs"] = {{{"name", "53"}, {"parameters", {{"binary_data", true}}}}};
    r = post_json(c, "/v2/models/jarvis/infer", req);
    ASSERT_EQ(r.status, 200) << r.body;
    hl = size_t(std::atoll(r.header("inference-header-content-length").c_str()));
    ASSERT_EQ(r.body.size(), hl + 4);
    std::memcpy(&y, r.body.data() + hl, 4);
    EXPECT_EQ(y, want[0]);
}

TEST(ServeInfer, DynamicShapesAndOutputSubset) {
    // Silero VAD v5: symbolic dims, compiled per request shape; sr (int64 scalar) is frozen.
    namespace ja = jiffy::api;
    const int n = 512;
    auto audio = random_floats(n, 4);
    std::vector<float> state(2 * 1 * 128, 0.f);
    int64_t sr = 16000;
    ja::Error err;
    auto m = ja::Model::load(kModels + "silero_vad_v5.onnx", &err);
    ASSERT_FALSE(err) << err.message;
    ja::FrozenInputs fz{{"sr", std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&sr), reinterpret_cast<uint8_t*>(&sr) + 8)}};
    auto plan = m.compile({{"input", {1, n}}, {"state", {2, 1, 128}}, {"sr", {}}}, &err, fz);
    ASSERT_FALSE(err) << err.message;
    auto run = plan.runner();
    std::memcpy(run.input(0), audio.data(), n * 4);
    std::memcpy(run.input(1), state.data(), state.size() * 4);
    std::memcpy(run.input(2), &sr, 8);
    ASSERT_FALSE(run.run());
    const float* st = static_cast<const float*>(run.output(1));
    std::vector<float> want_state(st, st + 256);

    json req{{"inputs",
              {{{"name", "input"}, {"datatype", "FP32"}, {"shape", {1, n}}, {"data", audio}},
               {{"name", "state"}, {"datatype", "FP32"}, {"shape", {2, 1, 128}}, {"data", state}},
               {{"name", "sr"}, {"datatype", "INT64"}, {"shape", json::array()}, {"data", {sr}}}}},
             {"outputs", {{{"name", "stateN"}}}}};
    Client c(port());
    for (int rep = 0; rep < 2; ++rep) {  // second time: the engine's plan cache
        Response r = post_json(c, "/v2/models/silero/infer", req);
        ASSERT_EQ(r.status, 200) << r.body;
        json j = json::parse(r.body);
        ASSERT_EQ(j["outputs"].size(), 1u);
        EXPECT_EQ(j["outputs"][0]["name"], "stateN");
        EXPECT_EQ(j["outputs"][0]["shape"], json({2, 1, 128}));
        EXPECT_EQ(j["outputs"][0]["data"].get<std::vector<float>>(), want_state);
    }
    // Another shape compiles another plan.
    req["inputs"][0]["shape"] = {1, 256};
    req["inputs"][0]["data"] = random_floats(256, 5);
    Response r = post_json(c, "/v2/models/silero/infer", req);
    EXPECT_EQ(r.status, 200) << r.body;
    // Both outputs, in the requested order.
    req["outputs"] = {{{"name", "stateN"}}, {{"name", "output"}}};
    r = post_json(c, "/v2/models/silero/infer", req);
    ASSERT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body);
    EXPECT_EQ(j["outputs"][0]["name"], "stateN");
    EXPECT_EQ(j["outputs"][1]["name"], "output");
}

TEST(ServeInfer, AllDatatypesJsonAndBinary) {
    if (!g_types) GTEST_SKIP() << "python3-onnx not available to make the types model";
    json req{{"inputs", json::array()}};
    req["inputs"].push_back({{"name", "in_b"}, {"datatype", "BOOL"}, {"shape", {3}}, {"data", {true, false, true}}});
    req["inputs"].push_back({{"name", "in_u8"}, {"datatype", "UINT8"}, {"shape", {3}}, {"data", {0, 255, 7}}});
    req["inputs"].push_back({{"name", "in_u16"}, {"datatype", "UINT16"}, {"shape", {3}}, {"data", {0, 65535, 7}}});
    req["inputs"].push_back({{"name", "in_u32"}, {"datatype", "UINT32"}, {"shape", {3}}, {"data", {0, 4294967295u, 7}}});
    req["inputs"].push_back({{"name", "in_u64"}, {"datatype", "UINT64"}, {"shape", {3}}, {"data", {0, 18446744073709551615ull, 7}}});
    req["inputs"].push_back({{"name", "in_i8"}, {"datatype", "INT8"}, {"shape", {3}}, {"data", {-128, 127, 0}}});
    req["inputs"].push_back({{"name", "in_i16"}, {"datatype", "INT16"}, {"shape", {3}}, {"data", {-32768, 32767, 0}}});
    req["inputs"].push_back({{"name", "in_i32"}, {"datatype", "INT32"}, {"shape", {3}}, {"data", {-2147483648ll, 2147483647, 0}}});
    req["inputs"].push_back({{"name", "in_i64"}, {"datatype", "INT64"}, {"shape", {3}}, {"data", {INT64_MIN, INT64_MAX, -1}}});
    req["inputs"].push_back({{"name", "in_f16"}, {"datatype", "FP16"}, {"shape", {3}}, {"data", {0.5, -2.0, 1024.0}}});
    req["inputs"].push_back({{"name", "in_f32"}, {"datatype", "FP32"}, {"shape", {3}}, {"data", {0.1f, -1e30f, 3.0f}}});
    req["inputs"].push_back({{"name", "in_f64"}, {"datatype", "FP64"}, {"shape", {3}}, {"data", {0.1, -1e300, 3.0}}});
    Client c(port());
    Response r = post_json(c, "/v2/models/types/infer", req);
    ASSERT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body);
    ASSERT_EQ(j["outputs"].size(), 12u);
    for (size_t i = 0; i < 12; ++i) {
        EXPECT_EQ(j["outputs"][i]["datatype"], req["inputs"][i]["datatype"]) << i;
        if (req["inputs"][i]["datatype"] == "FP32")
            EXPECT_EQ(j["outputs"][i]["data"].get<std::vector<float>>(), req["inputs"][i]["data"].get<std::vector<float>>());
        else
            EXPECT_EQ(j["outputs"][i]["data"], req["inputs"][i]["data"]) << j["outputs"][i]["name"];
    }
    // Out-of-range and wrong-kind elements.
    json bad = req;
    bad["inputs"][1]["data"] = {0, 256, 7};
    r = post_json(c, "/v2/models/types/infer", bad);
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("in_u8"), std::string::npos) << err_of(r);
    bad = req;
    bad["inputs"][0]["data"] = {1, 0, 1};
    r = post_json(c, "/v2/models/types/infer", bad);
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("true or false"), std::string::npos) << err_of(r);
    bad = req;
    bad["inputs"][8]["data"] = {1.5, 0, 1};
    r = post_json(c, "/v2/models/types/infer", bad);
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("integer"), std::string::npos) << err_of(r);

    // BOOL and INT16 as binary: one byte per bool.
    json head{{"inputs", json::array()}, {"parameters", {{"binary_data_output", true}}}};
    std::string bin;
    for (size_t i = 0; i < 12; ++i) {
        json t = req["inputs"][i];
        if (i == 0) {
            t.erase("data");
            t["parameters"] = {{"binary_data_size", 3}};
            bin += std::string("\x01\x00\x01", 3);
        } else if (i == 6) {
            t.erase("data");
            t["parameters"] = {{"binary_data_size", 6}};
            int16_t v[3] = {-5, 6, 7};
            bin += std::string(reinterpret_cast<char*>(v), 6);
        }
        head["inputs"].push_back(t);
    }
    head["outputs"] = {{{"name", "out_b"}}, {{"name", "out_i16"}}, {{"name", "out_i64"}, {"parameters", {{"binary_data", false}}}}};
    std::string h = head.dump();
    r = c.request("POST", "/v2/models/types/infer", h + bin, {{"Inference-Header-Content-Length", std::to_string(h.size())}});
    ASSERT_EQ(r.status, 200) << r.body;
    size_t hl = size_t(std::atoll(r.header("inference-header-content-length").c_str()));
    j = json::parse(r.body.substr(0, hl));
    EXPECT_EQ(j["outputs"][2]["data"], req["inputs"][8]["data"]);
    EXPECT_EQ(r.body.substr(hl), bin);
}

TEST(ServeErrors, TensorErrorsName400) {
    Client c(port());
    auto x = random_floats(16 * 96, 6);
    auto expect400 = [&](const std::string& body, const std::vector<std::string>& needles,
                         std::vector<std::pair<std::string, std::string>> hdr = {}) {
        Response r = c.request("POST", "/v2/models/jarvis/infer", body, hdr);
        EXPECT_EQ(r.status, 400) << body.substr(0, 200);
        std::string e = err_of(r);
        for (const auto& n : needles) EXPECT_NE(e.find(n), std::string::npos) << "'" << n << "' not in: " << e;
    };
    json req = jarvis_request(x);
    req["inputs"][0]["datatype"] = "INT64";
    expect400(req.dump(), {"x.1", "INT64", "FP32"});
    req = jarvis_request(x);
    req["inputs"][0]["shape"] = {1, 16, 95};
    expect400(req.dump(), {"x.1", "[1,16,95]", "[1,16,96]"});
    req = jarvis_request(std::vector<float>(x.begin(), x.end() - 1));
    expect400(req.dump(), {"x.1", "1535", "1536"});
    req = jarvis_request(x);
    req["inputs"][0]["data"][5] = "a";
    expect400(req.dump(), {"x.1", "element 5", "number"});
    expect400(json{{"inputs", json::array()}}.dump(), {"missing input 'x.1'"});
    req = jarvis_request(x);
    req["inputs"][0]["name"] = "y";
    expect400(req.dump(), {"unexpected input 'y'", "x.1"});
    expect400("{\"inputs\": [", {"malformed JSON"});
    expect400("[1,2]", {"JSON object"});
    req = jarvis_request(x);
    req["outputs"] = {{{"name", "nope"}}};
    expect400(req.dump(), {"unknown output 'nope'", "53"});
    // Binary byte count.
    json head{{"inputs", {{{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}},
                           {"parameters", {{"binary_data_size", 6140}}}}}}};
    std::string h = head.dump();
    expect400(h + std::string(6140, '\0'), {"x.1", "6140", "6144"}, {{"Inference-Header-Content-Length", std::to_string(h.size())}});
    head["inputs"][0]["parameters"]["binary_data_size"] = 6144;
    h = head.dump();
    expect400(h + std::string(6000, '\0'), {"x.1", "binary data ends"}, {{"Inference-Header-Content-Length", std::to_string(h.size())}});
    expect400(h + std::string(6150, '\0'), {"6 bytes of binary data"}, {{"Inference-Header-Content-Length", std::to_string(h.size())}});
    expect400(h, {"Inference-Header-Content-Length"}, {{"Inference-Header-Content-Length", "999999"}});
    // Unknown model / version on infer.
    Response r = post_json(c, "/v2/models/nosuch/infer", jarvis_request(x));
    EXPECT_EQ(r.status, 404);
    r = post_json(c, "/v2/models/jarvis/versions/9/infer", jarvis_request(x));
    EXPECT_EQ(r.status, 404);
    // The connection survived all of that.
    EXPECT_EQ(post_json(c, "/v2/models/jarvis/infer", jarvis_request(x)).status, 200);
}

TEST(ServeErrors, HttpLimitsAndMalformedRequests) {
    auto x = random_floats(16 * 96, 7);
    {  // Body over the model's max_request_bytes (100000): 413 and the connection closes.
        Client c(port());
        Response r = c.request("POST", "/v2/models/jarvis/infer", std::string(200000, ' '));
        EXPECT_EQ(r.status, 413);
        EXPECT_NE(err_of(r).find("100000"), std::string::npos) << r.body;
        EXPECT_EQ(r.header("connection"), "close");
        EXPECT_TRUE(c.closed_by_peer());
    }
    {  // Content-Length shorter than the body sent: the rest is garbage as a next request: 400, closed.
        Client c(port());
        std::string body = jarvis_request(x).dump();
        c.send_raw("POST /v2/models/jarvis/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size() - 10) +
                   "\r\n\r\n" + body);
        Response r = c.read_response();
        EXPECT_EQ(r.status, 400);
        r = c.read_response();
        EXPECT_EQ(r.status, 400);
        EXPECT_TRUE(c.closed_by_peer());
    }
    {  // Content-Length longer than the body: read timeout (400 ms here): 408, closed.
        Client c(port());
        c.send_raw("POST /v2/models/jarvis/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inputs\"");
        Response r = c.read_response();
        EXPECT_EQ(r.status, 408);
        EXPECT_TRUE(c.closed_by_peer());
    }
    {  // Slow client that never finishes its headers.
        Client c(port());
        c.send_raw("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n");
        EXPECT_EQ(c.read_response().status, 408);
    }
    auto raw = [&](const std::string& req, int want, const std::string& needle) {
        Client c(port());
        c.send_raw(req);
        Response r = c.read_response();
        EXPECT_EQ(r.status, want) << req.substr(0, 80);
        EXPECT_NE(err_of(r).find(needle), std::string::npos) << err_of(r);
        EXPECT_TRUE(c.closed_by_peer());
    };
    raw("GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n", 431, "exceeds");
    raw("GET /v2 HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", 413, "exceeds the limit");
    raw("GET /v2 HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", 400, "Content-Length");
    raw("GET /v2 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "conflicting");
    raw("POST /v2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "Transfer-Encoding");  // chunked: serve_conformance
    raw("GET /v2 HTTP/1.1\r\n\r\n", 400, "Host");
    raw("GET  /v2 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line");
    raw("GET /v2 HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP/1");
    raw("GET /v2 HTTP/1.1\nHost: x\r\n\r\n", 400, "bare LF");
    raw("GET /v2 HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "folding");
    raw("GET /v2 HTTP/1.1\r\nHo st: x\r\n\r\n", 400, "header name");
    {  // HTTP/1.0 without keep-alive: answered, then closed.
        Client c(port());
        c.send_raw("GET /v2/health/live HTTP/1.0\r\n\r\n");
        EXPECT_EQ(c.read_response().status, 200);
        EXPECT_TRUE(c.closed_by_peer());
    }
    {  // Expect: 100-continue gets an interim response, then the real one.
        Client c(port());
        std::string body = jarvis_request(x).dump();
        c.send_raw("POST /v2/models/jarvis/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        c.send_raw(body);
        EXPECT_EQ(c.read_response().status, 200);
    }
    {  // Junk bytes never crash the server.
        std::mt19937 rng(9);
        for (int i = 0; i < 20; ++i) {
            Client c(port());
            std::string junk(size_t(rng() % 3000), '\0');
            for (char& ch : junk) ch = char(rng());
            c.send_raw(junk + "\r\n\r\n");
            c.read_response();
        }
        Client c(port());
        EXPECT_EQ(c.request("GET", "/v2/health/live").status, 200);
    }
}

TEST(ServeRepository, IndexLoadUnload) {
    Client c(port());
    Response r = c.request("POST", "/v2/repository/index");
    ASSERT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body);
    int ready = 0;
    for (const json& e : j)
        if (e["state"] == "READY") ++ready;
    EXPECT_GE(ready, 5);  // jarvis, mlp 1+3, silero (+types)

    EXPECT_EQ(c.request("POST", "/v2/repository/models/mlp/unload").status, 200);
    r = c.request("GET", "/v2/models/mlp/ready");
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(json::parse(r.body)["ready"], false);
    r = post_json(c, "/v2/models/mlp/infer", json{{"inputs", json::array()}});
    EXPECT_EQ(r.status, 404);
    r = c.request("POST", "/v2/repository/index", "{\"ready\": true}");
    EXPECT_EQ(r.body.find("\"mlp\""), std::string::npos);
    r = c.request("POST", "/v2/repository/index", "{}");
    EXPECT_NE(r.body.find("UNAVAILABLE"), std::string::npos);
    EXPECT_EQ(c.request("POST", "/v2/repository/models/mlp/load").status, 200);
    EXPECT_EQ(c.request("GET", "/v2/models/mlp/versions/3/ready").status, 200);

    r = c.request("POST", "/v2/repository/models/nosuch/load");
    EXPECT_EQ(r.status, 404);
    EXPECT_EQ(c.request("POST", "/v2/repository/models/nosuch/unload").status, 404);
    EXPECT_EQ(c.request("POST", "/v2/repository/models/bad%20name/load").status, 400);

    // A new model appears on disk and is loaded; a bad config names its line.
    put_model(kModels + "mlp_64_128_128_10.onnx", "late", 1);
    write(g_repo + "/late/config.yaml", "inputs:\n  x: [1, 64]\nbatch_size: 4\n");
    r = c.request("POST", "/v2/repository/models/late/load");
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("config.yaml:3: unknown key 'batch_size'"), std::string::npos) << err_of(r);
    write(g_repo + "/late/config.yaml", "inputs:\n  x: [1, 64, 1]\n");
    r = c.request("POST", "/v2/repository/models/late/load");
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(err_of(r).find("rank"), std::string::npos) << err_of(r);
    write(g_repo + "/late/config.yaml", "inputs:\n  x: [1, 64]\n");
    EXPECT_EQ(c.request("POST", "/v2/repository/models/late/load").status, 200);
    EXPECT_EQ(c.request("GET", "/v2/models/late/ready").status, 200);
    EXPECT_EQ(c.request("GET", "/v2/repository/index").status, 405);
}

TEST(ServeMetrics, CountersMove) {
    Client c(port());
    auto value = [&](const std::string& line_prefix) -> long long {
        Response r = c.request("GET", "/metrics");
        EXPECT_EQ(r.status, 200);
        EXPECT_NE(r.header("content-type").find("text/plain"), std::string::npos);
        size_t p = r.body.find(line_prefix);
        if (p == std::string::npos) return -1;
        return std::atoll(r.body.c_str() + p + line_prefix.size());
    };
    const std::string req_l = "jiffy_inference_requests_total{model=\"jarvis\",version=\"1\"} ";
    const std::string fail_l = "jiffy_inference_failures_total{model=\"jarvis\",version=\"1\"} ";
    const std::string inf_l = "jiffy_inference_request_duration_us_bucket{model=\"jarvis\",version=\"1\",le=\"+Inf\"} ";
    long long r0 = value(req_l), f0 = value(fail_l), b0 = value(inf_l);
    ASSERT_GE(r0, 0);
    auto x = random_floats(16 * 96, 8);
    EXPECT_EQ(post_json(c, "/v2/models/jarvis/infer", jarvis_request(x)).status, 200);
    EXPECT_EQ(post_json(c, "/v2/models/jarvis/infer", json{{"inputs", json::array()}}).status, 400);
    EXPECT_EQ(value(req_l), r0 + 2);
    EXPECT_EQ(value(fail_l), f0 + 1);
    EXPECT_EQ(value(inf_l), b0 + 2);
    Response r = c.request("GET", "/metrics");
    EXPECT_NE(r.body.find("# TYPE jiffy_inference_request_duration_us histogram"), std::string::npos);
    EXPECT_NE(r.body.find("le=\"100\""), std::string::npos);
}

TEST(ServeStartup, BadConfigAndArguments) {
    std::string repo = g_tmp + "/badrepo";
    fs::create_directories(repo + "/m/1");
    fs::copy_file(kModels + "mlp_64_128_128_10.onnx", repo + "/m/1/model.onnx");
    write(repo + "/m/config.yaml", "max_request_bytes: 10\ninputz:\n  x: [1, 64]\n");
    Server s;
    EXPECT_FALSE(s.start(kBin, {"--model-repository", repo}, g_tmp + "/bad.log"));
    EXPECT_EQ(s.wait_exit(10000), 2);
    std::ifstream f(g_tmp + "/bad.log");
    std::string log((std::istreambuf_iterator<char>(f)), {});
    EXPECT_NE(log.find("config.yaml:2: unknown key 'inputz'"), std::string::npos) << log;
    // --no-exit-on-error keeps serving, with the model unavailable.
    Server s2;
    ASSERT_TRUE(s2.start(kBin, {"--model-repository", repo, "--no-exit-on-error"}, g_tmp + "/bad2.log"));
    Client c(s2.port());
    EXPECT_EQ(c.request("GET", "/v2/models/m/ready").status, 400);
    Response r = c.request("POST", "/v2/repository/index");
    EXPECT_NE(r.body.find("inputz"), std::string::npos) << r.body;
    Server s3;
    EXPECT_FALSE(s3.start(kBin, {"--model-repository", repo, "--bogus"}, g_tmp + "/bad3.log"));
    EXPECT_EQ(s3.wait_exit(5000), 2);
}

TEST(ServeShutdown, SigtermDrainsThenExitsZero) {
    Server s;
    ASSERT_TRUE(s.start(kBin, {"--model-repository", g_repo, "--drain-ms", "300", "--metrics-port", "0"}, g_tmp + "/term.log"));
    auto x = random_floats(16 * 96, 10);
    std::string body = jarvis_request(x).dump();
    Client idle(s.port());
    ASSERT_EQ(idle.request("GET", "/v2/health/ready").status, 200);
    // A request in flight: headers and half the body sent before the signal.
    Client busy(s.port());
    busy.send_raw("POST /v2/models/jarvis/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\n\r\n" + body.substr(0, body.size() / 2));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    s.signal(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Response r = idle.request("GET", "/v2/health/ready");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(idle.request("GET", "/v2/health/live").status, 200);
    Client late(s.port());
    r = late.request("POST", "/v2/models/jarvis/infer", body);
    EXPECT_EQ(r.status, 503);
    EXPECT_NE(err_of(r).find("shutting down"), std::string::npos);
    busy.send_raw(body.substr(body.size() / 2));
    r = busy.read_response();
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(s.wait_exit(5000), 0);
}

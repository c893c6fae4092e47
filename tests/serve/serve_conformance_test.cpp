// Protocol conformance (KServe v2 / Open Inference Protocol REST + Triton's binary tensor data
// extension + HTTP/1.1) against the real server over loopback, with requests written the way
// other clients write them: Python requests/json.dumps (spaces after ':' and ',', nested data),
// curl (Expect: 100-continue, chunked, HEAD), Triton's client (binary tail), pipelining.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serve_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using serve_test::Client;
using serve_test::Server;

namespace {

const std::string kSrc = JIFFY_SOURCE_DIR;
const std::string kBin = JIFFY_BINARY;
std::string g_tmp;
Server* g_server = nullptr;

// A raw connection: what is sent and received, byte for byte.
class Raw {
public:
    explicit Raw(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fd_ = -1;
    }
    ~Raw() {
        if (fd_ >= 0) ::close(fd_);
    }
    void send(const std::string& s) {
        size_t off = 0;
        while (off < s.size()) {
            ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return;
            off += size_t(n);
        }
    }
    // Everything that arrives until `done(buffer)` or timeout/EOF.
    template <typename F>
    std::string read_until(F done, int timeout_ms = 3000) {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        while (!done(buf_) && std::chrono::steady_clock::now() < end) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            char b[65536];
            ssize_t n = ::recv(fd_, b, sizeof b, 0);
            if (n <= 0) break;
            buf_.append(b, size_t(n));
        }
        return buf_;
    }
    std::string take() { return std::exchange(buf_, {}); }

private:
    int fd_ = -1;
    std::string buf_;
};

// Count of complete Content-Length-framed responses at the start of `s`.
size_t complete_responses(const std::string& s, std::vector<std::string>* bodies = nullptr) {
    size_t n = 0, p = 0;
    for (;;) {
        size_t he = s.find("\r\n\r\n", p);
        if (he == std::string::npos) return n;
        std::string head = s.substr(p, he - p);
        size_t cl = head.find("Content-Length: ");
        size_t len = cl == std::string::npos ? 0 : size_t(std::atol(head.c_str() + cl + 16));
        if (head.rfind("HTTP/1.1 100", 0) == 0) len = 0;
        if (s.size() < he + 4 + len) return n;
        if (bodies && head.rfind("HTTP/1.1 100", 0) != 0) bodies->push_back(s.substr(he + 4, len));
        if (head.rfind("HTTP/1.1 100", 0) != 0) ++n;
        p = he + 4 + len;
    }
}

std::string run(const std::string& cmd) {
    std::string out;
    FILE* f = popen(cmd.c_str(), "r");
    if (!f) return out;
    char b[4096];
    size_t n;
    while ((n = fread(b, 1, sizeof b, f)) > 0) out.append(b, n);
    pclose(f);
    return out;
}

std::string url(const std::string& path) { return "http://127.0.0.1:" + std::to_string(g_server->port()) + path; }

// A Python-json.dumps-style infer body for the `types` model: every input, ids and parameters at
// every level (nested data: CurlItself, with jarvis's 1x16x96 input).
std::string types_body(const std::string& extra_outputs = "") {
    return R"({"id": "req-7", "parameters": {"sequence_id": 0, "priority": 1},
 "inputs": [
  {"name": "in_b", "shape": [4], "datatype": "BOOL", "parameters": {"note": "x"}, "data": [true, false, false, true]},
  {"name": "in_u8", "shape": [4], "datatype": "UINT8", "data": [0, 255, 1, 2]},
  {"name": "in_u16", "shape": [4], "datatype": "UINT16", "data": [0, 65535, 7, 8]},
  {"name": "in_u32", "shape": [4], "datatype": "UINT32", "data": [0, 4294967295, 7, 8]},
  {"name": "in_u64", "shape": [4], "datatype": "UINT64", "data": [0, 18446744073709551615, 7, 8]},
  {"name": "in_i8", "shape": [4], "datatype": "INT8", "data": [-128, 127, -1, 0]},
  {"name": "in_i16", "shape": [4], "datatype": "INT16", "data": [-32768, 32767, -1, 0]},
  {"name": "in_i32", "shape": [4], "datatype": "INT32", "data": [-2147483648, 2147483647, -1, 0]},
  {"name": "in_i64", "shape": [4], "datatype": "INT64", "data": [-9223372036854775808, 9223372036854775807, -1, 0]},
  {"name": "in_f16", "shape": [4], "datatype": "FP16", "data": [0.5, -2.0, 65504.0, 0.0]},
  {"name": "in_f32", "shape": [4], "datatype": "FP32", "data": [0.1, -2.5e-3, 3.0e+10, -0.0]},
  {"name": "in_f64", "shape": [4], "datatype": "FP64", "data": [0.1, -1e-300, 1.7976931348623157e308, 2]}
 ])" + extra_outputs + "}";
}

class Conformance : public ::testing::Environment {
public:
    void SetUp() override {
        char tmpl[] = "/tmp/jiffy_serve_conf_XXXXXX";
        g_tmp = mkdtemp(tmpl);
        std::string repo = g_tmp + "/repo";
        fs::create_directories(repo + "/jarvis/1");
        fs::copy_file(kSrc + "/.cache/models/hey_jarvis_v0.1.onnx", repo + "/jarvis/1/model.onnx");
        std::ofstream(repo + "/jarvis/config.yaml") << "inputs:\n  x.1: [1, 16, 96]\nmax_request_bytes: 100000\n";
        fs::create_directories(repo + "/types/1");
        ASSERT_EQ(std::system(("/usr/bin/python3 " + kSrc + "/tests/serve/make_types_model.py " + repo + "/types/1").c_str()), 0);
        g_server = new Server;
        ASSERT_TRUE(g_server->start(kBin, {"--model-repository", repo}, g_tmp + "/server.log")) << g_tmp << "/server.log";
    }
    void TearDown() override {
        delete g_server;
        fs::remove_all(g_tmp);
    }
};
const auto* g_env = ::testing::AddGlobalTestEnvironment(new Conformance);

}  // namespace

TEST(Conformance, PythonStyleJsonEveryDatatypeNestedDataIdAndParameters) {
    Client c(g_server->port());
    auto r = c.request("POST", "/v2/models/types/infer", types_body(),
                       {{"User-Agent", "python-requests/2.31.0"}, {"Accept-Encoding", "gzip, deflate"}, {"Accept", "*/*"},
                        {"Connection", "keep-alive"}, {"Content-Type", "application/json"}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json");
    json j = json::parse(r.body);
    EXPECT_EQ(j["model_name"], "types");
    EXPECT_EQ(j["model_version"], "1");
    EXPECT_EQ(j["id"], "req-7");
    ASSERT_EQ(j["outputs"].size(), 12u);
    std::map<std::string, json> out;
    for (auto& o : j["outputs"]) out[o["name"]] = o;
    EXPECT_EQ(out["out_b"]["datatype"], "BOOL");
    EXPECT_EQ(out["out_b"]["shape"], json({4}));
    EXPECT_EQ(out["out_b"]["data"], json({true, false, false, true}));
    EXPECT_EQ(out["out_u8"]["data"], json({0, 255, 1, 2}));
    EXPECT_EQ(out["out_u64"]["data"][1].get<uint64_t>(), 18446744073709551615ull);
    EXPECT_EQ(out["out_i64"]["data"][0].get<int64_t>(), INT64_MIN);
    EXPECT_EQ(out["out_f16"]["datatype"], "FP16");
    EXPECT_EQ(out["out_f16"]["data"], json({0.5, -2.0, 65504.0, 0.0}));
    EXPECT_EQ(out["out_f32"]["data"][0].get<float>(), 0.1f);
    EXPECT_EQ(out["out_f32"]["data"][2].get<float>(), 3.0e10f);
    EXPECT_EQ(out["out_f64"]["data"][2].get<double>(), 1.7976931348623157e308);
    EXPECT_EQ(out["out_f64"]["data"][1].get<double>(), -1e-300);
}

TEST(Conformance, RequestedOutputsWithSpacedBinaryFlags) {
    Client c(g_server->port());
    // Request-level binary_data_output, overridden per output with "binary_data": false.
    std::string body = types_body(R"(, "parameters": {"binary_data_output": true},
        "outputs": [{"name": "out_i32", "parameters": {"binary_data": false}}, {"name": "out_u16"}])");
    body.replace(body.find(R"("parameters": {"sequence_id": 0, "priority": 1},)"), 50, "");
    auto r = c.request("POST", "/v2/models/types/infer", body, {{"Content-Type", "application/json"}});
    ASSERT_EQ(r.status, 200) << r.body;
    std::string hl = r.header("inference-header-content-length");
    ASSERT_FALSE(hl.empty());
    size_t n = std::stoul(hl);
    json j = json::parse(r.body.substr(0, n));
    ASSERT_EQ(j["outputs"].size(), 2u);
    EXPECT_EQ(j["outputs"][0]["name"], "out_i32");
    EXPECT_EQ(j["outputs"][0]["data"], json({-2147483648ll, 2147483647, -1, 0}));
    EXPECT_EQ(j["outputs"][1]["name"], "out_u16");
    EXPECT_EQ(j["outputs"][1]["parameters"]["binary_data_size"], 8);
    ASSERT_EQ(r.body.size(), n + 8);
    uint16_t u[4];
    std::memcpy(u, r.body.data() + n, 8);
    EXPECT_EQ(u[1], 65535);
    EXPECT_EQ(u[3], 8);
    // Unsupported protocol features answer 400 with what is wrong.
    auto b = c.request("POST", "/v2/models/jarvis/infer",
                       R"({"inputs": [{"name": "x.1", "shape": [1], "datatype": "BYTES", "data": ["abc"]}]})");
    EXPECT_EQ(b.status, 400);
    EXPECT_NE(b.body.find("BYTES tensors are not supported"), std::string::npos) << b.body;
    auto cl = c.request("POST", "/v2/models/types/infer",
                        types_body(R"(, "outputs": [{"name": "out_f32", "parameters": {"classification": 2}}])"));
    EXPECT_EQ(cl.status, 400);
    EXPECT_NE(cl.body.find("classification extension is not supported"), std::string::npos) << cl.body;
}

TEST(Conformance, StatusCodesForHealthMetadataReadyAndErrors) {
    Client c(g_server->port());
    auto meta = c.request("GET", "/v2");
    ASSERT_EQ(meta.status, 200);
    json m = json::parse(meta.body);
    EXPECT_TRUE(m["name"].is_string());
    EXPECT_TRUE(m["version"].is_string());
    EXPECT_TRUE(m["extensions"].is_array());
    auto mm = c.request("GET", "/v2/models/jarvis/versions/1");
    ASSERT_EQ(mm.status, 200);
    json md = json::parse(mm.body);
    EXPECT_EQ(md["name"], "jarvis");
    EXPECT_EQ(md["versions"], json({"1"}));
    EXPECT_TRUE(md["platform"].is_string());
    EXPECT_EQ(md["inputs"][0], json({{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}}}));
    EXPECT_EQ(md["outputs"][0]["datatype"], "FP32");
    EXPECT_EQ(c.request("GET", "/v2/models/jarvis/ready").status, 200);
    EXPECT_EQ(c.request("GET", "/v2/models/jarvis/versions/1/ready").status, 200);
    EXPECT_EQ(c.request("GET", "/v2/models/jarvis/versions/9/ready").status, 400);  // 4xx: not ready
    EXPECT_EQ(c.request("GET", "/v2/models/nope/ready").status, 404);
    EXPECT_EQ(c.request("GET", "/v2/models/nope").status, 404);
    EXPECT_EQ(c.request("GET", "/v2/models/jarvis/versions/9").status, 404);
    auto e = c.request("POST", "/v2/models/jarvis/versions/9/infer", "{}");
    EXPECT_EQ(e.status, 404);
    EXPECT_TRUE(json::parse(e.body)["error"].is_string());
    auto w = c.request("GET", "/v2/models/jarvis/infer");
    EXPECT_EQ(w.status, 405);
    EXPECT_EQ(w.header("allow"), "POST");
    EXPECT_EQ(c.request("GET", "/v2/nothing/here").status, 404);
    EXPECT_EQ(c.request("GET", "/v2/health/ready?verbose=1").status, 200);  // query strings are ignored
    EXPECT_EQ(c.request("GET", "/v2/").status, 200);                       // trailing slash
    auto big = c.request("POST", "/v2/models/jarvis/infer", std::string(100001, ' '));
    EXPECT_EQ(big.status, 413);
    EXPECT_NE(json::parse(big.body)["error"].get<std::string>().find("100000"), std::string::npos);
    Client c2(g_server->port());
    auto gz = c2.request("POST", "/v2/models/jarvis/infer", "\x1f\x8b", {{"Content-Encoding", "gzip"}});
    EXPECT_EQ(gz.status, 415);
    EXPECT_NE(gz.body.find("Content-Encoding 'gzip' is not supported"), std::string::npos) << gz.body;
}

TEST(Conformance, HeadAnswersLikeGetWithoutBody) {
    Client c(g_server->port());
    auto get = c.request("GET", "/v2/models/jarvis");
    ASSERT_EQ(get.status, 200);
    Raw r(g_server->port());
    r.send("HEAD /v2/models/jarvis HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string h = r.read_until([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; });
    EXPECT_EQ(h.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << h;
    EXPECT_NE(h.find("Content-Length: " + std::to_string(get.body.size()) + "\r\n"), std::string::npos) << h;
    EXPECT_EQ(h.size(), h.find("\r\n\r\n") + 4) << "HEAD response carried a body";
    r.take();
    // The connection is still in step: the next response starts right away.
    r.send("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string n = r.read_until([](const std::string& b) { return complete_responses(b) == 1; });
    EXPECT_EQ(n.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << n;
}

TEST(Conformance, ChunkedBodiesExpectContinueAndPipelining) {
    std::string body = types_body();
    Client c(g_server->port());
    auto ref = c.request("POST", "/v2/models/types/infer", body);
    ASSERT_EQ(ref.status, 200);
    // Chunked, sent in pieces, with a chunk extension and a trailer.
    Raw r(g_server->port());
    r.send("POST /v2/models/types/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n");
    size_t half = body.size() / 2;
    char hx[32];
    std::snprintf(hx, sizeof hx, "%zx;ext=1\r\n", half);
    r.send(hx + body.substr(0, half) + "\r\n");
    std::snprintf(hx, sizeof hx, "%zX\r\n", body.size() - half);
    r.send(hx + body.substr(half) + "\r\n0\r\nX-Trailer: 1\r\n\r\n");
    std::vector<std::string> bodies;
    r.read_until([&](const std::string& b) { return complete_responses(b) == 1; });
    complete_responses(r.take(), &bodies);
    ASSERT_EQ(bodies.size(), 1u);
    EXPECT_EQ(bodies[0], ref.body);
    // Expect: 100-continue: the interim response comes before the body is sent.
    r.send("POST /v2/models/types/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n");
    std::string cont = r.read_until([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; });
    EXPECT_EQ(cont, "HTTP/1.1 100 Continue\r\n\r\n");
    r.take();
    r.send(body);
    bodies.clear();
    r.read_until([&](const std::string& b) { return complete_responses(b) == 1; });
    complete_responses(r.take(), &bodies);
    ASSERT_EQ(bodies.size(), 1u);
    EXPECT_EQ(bodies[0], ref.body);
    // Pipelining: three requests in one write, answered in order; the last closes.
    std::string post = "POST /v2/models/types/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    r.send(post + "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n" + post.substr(0, post.find("\r\n\r\n")) +
           "\r\nConnection: close\r\n\r\n" + body);
    bodies.clear();
    std::string all = r.read_until([&](const std::string& b) { return complete_responses(b) == 3; });
    complete_responses(all, &bodies);
    ASSERT_EQ(bodies.size(), 3u) << all.substr(0, 300);
    EXPECT_EQ(bodies[0], ref.body);
    EXPECT_EQ(bodies[1], R"({"live":true})");
    EXPECT_EQ(bodies[2], ref.body);
    EXPECT_NE(all.find("Connection: close"), std::string::npos);
    // Malformed chunking: 400 (and the connection is closed).
    for (std::string bad : {"zz\r\n", "5\r\nabcdeXY0\r\n\r\n"}) {
        Raw b(g_server->port());
        b.send("POST /v2/models/types/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + bad);
        std::string got = b.read_until([](const std::string& s) { return complete_responses(s) == 1; });
        EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
    }
    Raw both(g_server->port());
    both.send("POST /v2/models/types/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n");
    EXPECT_EQ(both.read_until([](const std::string& s) { return complete_responses(s) == 1; }).rfind("HTTP/1.1 400", 0), 0u);
    Raw over(g_server->port());  // jarvis: max_request_bytes 100000
    over.send("POST /v2/models/jarvis/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n20000\r\n");
    EXPECT_EQ(over.read_until([](const std::string& s) { return complete_responses(s) == 1; }).rfind("HTTP/1.1 413", 0), 0u);
    Raw gzip(g_server->port());
    gzip.send("POST /v2/models/jarvis/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
    EXPECT_EQ(gzip.read_until([](const std::string& s) { return complete_responses(s) == 1; }).rfind("HTTP/1.1 501", 0), 0u);
}

TEST(Conformance, CurlItself) {
    if (std::system("curl --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "curl not installed";
    // A 30 KB JSON body, as curl sends it: with and without Expect: 100-continue, and chunked.
    std::vector<float> x(16 * 96);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 37) - 18) / 7.0f;
    json req{{"id", "curl"}, {"inputs", {{{"name", "x.1"}, {"shape", {1, 16, 96}}, {"datatype", "FP32"}, {"data", x}}}}};
    // The file holds the same numbers nested as [1][16][96] and pretty-printed (the spec allows
    // nested row-major data): the answer must equal the flat request's.
    json rows = json::array();
    for (int i = 0; i < 16; ++i) rows.push_back(std::vector<float>(x.begin() + i * 96, x.begin() + (i + 1) * 96));
    json nested = req;
    nested["inputs"][0]["data"] = json::array({rows});
    std::string file = g_tmp + "/big.json";
    std::ofstream(file) << nested.dump(1);
    Client c(g_server->port());
    auto ref = c.request("POST", "/v2/models/jarvis/infer", req.dump());
    ASSERT_EQ(ref.status, 200) << ref.body;
    std::string base = "curl -sS --max-time 10 -w ' %{http_code}' -H 'Content-Type: application/json' ";
    for (std::string extra : {"", "-H 'Expect: 100-continue' ", "-H 'Transfer-Encoding: chunked' "}) {
        std::string out = run(base + extra + "--data-binary @" + file + " " + url("/v2/models/jarvis/infer"));
        ASSERT_GE(out.size(), 4u) << extra;
        EXPECT_EQ(out.substr(out.size() - 4), " 200") << extra << ": " << out;
        EXPECT_EQ(out.substr(0, out.size() - 4), ref.body) << extra;
    }
    std::string head = run("curl -sS --max-time 5 -I " + url("/v2/health/ready"));
    EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
    std::string nf = run(base + url("/v2/models/nope"));
    EXPECT_EQ(nf.substr(nf.size() - 4), " 404") << nf;
    std::string meta = run("curl -sS --max-time 5 " + url("/v2"));
    EXPECT_EQ(json::parse(meta)["name"], "jiffy");
}

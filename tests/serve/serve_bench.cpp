// Server overhead on hey_jarvis (1x16x96 FP32): closed-loop, one keep-alive connection, each
// request's round trip timed; p50 of the server minus p50 of the engine run in-process.
// Usage: jiffy_serve_bench [--requests N] [--rounds R]   (defaults 2000, 3; medians of rounds)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "jiffy/jiffy.hpp"
#include "serve_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using clk = std::chrono::steady_clock;

static double p50(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
static double median(std::vector<double> v) { return p50(std::move(v)); }

int main(int argc, char** argv) {
    int n = 2000, rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--requests") n = std::atoi(argv[i + 1]);
        else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    }
    const std::string model = std::string(JIFFY_SOURCE_DIR) + "/.cache/models/hey_jarvis_v0.1.onnx";
    char tmpl[] = "/tmp/jiffy_serve_bench_XXXXXX";
    std::string tmp = mkdtemp(tmpl);
    fs::create_directories(tmp + "/repo/jarvis/1");
    fs::copy_file(model, tmp + "/repo/jarvis/1/model.onnx");
    std::ofstream(tmp + "/repo/jarvis/config.yaml") << "inputs:\n  x.1: [1, 16, 96]\n";
    // The same model served by a worker thread with a queue (admission control, no batching).
    fs::create_directories(tmp + "/repo/jarvisq/1");
    fs::copy_file(model, tmp + "/repo/jarvisq/1/model.onnx");
    std::ofstream(tmp + "/repo/jarvisq/config.yaml") << "inputs:\n  x.1: [1, 16, 96]\nexecution: worker\nmax_queue_size: 64\n";

    std::vector<float> x(16 * 96);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& v : x) v = d(rng);

    namespace ja = jiffy::api;
    ja::Error err;
    auto m = ja::Model::load(model, &err);
    auto plan = m.compile({{"x.1", {1, 16, 96}}}, &err);
    if (err) {
        std::fprintf(stderr, "%s\n", err.message.c_str());
        return 1;
    }
    auto run = plan.runner();

    serve_test::Server srv;
    if (!srv.start(JIFFY_BINARY, {"--model-repository", tmp + "/repo"}, tmp + "/server.log")) {
        std::fprintf(stderr, "server did not start\n");
        return 1;
    }
    serve_test::Client c(srv.port());
    json jreq{{"inputs", {{{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}}, {"data", x}}}}};
    std::string json_body = jreq.dump();
    json bh{{"inputs", {{{"name", "x.1"}, {"datatype", "FP32"}, {"shape", {1, 16, 96}},
                         {"parameters", {{"binary_data_size", x.size() * 4}}}}}},
            {"parameters", {{"binary_data_output", true}}}};
    std::string h = bh.dump();
    std::string bin_body = h + std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4);
    std::string bin_req = "POST /v2/models/jarvis/infer HTTP/1.1\r\nHost: b\r\nInference-Header-Content-Length: " +
                          std::to_string(h.size()) + "\r\nContent-Length: " + std::to_string(bin_body.size()) + "\r\n\r\n" + bin_body;
    std::string json_req = "POST /v2/models/jarvis/infer HTTP/1.1\r\nHost: b\r\nContent-Length: " +
                           std::to_string(json_body.size()) + "\r\n\r\n" + json_body;
    std::string binq_req = bin_req;
    binq_req.replace(binq_req.find("/jarvis/"), 8, "/jarvisq/");
    std::string live_req = "GET /v2/health/live HTTP/1.1\r\nHost: b\r\n\r\n";

    auto time_engine = [&] {
        std::vector<double> t;
        for (int i = 0; i < n + 100; ++i) {
            auto t0 = clk::now();
            std::memcpy(run.input(0), x.data(), x.size() * 4);
            run.run();
            if (i >= 100) t.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
        }
        return p50(t);
    };
    auto time_http = [&](const std::string& req) {
        std::vector<double> t;
        for (int i = 0; i < n + 100; ++i) {
            auto t0 = clk::now();
            c.send_raw(req);
            auto r = c.read_response();
            if (r.status != 200) {
                std::fprintf(stderr, "status %d: %s\n", r.status, r.body.c_str());
                std::exit(1);
            }
            if (i >= 100) t.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
        }
        return p50(t);
    };
    std::vector<double> eng, bin, js, live, binq;
    for (int r = 0; r < rounds; ++r) {
        eng.push_back(time_engine());
        live.push_back(time_http(live_req));
        bin.push_back(time_http(bin_req));
        js.push_back(time_http(json_req));
        binq.push_back(time_http(binq_req));
        std::printf("round %d: engine p50 %.1f us | GET live %.1f | binary infer %.1f | JSON infer %.1f | binary via worker %.1f\n",
                    r + 1, eng.back(), live.back(), bin.back(), js.back(), binq.back());
    }
    double e = median(eng);
    std::printf("\nhey_jarvis 1x16x96, %d requests x %d rounds, one keep-alive connection, medians of per-round p50:\n", n, rounds);
    std::printf("  engine in-process        %8.1f us\n", e);
    std::printf("  GET /v2/health/live      %8.1f us  (HTTP round trip, no inference)\n", median(live));
    std::printf("  binary infer             %8.1f us  overhead %.1f us\n", median(bin), median(bin) - e);
    std::printf("  JSON infer               %8.1f us  overhead %.1f us\n", median(js), median(js) - e);
    std::printf("  binary infer, worker     %8.1f us  overhead %.1f us  (execution: worker, queue + spin hand-off)\n", median(binq),
                median(binq) - e);
    srv.signal(SIGTERM);
    srv.wait_exit(5000);
    fs::remove_all(tmp);
    return 0;
}

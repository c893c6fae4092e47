// Local ring client overhead on hey_jarvis (1x16x96 FP32): closed loop, one LocalClient, each
// round trip timed; p50 of the ring (infer(), and a prepared request writing its input in place)
// minus p50 of the engine in-process, interleaved per round.
// Usage: jiffy_ring_bench [--requests N] [--rounds R] [--realtime]   (defaults 5000, 5; medians of
// rounds). --realtime: the server with --realtime and this thread SCHED_FIFO (a busy 2-core box
// otherwise leaves a woken side waiting ~110 us for a core in many rounds).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "jiffy/client.h"
#include "jiffy/jiffy.hpp"
#include "serve_util.h"

namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

static double p50(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char** argv) {
    int n = 5000, rounds = 5;
    bool rt = false;
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--realtime") rt = true;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--realtime") {
            --i;
            continue;
        }
        if (a == "--requests") n = std::atoi(argv[i + 1]);
        else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    }
    const std::string model = std::string(JIFFY_SOURCE_DIR) + "/.cache/models/hey_jarvis_v0.1.onnx";
    char tmpl[] = "/tmp/jiffy_ring_bench_XXXXXX";
    std::string tmp = mkdtemp(tmpl);
    fs::create_directories(tmp + "/repo/jarvis/1");
    fs::copy_file(model, tmp + "/repo/jarvis/1/model.onnx");
    std::ofstream(tmp + "/repo/jarvis/config.yaml") << "inputs:\n  x.1: [1, 16, 96]\n";
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
    std::string ring = "bench" + std::to_string(getpid());
    serve_test::Server srv;
    std::vector<std::string> args = {"--model-repository", tmp + "/repo", "--local-ring", ring};
    if (rt) {
        args.push_back("--realtime");
        sched_param sp{};
        sp.sched_priority = 10;
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) std::fprintf(stderr, "warning: SCHED_FIFO not permitted\n");
    }
    if (!srv.start(JIFFY_BINARY, args, tmp + "/server.log")) {
        std::fprintf(stderr, "server did not start\n");
        return 1;
    }
    std::string e;
    auto cl = jiffy::client::LocalClient::connect(ring, &e);
    if (!cl) {
        std::fprintf(stderr, "%s\n", e.c_str());
        return 1;
    }
    std::vector<jiffy::client::Tensor> in = {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, out;
    jiffy::client::Prepared* prep = cl->prepare("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}}}, &e);
    if (!prep) {
        std::fprintf(stderr, "%s\n", e.c_str());
        return 1;
    }
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
    auto time_ring = [&] {
        std::vector<double> t;
        for (int i = 0; i < n + 100; ++i) {
            auto t0 = clk::now();
            if (!cl->infer("jarvis", -1, in, &out, &e)) {
                std::fprintf(stderr, "%s\n", e.c_str());
                std::exit(1);
            }
            if (i >= 100) t.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
        }
        return p50(t);
    };
    // Same work as the engine loop: copy the input in (into the ring), run, result in place.
    auto time_prepared = [&] {
        std::vector<double> t;
        for (int i = 0; i < n + 100; ++i) {
            auto t0 = clk::now();
            std::memcpy(prep->input(0), x.data(), x.size() * 4);
            if (!prep->run(&e)) {
                std::fprintf(stderr, "%s\n", e.c_str());
                std::exit(1);
            }
            if (i >= 100) t.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
        }
        return p50(t);
    };
    std::vector<double> eng, rg, diff, pr, pdiff;
    for (int r = 0; r < rounds; ++r) {
        eng.push_back(time_engine());
        rg.push_back(time_ring());
        pr.push_back(time_prepared());
        diff.push_back(rg.back() - eng.back());
        pdiff.push_back(pr.back() - eng.back());
        std::printf("round %d: engine p50 %.2f us | ring infer p50 %.2f us (%+.2f) | prepared p50 %.2f us (%+.2f)\n", r + 1,
                    eng.back(), rg.back(), diff.back(), pr.back(), pdiff.back());
    }
    std::printf("\nhey_jarvis 1x16x96, %d requests x %d rounds, medians of per-round p50:\n", n, rounds);
    std::printf("  engine in-process   %7.2f us\n  local ring infer()  %7.2f us   overhead (median of per-round differences) %+.2f us\n"
                "  prepared run()      %7.2f us   overhead %+.2f us\n",
                p50(eng), p50(rg), p50(diff), p50(pr), p50(pdiff));
    srv.kill_now();
    fs::remove_all(tmp);
    return 0;
}

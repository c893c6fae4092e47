// jiffy_mqtt_agent: event -> action latency of `jiffy agent` through a real broker, against the
// broker alone, interleaved in one run on one broker.
//
//   broker alone: pinger --ping--> mosquitto --> plain libmosquitto echo --> mosquitto --> pinger
//   agent path:   pinger --frame-> mosquitto --> jiffy agent (mqtt source, model, mqtt sink)
//                                                          --action--> mosquitto --> pinger
//
// The pinger is plain libmosquitto on its own poll loop (bench/mqtt_plain.h); one message in flight;
// the payload is 64 float32 (256 B) both ways in (the agent answers with its JSON action line).
// The agent runs mlp_64_128_128_10 per event; its model p50 is read from its own exit table. Two
// agents per QoS: `execution: thread` (network thread -> agent queue -> agent thread) and
// `execution: inline` (the stages run on the MQTT client's network thread); each agent's source and
// sink share one connection. Per QoS: R rounds of (broker alone, inline, thread), N round trips each;
// the p50s reported are the medians over rounds. Agent cost = agent p50 - broker-alone p50 - model p50.
//
//   jiffy_mqtt_agent [--n 1000] [--rounds 3]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "mosquitto_fixture.h"
#include "mqtt_plain.h"

using namespace jiffy::bench;

namespace {

Result ping(Plain& p, const char* topic, int qos, int n, int warm) {
    std::vector<float> frame(64, 0.25f);
    std::vector<int64_t> rtt;
    int lost = 0;
    for (int64_t i = 0; i < n + warm; ++i) {
        if (p.json_index) frame[0] = float(i);
        else std::memcpy(frame.data(), &i, 8);
        int64_t t0 = now_ns();
        mosquitto_publish_v5(p.m, nullptr, topic, int(frame.size() * 4), frame.data(), qos, false, nullptr);
        int64_t deadline = t0 + 1000000000LL;
        while (p.got_index != i && now_ns() < deadline)
            if (!p.step(100)) break;
        int64_t t1 = now_ns();
        if (p.got_index != i) {
            ++lost;
            continue;
        }
        if (i >= warm) rtt.push_back(t1 - t0);
    }
    for (int k = 0; k < 5; ++k) p.step(1);
    return summarize(rtt, lost);
}

// p50 of row `row` in the exit table section of agent `agent`.
double table_p50(const std::string& err, const std::string& agent, const std::string& row) {
    std::istringstream is(err);
    std::string l;
    bool in = false;
    while (std::getline(is, l)) {
        if (l.rfind("agent ", 0) == 0) in = l.rfind("agent " + agent + ":", 0) == 0;
        if (!in || l.find(row) == std::string::npos) continue;
        std::istringstream ls(l.substr(l.find(row) + row.size()));
        std::string tok;
        double count, p50;
        while (ls >> tok)  // skip to the numbers
            if (std::isdigit(static_cast<unsigned char>(tok[0]))) break;
        count = std::atof(tok.c_str());
        (void)count;
        ls >> p50;
        return p50;
    }
    return -1;
}

std::string agent_name(int qos, bool inl) { return std::string(inl ? "i" : "t") + std::to_string(qos); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int n = 1000, rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--n") n = std::atoi(argv[i + 1]);
        else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: %s [--n N] [--rounds R]\n", argv[0]);
            return 2;
        }
    }
    if (n < 10 || rounds < 1) {
        std::fprintf(stderr, "--n must be at least 10, --rounds at least 1\n");
        return 2;
    }
    mosquitto_lib_init();
    jiffy::testing::MosquittoBroker broker;
    if (!broker.start()) {
        std::fprintf(stderr, "could not start mosquitto:\n%s\n", broker.log_text().c_str());
        return 1;
    }
    const int port = broker.port();
    const std::string P = std::to_string(port);

    // The agent: one agent per QoS, frames of 64 floats -> mlp_64_128_128_10 -> action.
    char dir_t[] = "/tmp/jiffy-mqtt-agent-XXXXXX";
    std::string dir = mkdtemp(dir_t);
    std::string cfg = dir + "/agent.yaml", errf = dir + "/agent.err";
    {
        std::ofstream f(cfg);
        f << "agents:\n";
        for (int k = 0; k < 4; ++k) {
            int q = k & 1;
            bool inl = k >= 2;
            std::string an = agent_name(q, inl);
            f << "  - name: " << an << "\n"
              << "    execution: " << (inl ? "inline" : "thread") << "\n"
              << "    sources: [{name: s, type: mqtt, port: " << P << ", topic: bench/" << an << "/ping, qos: " << q
              << ", format: f32, size: 64}]\n"
              << "    stages: [{name: m, type: model, file: " << JIFFY_SOURCE_DIR << "/.cache/models/mlp_64_128_128_10.onnx}]\n"
              << "    emit: {i: 's[0]', y: 'm[0]'}\n"
              << "    sinks: [{type: mqtt, port: " << P << ", topic: bench/" << an << "/pong, qos: " << q << "}]\n";
        }
    }
    pid_t agent = fork();
    if (agent == 0) {
        if (!std::freopen(errf.c_str(), "w", stderr)) _exit(127);
        if (!std::freopen("/dev/null", "w", stdout)) _exit(127);
        execl(JIFFY_BINARY, JIFFY_BINARY, "agent", cfg.c_str(), (char*)nullptr);
        _exit(127);
    }
    auto agent_err = [&] {
        std::ifstream f(errf);
        return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    };
    for (int k = 0; k < 500; ++k) {  // both agents subscribed
        std::string e = agent_err();
        size_t subscribed = 0;
        for (int k = 0; k < 4; ++k) subscribed += e.find("'bench/" + agent_name(k & 1, k >= 2) + "/ping'") != std::string::npos;
        if (subscribed == 4) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }

    std::atomic<bool> stop{false}, echo_ready{false};
    std::thread echo([&] {
        Plain e;
        e.echo = true;
        if (!e.connect(port, "bench-echo") || !e.subscribe(kPing, 1)) std::exit(1);
        echo_ready = true;
        while (!stop.load())
            if (!e.step(50)) break;
    });
    while (!echo_ready.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));

    Plain plain, viagent;
    viagent.json_index = true;
    if (!plain.connect(port, "bench-ping-plain") || !plain.subscribe(kPong, 1) || !viagent.connect(port, "bench-ping-agent") ||
        !viagent.subscribe("bench/+/pong", 1)) {
        std::fprintf(stderr, "pinger could not connect\n");
        return 1;
    }
    // [qos][mode]: mode 0 = execution: thread, 1 = execution: inline
    std::vector<double> b50[2], b99[2], a50[2][2], a99[2][2];
    int lost = 0;
    for (int r = 0; r < rounds; ++r)
        for (int q : {0, 1}) {
            Result b = ping(plain, kPing, q, n, n / 10);
            b50[q].push_back(b.p50_us), b99[q].push_back(b.p99_us);
            lost += b.lost;
            for (int inl : {1, 0}) {
                viagent.got_index = -1;
                Result a = ping(viagent, ("bench/" + agent_name(q, inl) + "/ping").c_str(), q, n, n / 10);
                a50[q][inl].push_back(a.p50_us), a99[q][inl].push_back(a.p99_us);
                lost += a.lost;
            }
        }
    stop = true;
    echo.join();
    kill(agent, SIGTERM);
    int st = 0;
    waitpid(agent, &st, 0);
    std::string err = agent_err();

    std::printf("event -> action through mosquitto (loopback), 256 B frames, one in flight, N=%d x %d rounds "
                "(medians of the rounds' p50/p99), %d lost\n",
                n, rounds, lost);
    std::printf("| QoS | execution | broker alone, 2 legs p50 / p99 | agent path p50 / p99 | model p50 | agent e2e p50 (inside) | "
                "agent cost p50 (path - broker - model) |\n|---|---|---|---|---|---|---|\n");
    for (int q : {0, 1})
        for (int inl : {1, 0}) {
            std::string an = agent_name(q, inl);
            double model = table_p50(err, an, "stage m (model)"), inside = table_p50(err, an, "event -> action");
            double cost = median(a50[q][inl]) - median(b50[q]) - model;
            std::printf("| %d | %s | %.0f / %.0f us | %.0f / %.0f us | %.1f us | %.1f us | %+.0f us |\n", q, inl ? "inline" : "thread",
                        median(b50[q]), median(b99[q]), median(a50[q][inl]), median(a99[q][inl]), model, inside, cost);
        }
    std::printf("\nagent exit table:\n%s", err.c_str());
    std::remove(cfg.c_str());
    std::remove(errf.c_str());
    rmdir(dir.c_str());
    return 0;
}

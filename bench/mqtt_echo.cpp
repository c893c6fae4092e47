// jiffy_mqtt_echo: the broker-alone MQTT round trip on this machine, the baseline that the agent's
// MQTT path is compared with (docs/mqtt.md).
//
//   pinger --ping--> mosquitto --ping--> echo client --pong--> mosquitto --pong--> pinger
//
// The echo client is plain libmosquitto on its own thread, polling its socket itself. The pinger is
// either plain libmosquitto too ("plain": the floor) or jiffy's MqttClient ("jiffy": publish() +
// pop(), i.e. what an agent pays). QoS 0 and 1, 64 B and 2560 B, one message in flight,
// p50/p99 over N round trips after a warm-up. Starts its own broker unless --port is given.
//
//   jiffy_mqtt_echo [--n 2000] [--port P] [--path plain|jiffy|both]
#include <mosquitto.h>
#include <poll.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent/mqtt.h"
#include "mosquitto_fixture.h"
#include "mqtt_plain.h"

namespace {

using namespace jiffy::bench;

Result run_plain(int port, int qos, size_t bytes, int n, int warm) {
    Plain ping;
    if (!ping.connect(port, "bench-ping-plain") || !ping.subscribe(kPong, qos)) return {0, 0, 0, -1};
    std::vector<uint8_t> buf(bytes, 0x5a);
    std::vector<int64_t> rtt;
    int lost = 0;
    for (int64_t i = 0; i < n + warm; ++i) {
        std::memcpy(buf.data(), &i, 8);
        int64_t t0 = now_ns();
        mosquitto_publish_v5(ping.m, nullptr, kPing, int(bytes), buf.data(), qos, false, nullptr);
        int64_t deadline = t0 + 1000000000LL;
        while (ping.got_index != i && now_ns() < deadline)
            if (!ping.step(100)) break;
        int64_t t1 = now_ns();
        if (ping.got_index != i) {
            ++lost;
            continue;
        }
        if (i >= warm) rtt.push_back(t1 - t0);
    }
    // Let the last PUBACKs drain.
    for (int k = 0; k < 5; ++k) ping.step(1);
    return summarize(rtt, lost);
}

Result run_jiffy(int port, int qos, size_t bytes, int n, int warm) {
    jiffy::agent::MqttOptions o;
    o.port = port;
    o.client_id = "bench-ping-jiffy";
    if (const char* e = std::getenv("JIFFY_MQTT_POP_SPIN_US")) o.pop_spin_us = std::atoi(e);
    o.log = [](const std::string& l) { std::fprintf(stderr, "jiffy mqtt: %s\n", l.c_str()); };
    std::unique_ptr<jiffy::agent::MqttClient> c;
    if (!jiffy::agent::MqttClient::create(o, &c).ok() || !c->subscribe(kPong, qos).ok() ||
        !c->wait_ready(3000))
        return {0, 0, 0, -1};
    std::vector<uint8_t> buf(bytes, 0x5a);
    std::vector<int64_t> rtt;
    int lost = 0;
    jiffy::agent::MqttMessage m;
    for (int64_t i = 0; i < n + warm; ++i) {
        std::memcpy(buf.data(), &i, 8);
        int64_t t0 = now_ns();
        if (!c->publish(kPing, buf.data(), bytes, qos, nullptr).ok()) {
            ++lost;
            continue;
        }
        int64_t got = -1;
        while (got != i && c->pop(&m, 1000000))
            if (m.payload.size() >= 8) std::memcpy(&got, m.payload.data(), 8);
        int64_t t1 = now_ns();
        if (got != i) {
            ++lost;
            continue;
        }
        if (i >= warm) rtt.push_back(t1 - t0);
    }
    return summarize(rtt, lost);
}

}  // namespace

int main(int argc, char** argv) {
    int n = 2000, port = 0;
    std::string path = "both";
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--n") n = std::atoi(argv[i + 1]);
        else if (a == "--port") port = std::atoi(argv[i + 1]);
        else if (a == "--path") path = argv[i + 1];
        else {
            std::fprintf(stderr, "usage: %s [--n N] [--port P] [--path plain|jiffy|both]\n", argv[0]);
            return 2;
        }
    }
    if (n < 10) {
        std::fprintf(stderr, "--n must be at least 10\n");
        return 2;
    }
    mosquitto_lib_init();
    jiffy::testing::MosquittoBroker broker;
    if (port == 0) {
        if (!broker.start()) {
            std::fprintf(stderr, "could not start mosquitto:\n%s\n", broker.log_text().c_str());
            return 1;
        }
        port = broker.port();
    }

    // The echo client runs on its own thread for every configuration (QoS follows the ping's).
    std::atomic<bool> stop{false};
    std::atomic<bool> echo_ready{false};
    std::thread echo([&] {
        Plain e;
        e.echo = true;
        if (!e.connect(port, "bench-echo") || !e.subscribe(kPing, 1)) {
            std::fprintf(stderr, "echo client could not connect to 127.0.0.1:%d\n", port);
            std::exit(1);
        }
        echo_ready = true;
        while (!stop.load())
            if (!e.step(50)) break;
    });
    while (!echo_ready.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));

    std::printf("MQTT round trip through mosquitto and a plain libmosquitto echo client, loopback, "
                "N=%d (+%d warm-up), one in flight\n",
                n, n / 10);
    std::printf("%-6s %4s %6s %10s %10s %10s %5s\n", "path", "qos", "bytes", "p50_us", "p99_us",
                "mean_us", "lost");
    for (int qos : {0, 1}) {
        for (size_t bytes : {size_t(64), size_t(2560)}) {
            for (const char* p : {"plain", "jiffy"}) {
                if (path != "both" && path != p) continue;
                Result r = std::strcmp(p, "plain") == 0 ? run_plain(port, qos, bytes, n, n / 10)
                                                        : run_jiffy(port, qos, bytes, n, n / 10);
                std::printf("%-6s %4d %6zu %10.1f %10.1f %10.1f %5d\n", p, qos, bytes, r.p50_us,
                            r.p99_us, r.mean_us, r.lost);
                std::fflush(stdout);
            }
        }
    }
    stop = true;
    echo.join();
    return 0;
}

// A plain libmosquitto client on our own poll loop (no outbox, no threads): the broker-alone
// floor that the MQTT benchmarks compare jiffy with (bench/mqtt_echo.cpp, bench/mqtt_agent.cpp).
#pragma once
#include <mosquitto.h>
#include <poll.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace jiffy::bench {

inline const char* kPing = "jiffy/bench/ping";
inline const char* kPong = "jiffy/bench/pong";

inline int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}


// A plain libmosquitto client driven by our own poll loop (as in MqttClient, without the outbox).
struct Plain {
    mosquitto* m = nullptr;
    bool connected = false;
    int subacks = 0;
    int64_t got_index = -1;
    bool echo = false;
    const char* echo_to = kPong;  // echo: where a received message goes back to
    // Non-echo: a message's index (first 8 bytes; a JSON action's "i" value when set).
    bool json_index = false;

    bool connect(int port, const char* id) {
        m = mosquitto_new(id, true, this);
        mosquitto_int_option(m, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
        mosquitto_int_option(m, MOSQ_OPT_TCP_NODELAY, 1);
        mosquitto_connect_v5_callback_set(m, [](mosquitto*, void* o, int rc, int, const mosquitto_property*) {
            static_cast<Plain*>(o)->connected = rc == 0;
        });
        mosquitto_subscribe_v5_callback_set(
            m, [](mosquitto*, void* o, int, int, const int*, const mosquitto_property*) {
                ++static_cast<Plain*>(o)->subacks;
            });
        mosquitto_message_v5_callback_set(
            m, [](mosquitto* mq, void* o, const mosquitto_message* msg, const mosquitto_property*) {
                auto* p = static_cast<Plain*>(o);
                if (p->echo) {
                    mosquitto_publish_v5(mq, nullptr, p->echo_to, msg->payloadlen, msg->payload,
                                         msg->qos, false, nullptr);
                } else if (p->json_index) {
                    const char* b = static_cast<const char*>(msg->payload);
                    std::string_view v(b, size_t(msg->payloadlen));
                    size_t k = v.find("\"i\":");
                    if (k != std::string_view::npos) p->got_index = std::strtoll(b + k + 4, nullptr, 10);
                } else if (msg->payloadlen >= 8) {
                    std::memcpy(&p->got_index, msg->payload, 8);
                }
            });
        if (mosquitto_connect(m, "127.0.0.1", port, 30) != MOSQ_ERR_SUCCESS) return false;
        int64_t end = now_ns() + 3000000000LL;
        while (!connected && now_ns() < end) step(10);
        return connected;
    }
    // One poll + read/write round. Returns false when the connection is gone.
    bool step(int timeout_ms) {
        pollfd p{mosquitto_socket(m), short(POLLIN | (mosquitto_want_write(m) ? POLLOUT : 0)), 0};
        if (p.fd < 0) return false;
        if (poll(&p, 1, timeout_ms) > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP)))
            if (mosquitto_loop_read(m, 1) != MOSQ_ERR_SUCCESS) return false;
        if (mosquitto_want_write(m) && mosquitto_loop_write(m, 1) != MOSQ_ERR_SUCCESS) return false;
        mosquitto_loop_misc(m);
        return true;
    }
    bool subscribe(const char* topic, int qos) {
        int before = subacks;
        mosquitto_subscribe_v5(m, nullptr, topic, qos, 0, nullptr);
        int64_t end = now_ns() + 3000000000LL;
        while (subacks == before && now_ns() < end) step(10);
        return subacks > before;
    }
    ~Plain() {
        if (m) {
            mosquitto_disconnect(m);
            mosquitto_loop_write(m, 1);
            mosquitto_destroy(m);
        }
    }
};

struct Result {
    double p50_us, p99_us, mean_us;
    int lost;
};

inline Result summarize(std::vector<int64_t>& ns, int lost) {
    std::sort(ns.begin(), ns.end());
    double sum = 0;
    for (int64_t v : ns) sum += double(v);
    auto pct = [&](double q) { return ns.empty() ? 0.0 : double(ns[size_t(q * double(ns.size() - 1))]) / 1e3; };
    return {pct(0.5), pct(0.99), ns.empty() ? 0.0 : sum / double(ns.size()) / 1e3, lost};
}

}  // namespace jiffy::bench

// Helpers for the end-to-end tests of `jiffy agent` over MQTT (agent_mqtt_test.cpp,
// voice_mqtt_test.cpp): the real binary as a child process, numbers from its exit table, and the
// project's MqttClient as the tests' publisher and subscriber.
#pragma once
#include "../test_tmp.h"
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/mqtt.h"
#include "mosquitto_fixture.h"

namespace jiffy::agent::testing {

using jiffy::testing::MosquittoBroker;

inline const std::string kSrc = JIFFY_SOURCE_DIR;

inline std::string tmp(const std::string& name) { return jiffy::testing::scratch("agent_mqtt_" + name); }
inline void write(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
inline std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
inline double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
inline void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// `jiffy agent CONFIG args...` as a child process, stdout and stderr to files.
class AgentProc {
public:
    AgentProc(const std::string& tag, const std::string& yaml, std::vector<std::string> args = {}) {
        cfg_ = tmp(tag + ".yaml"), out_ = tmp(tag + ".out"), err_ = tmp(tag + ".err");
        write(cfg_, yaml);
        std::remove(out_.c_str());
        std::remove(err_.c_str());
        pid_ = fork();
        if (pid_ == 0) {
            FILE* o = std::freopen(out_.c_str(), "w", stdout);
            FILE* e = std::freopen(err_.c_str(), "w", stderr);
            (void)o, (void)e;
            std::vector<char*> av{const_cast<char*>(JIFFY_BINARY), const_cast<char*>("agent"), const_cast<char*>(cfg_.c_str())};
            for (auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
            av.push_back(nullptr);
            execv(JIFFY_BINARY, av.data());
            _exit(127);
        }
    }
    ~AgentProc() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
    }
    pid_t pid() const { return pid_; }
    std::string err() const { return slurp(err_); }
    std::string out() const { return slurp(out_); }
    // Waits until stderr contains `s` (true) or the timeout passes / the process exits (false).
    bool wait_err(const std::string& s, double timeout_s = 5) {
        double end = now_s() + timeout_s;
        while (now_s() < end) {
            if (err().find(s) != std::string::npos) return true;
            if (pid_ > 0 && waitpid(pid_, &status_, WNOHANG) == pid_) {
                pid_ = -1;
                return err().find(s) != std::string::npos;
            }
            sleep_ms(2);
        }
        return false;
    }
    // SIGTERM, then waits up to timeout_s; the exit code (-1: killed / signalled).
    int stop(double timeout_s = 8) {
        if (pid_ > 0) kill(pid_, SIGTERM);
        return wait(timeout_s);
    }
    int wait(double timeout_s) {
        double end = now_s() + timeout_s;
        while (pid_ > 0 && now_s() < end) {
            if (waitpid(pid_, &status_, WNOHANG) == pid_) pid_ = -1;
            else sleep_ms(5);
        }
        if (pid_ > 0) return -1;
        return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
    }
    // VmRSS / VmHWM of the running process, KiB.
    long vm(const char* key) const {
        std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
        std::string l;
        while (std::getline(f, l))
            if (l.rfind(key, 0) == 0) return std::atol(l.c_str() + std::strlen(key) + 1);
        return -1;
    }

private:
    std::string cfg_, out_, err_;
    pid_t pid_ = -1;
    int status_ = 0;
};

// A number from the exit table: the integer just before `label` on the first line that contains
// `key`; -1 when there is none.
inline int64_t try_table_num(const std::string& err, const std::string& key, const std::string& label) {
    std::istringstream is(err);
    std::string l;
    while (std::getline(is, l)) {
        if (l.find(key) == std::string::npos) continue;
        size_t p = l.find(label);
        if (p == std::string::npos) continue;
        size_t e = p;
        while (e > 0 && l[e - 1] == ' ') --e;
        size_t b = e;
        while (b > 0 && std::isdigit(static_cast<unsigned char>(l[b - 1]))) --b;
        if (b < e) return std::stoll(l.substr(b, e - b));
    }
    return -1;
}
inline uint64_t table_num(const std::string& err, const std::string& key, const std::string& label) {
    int64_t v = try_table_num(err, key, label);
    if (v < 0) ADD_FAILURE() << "no '" << label << "' on a line with '" << key << "' in:\n" << err;
    return v < 0 ? 0 : uint64_t(v);
}

// The last latency table that agent `name` printed (on SIGUSR1 or at exit), to its end.
inline std::string last_table(const std::string& err, const std::string& name) {
    size_t p = err.rfind("\nagent " + name + ": ");
    return p == std::string::npos ? std::string() : err.substr(p + 1);
}

// A p50 from a table row (`  part   count p50 p90 p99 max`); -1 when the row is missing.
inline double table_p50(const std::string& table, const std::string& row) {
    std::istringstream is(table);
    std::string l;
    while (std::getline(is, l)) {
        size_t p = l.find(row);
        if (p == std::string::npos) continue;
        std::istringstream r(l.substr(p + row.size()));
        double count = -1, p50 = -1;
        if (r >> count >> p50) return p50;
    }
    return -1;
}

inline std::unique_ptr<MqttClient> client(int port, const std::string& id, bool dedupe = true) {
    MqttOptions o;
    o.port = port;
    o.client_id = id;
    o.drop_duplicates = dedupe;
    o.inbox_capacity = 100000;
    o.log = [](const std::string&) {};
    std::unique_ptr<MqttClient> c;
    Status st = MqttClient::create(o, &c);
    EXPECT_TRUE(st.ok()) << st.message();
    return c;
}

inline std::string port_s(const MosquittoBroker& b) { return std::to_string(b.port()); }

}  // namespace jiffy::agent::testing

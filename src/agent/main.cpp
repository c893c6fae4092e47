#include "agent/main.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "agent/config.h"
#include "agent/fields.h"

namespace jiffy::agent {

namespace {

const char* kUsage =
    "usage: jiffy agent CONFIG.yaml [options]\n"
    "  --metrics-port N   serve Prometheus text on http://127.0.0.1:N/metrics (0 = any free port, printed)\n"
    "  --fast             replay file sources as fast as possible (not in real time)\n"
    "  --duration S       stop after S seconds (default: when every agent's input ends)\n"
    "  --check            load and prepare the config, then exit (0 if valid)\n"
    "Prints the latency table on exit and on SIGUSR1. See docs/agents.md.\n";

std::atomic<int> g_signal{0};
std::atomic<bool> g_usr1{false};
extern "C" void on_signal(int s) {
    if (s == SIGUSR1) g_usr1.store(true);
    else g_signal.store(s);
}

// A tiny HTTP responder: GET /metrics on its own thread (loopback), one request per connection.
class MetricsServer {
public:
    Status start(int port, std::vector<Agent*> agents) {
        agents_ = std::move(agents);
        fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(uint16_t(port));
        if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 16) != 0)
            return invalid("--metrics-port ", port, ": cannot listen: ", std::strerror(errno));
        socklen_t len = sizeof a;
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        th_ = std::thread([this] { loop(); });
        return {};
    }
    int port() const { return port_; }
    void stop() {
        stop_ = true;
        if (th_.joinable()) th_.join();
        if (fd_ >= 0) close(fd_);
    }

private:
    void loop() {
        while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, 100) <= 0) continue;
            int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            timeval tv{1, 0};
            setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            char buf[2048];
            std::string req;
            while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
                ssize_t n = recv(c, buf, sizeof buf, 0);
                if (n <= 0) break;
                req.append(buf, size_t(n));
            }
            std::string body, status = "200 OK";
            if (req.rfind("GET /metrics", 0) == 0) body = format_prometheus(agents_);
            else status = "404 Not Found", body = "try /metrics\n";
            std::string resp = "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
            size_t off = 0;
            while (off < resp.size()) {
                ssize_t n = send(c, resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
                if (n <= 0) break;
                off += size_t(n);
            }
            close(c);
        }
    }
    int fd_ = -1, port_ = 0;
    std::thread th_;
    std::atomic<bool> stop_{false};
    std::vector<Agent*> agents_;
};

}  // namespace

int agent_main(int argc, char** argv) {
    std::string config;
    int metrics_port = -1;
    double duration = 0;
    bool check = false;
    LoadOptions lo;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto need = [&](const char* what) -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "jiffy agent: error: %s needs a value\n", what);
                return nullptr;
            }
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            std::printf("%s", kUsage);
            return 0;
        } else if (a == "--fast") {
            lo.fast = true;
        } else if (a == "--check") {
            check = true;
        } else if (a == "--metrics-port") {
            const char* v = need("--metrics-port");
            int64_t p;
            if (!v || !Fields::parse_int(v, &p) || p < 0 || p > 65535) {
                std::fprintf(stderr, "jiffy agent: error: --metrics-port needs a port number (0-65535)\n");
                return 2;
            }
            metrics_port = int(p);
        } else if (a == "--duration") {
            const char* v = need("--duration");
            if (!v || !Fields::parse_double(v, &duration) || duration <= 0) {
                std::fprintf(stderr, "jiffy agent: error: --duration needs a positive number of seconds\n");
                return 2;
            }
        } else if (!a.empty() && a[0] == '-') {
            std::fprintf(stderr, "jiffy agent: error: unknown option '%s'\n%s", a.c_str(), kUsage);
            return 2;
        } else if (config.empty()) {
            config = a;
        } else {
            std::fprintf(stderr, "jiffy agent: error: one config file only (got '%s' and '%s')\n", config.c_str(), a.c_str());
            return 2;
        }
    }
    if (config.empty()) {
        std::fprintf(stderr, "jiffy agent: error: no config file\n%s", kUsage);
        return 2;
    }
    std::vector<std::unique_ptr<Agent>> agents;
    Status st = load_agents(config, lo, &agents);
    if (!st.ok()) {
        std::fprintf(stderr, "jiffy agent: error: %s\n", st.message().c_str());
        return 2;
    }
    if (check) {
        std::printf("%s: %zu agent(s) ok\n", config.c_str(), agents.size());
        return 0;
    }
    std::vector<Agent*> raw;
    bool lock = false;
    for (auto& a : agents) {
        raw.push_back(a.get());
        lock |= a->options().rt.mlockall;
    }
    if (lock && mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
        std::fprintf(stderr, "jiffy agent: warning: mlockall not permitted (%s); memory may be paged\n", std::strerror(errno));

    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGUSR1, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);

    MetricsServer ms;
    if (metrics_port >= 0) {
        st = ms.start(metrics_port, raw);
        if (!st.ok()) {
            std::fprintf(stderr, "jiffy agent: error: %s\n", st.message().c_str());
            return 2;
        }
        std::fprintf(stderr, "jiffy agent: metrics on http://127.0.0.1:%d/metrics\n", ms.port());
    }
    int rc = 0;
    for (auto& a : agents) {
        st = a->start();
        if (!st.ok()) {
            std::fprintf(stderr, "jiffy agent: error: %s\n", st.message().c_str());
            rc = 2;
            break;
        }
    }
    int64_t t_end = duration > 0 ? now_ns() + int64_t(duration * 1e9) : 0;
    while (rc == 0) {
        bool all_done = true;
        for (auto& a : agents) all_done &= a->done();
        if (all_done || g_signal.load() || (t_end && now_ns() >= t_end)) break;
        if (g_usr1.exchange(false)) std::fprintf(stderr, "%s", format_table(raw).c_str());
        usleep(20000);
    }
    for (auto& a : agents) a->stop();
    for (auto& a : agents) a->join();
    if (metrics_port >= 0) ms.stop();
    std::fflush(stdout);
    std::fprintf(stderr, "%s", format_table(raw).c_str());
    return rc;
}

}  // namespace jiffy::agent

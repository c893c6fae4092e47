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
#include "agent/voice_agent_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cinttypes>
#include <filesystem>
namespace jiffy::agent {

namespace {

const char* kUsage =
    "usage: jiffy agent CONFIG.yaml [options]\n"
    "       jiffy agent [--demo] [CLIP.wav | DIR]... [--models DIR] [--scores FILE] [--realtime]\n"
    "  --demo             the built-in voice agent (examples/voice/agent.yaml: openWakeWord gated by Silero\n"
    "                     VAD) over the clips given, or every .wav in .cache/clips; models from --models\n"
    "                     (default .cache/models); as fast as possible unless --realtime. Also without CONFIG.\n"
    "  --scores FILE      (demo) write every step's wake-word scores and VAD probabilities to FILE\n"
    "  --print-config     (demo) print the built-in config and exit\n"
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

// The built-in voice agent over `clips` (files or folders of .wav), as YAML text.
Status demo_config(const std::vector<std::string>& clips_in, const std::string& models, const std::string& scores,
                   std::string* out) {
    namespace fs = std::filesystem;
    std::vector<std::string> clips;
    std::error_code ec;
    for (const auto& c : clips_in.empty() ? std::vector<std::string>{".cache/clips"} : clips_in) {
        if (fs::is_directory(c, ec)) {
            std::vector<std::string> in_dir;
            for (const auto& e : fs::directory_iterator(c, ec))
                if (e.path().extension() == ".wav") in_dir.push_back(fs::absolute(e.path()).string());
            std::sort(in_dir.begin(), in_dir.end());
            if (in_dir.empty()) return invalid(c, ": no .wav clips in this folder (scripts/make_clips.sh makes them)");
            clips.insert(clips.end(), in_dir.begin(), in_dir.end());
        } else if (fs::is_regular_file(c, ec)) {
            clips.push_back(fs::absolute(c).string());
        } else {
            return invalid(c, ": no such clip or folder", clips_in.empty() ? " (run scripts/setup.sh or scripts/make_clips.sh)" : "");
        }
    }
    std::string m = fs::absolute(models).string();
    YAML::Node root = YAML::Load(kVoiceAgentYaml);
    YAML::Node agent = root["agents"][0];
    agent["sources"][0]["files"] = clips;
    for (YAML::Node st : agent["stages"]) {
        std::string type = st["type"].as<std::string>();
        if (type == "silero_vad") st["model"] = m + "/silero_vad_v5.onnx";
        if (type == "openwakeword") st["models"] = m;
        if (!scores.empty() && (type == "silero_vad" || type == "openwakeword")) st["scores"] = fs::absolute(scores).string();
    }
    *out = YAML::Dump(root);
    return {};
}

}  // namespace

int agent_main(int argc, char** argv) {
    std::string config;
    int metrics_port = -1;
    double duration = 0;
    bool check = false, demo = false, realtime = false, print_config = false;
    std::string models = ".cache/models", scores;
    std::vector<std::string> args;
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
        } else if (a == "--demo") {
            demo = true;
        } else if (a == "--realtime") {
            realtime = true;
        } else if (a == "--print-config") {
            print_config = true;
        } else if (a == "--models" || a == "--scores") {
            const char* v = need(a.c_str());
            if (!v) return 2;
            (a == "--models" ? models : scores) = v;
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
        } else {
            args.push_back(a);
        }
    }
    // A first argument ending in .yaml/.yml is a config; otherwise (or with --demo) the arguments
    // are clips for the built-in voice agent.
    auto is_yaml = [](const std::string& s) {
        return (s.size() > 5 && s.compare(s.size() - 5, 5, ".yaml") == 0) || (s.size() > 4 && s.compare(s.size() - 4, 4, ".yml") == 0);
    };
    if (!demo && (args.empty() || !is_yaml(args[0]))) demo = true;
    if (print_config) {
        std::printf("%s", kVoiceAgentYaml);
        return 0;
    }
    std::vector<std::unique_ptr<Agent>> agents;
    Status st;
    if (demo) {
        std::string text;
        st = demo_config(args, models, scores, &text);
        if (st.ok()) {
            lo.fast = !realtime;
            st = load_agents_text(text, "<built-in voice agent>", "", lo, &agents);
        }
    } else {
        if (args.size() > 1) {
            std::fprintf(stderr, "jiffy agent: error: one config file only (got '%s' and '%s')\n", args[0].c_str(), args[1].c_str());
            return 2;
        }
        config = args[0];
        st = load_agents(config, lo, &agents);
    }
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
    if (demo && !raw.empty()) {
        // One event = one 80 ms step of audio (1280 samples at 16 kHz).
        const Agent& a = *raw[0];
        double audio_s = double(a.events.load()) * 0.08;
        double busy_s = a.h_event.sum_us() * 1e-6;
        std::fprintf(stderr,
                     "voice demo: %" PRIu64 " steps (%.1f s of audio), %" PRIu64 " detections; whole chain (vad + mel + embedding + "
                     "heads + rules) p50 %.0f us per 80 ms step, real-time factor %.4f (%.1f ms busy per s of audio)\n",
                     a.events.load(), audio_s, a.actions.load(), a.h_event.quantile_us(0.5), audio_s > 0 ? busy_s / audio_s : 0.0,
                     audio_s > 0 ? busy_s / audio_s * 1e3 : 0.0);
    }
    return rc;
}

}  // namespace jiffy::agent

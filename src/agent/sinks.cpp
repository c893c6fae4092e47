// Built-in sinks: stdout / file (JSON lines) and HTTP webhook POST (our own HTTP/1.1 client over
// a plain socket, on its own thread behind a bounded outbox so the agent never waits on it).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "agent/agent.h"
#include "agent/registry.h"

namespace jiffy::agent {

static void append_num(std::string* o, double v) {
    char b[40];
    if (!std::isfinite(v)) {
        *o += "null";
        return;
    }
    int n = std::snprintf(b, sizeof b, "%.9g", v);
    o->append(b, size_t(n));
}

static void append_str(std::string* o, const char* s) {
    *o += '"';
    for (; *s; ++s) {
        unsigned char c = static_cast<unsigned char>(*s);
        if (c == '"' || c == '\\') {
            *o += '\\';
            *o += char(c);
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            *o += b;
        } else {
            *o += char(c);
        }
    }
    *o += '"';
}

void format_action_json(const Action& a, std::string* o) {
    o->clear();
    char b[160];
    *o += "{\"agent\":";
    append_str(o, a.agent);
    int n = std::snprintf(b, sizeof b, ",\"seq\":%" PRIu64 ",\"event_us\":%" PRId64 ",\"action_us\":%" PRId64 ",\"latency_us\":%" PRId64,
                          a.seq, a.event_unix_us, a.action_unix_us, a.latency_us);
    o->append(b, size_t(n));
    if (a.media) {
        *o += ",\"media\":";
        append_str(o, a.media);
    }
    if (a.media_s >= 0) {
        *o += ",\"media_s\":";
        append_num(o, a.media_s);
    }
    *o += a.stale ? ",\"stale\":true" : ",\"stale\":false";
    if (a.rule) {
        *o += ",\"rule\":";
        append_str(o, a.rule);
    }
    *o += ",\"values\":{";
    if (a.names)
        for (size_t i = 0; i < a.names->size(); ++i) {
            if (i) *o += ',';
            append_str(o, (*a.names)[i].c_str());
            *o += ':';
            append_num(o, a.values[i]);
        }
    *o += "}}";
}

namespace {

class LineSink : public Sink {
public:
    FILE* f = nullptr;
    std::string path;
    bool own = false;
    Status start() override {
        if (path.empty()) {
            f = stdout;
            return {};
        }
        f = std::fopen(path.c_str(), "a");
        if (!f) return invalid("cannot open '", path, "' for writing: ", std::strerror(errno));
        own = true;
        return {};
    }
    // `template:` (text lines instead of JSON): literal text with {field} or {field:FMT} (a printf
    // conversion for a number, e.g. {score:.3f}); fields: agent, seq, media, rule, media_s,
    // latency_us, stale, and the action's value names. Parsed once; a value name is looked up on
    // the first action only (the names are fixed per agent).
    struct Piece {
        std::string text;  // literal, or the field name
        std::string fmt;   // printf conversion for numbers ("%.3f")
        bool field = false;
        int value = -2;    // index into the action's values: -2 not looked up yet, -1 not a value
    };
    std::vector<Piece> pieces;
    std::string line;

    static Status parse_template(const std::string& t, std::vector<Piece>* out) {
        size_t i = 0;
        while (i < t.size()) {
            size_t b = t.find('{', i);
            if (b == std::string::npos) b = t.size();
            if (b > i) out->push_back({t.substr(i, b - i), "", false, -1});
            if (b == t.size()) break;
            size_t e = t.find('}', b);
            if (e == std::string::npos) return invalid("'template': '{' at column ", b + 1, " has no closing '}'");
            std::string in = t.substr(b + 1, e - b - 1), fmt = "%g";
            size_t c = in.find(':');
            if (c != std::string::npos) {
                fmt.assign(1, '%');
                fmt.append(in, c + 1, std::string::npos);
                in = in.substr(0, c);
                char last = fmt.back();
                if (fmt.size() > 12 || (last != 'f' && last != 'g' && last != 'e'))
                    return invalid("'template': field '", in, "': format '", fmt.substr(1), "' must be a printf float format such as .3f");
                for (size_t k = 1; k + 1 < fmt.size(); ++k)
                    if (!std::isdigit(static_cast<unsigned char>(fmt[k])) && fmt[k] != '.' && fmt[k] != '-' && fmt[k] != '+')
                        return invalid("'template': field '", in, "': bad format '", fmt.substr(1), "'");
            }
            if (in.empty()) return invalid("'template': empty field '{}' at column ", b + 1);
            out->push_back({in, fmt, true, -2});
            i = e + 1;
        }
        return {};
    }
    void format_text(const Action& a) {
        line.clear();
        char b[64];
        auto num = [&](const std::string& fmt, double v) {
            int n = std::snprintf(b, sizeof b, fmt.c_str(), v);
            if (n > 0) line.append(b, size_t(std::min(n, int(sizeof b) - 1)));
        };
        for (Piece& p : pieces) {
            if (!p.field) {
                line += p.text;
                continue;
            }
            if (p.value == -2) {
                p.value = -1;
                if (a.names)
                    for (size_t k = 0; k < a.names->size(); ++k)
                        if ((*a.names)[k] == p.text) p.value = int(k);
            }
            if (p.value >= 0) num(p.fmt, a.values[p.value]);
            else if (p.text == "agent") line += a.agent;
            else if (p.text == "media") line += a.media ? a.media : "-";
            else if (p.text == "rule") line += a.rule ? a.rule : "-";
            else if (p.text == "media_s") num(p.fmt, a.media_s);
            else if (p.text == "latency_us") num(p.fmt, double(a.latency_us));
            else if (p.text == "seq") num("%.0f", double(a.seq));
            else if (p.text == "stale") line += a.stale ? "stale" : "fresh";
            else {
                line += '{';
                line += p.text;
                line += "?}";
            }
        }
    }
    void emit(const Action& act, const std::string& json_line) override {
        const std::string* out = &json_line;
        if (!pieces.empty()) {
            format_text(act);
            out = &line;
        }
        const std::string& json = *out;
        if (std::fwrite(json.data(), 1, json.size(), f) != json.size() || std::fputc('\n', f) == EOF || std::fflush(f) != 0) {
            errors.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        sent.fetch_add(1, std::memory_order_relaxed);
    }
    void stop() override {
        if (own && f) std::fclose(f);
        f = nullptr;
        own = false;
    }
};

// POSTs each action to http://host:port/path. The agent thread only copies the line into a
// bounded outbox (drops the oldest when full, counted); a worker thread sends, one connection kept
// alive, reconnecting on error; an error or timeout is counted, never fatal.
class WebhookSink : public Sink {
public:
    std::string host = "127.0.0.1", path = "/";
    int port = 80;
    int timeout_ms = 1000;
    size_t capacity = 256;

    Status start() override {
        addrinfo hints{}, *res = nullptr;
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
        if (rc != 0 || !res) return invalid("cannot resolve webhook host '", host, "': ", gai_strerror(rc));
        std::memcpy(&addr_, res->ai_addr, sizeof addr_);
        freeaddrinfo(res);
        box_.assign(capacity, std::string());
        for (auto& s : box_) s.reserve(1024);
        worker_ = std::thread([this] { loop(); });
        return {};
    }
    void emit(const Action&, const std::string& json) override {
        {
            std::lock_guard<std::mutex> g(mu_);
            if (size_ == box_.size()) {
                head_ = (head_ + 1) % box_.size();
                --size_;
                dropped.fetch_add(1, std::memory_order_relaxed);
            }
            box_[(head_ + size_) % box_.size()].assign(json);  // reuses the slot's capacity
            ++size_;
        }
        cv_.notify_one();
    }
    void stop() override {
        {
            std::lock_guard<std::mutex> g(mu_);
            if (stopping_) return;
            stopping_ = true;
        }
        cv_.notify_one();
        if (worker_.joinable()) worker_.join();
        if (fd_ >= 0) close(fd_);
        fd_ = -1;
    }
    ~WebhookSink() override { stop(); }

private:
    void loop() {
        std::string body, req, resp;
        for (;;) {
            {
                std::unique_lock<std::mutex> g(mu_);
                cv_.wait(g, [&] { return size_ > 0 || stopping_; });
                if (size_ == 0) return;  // stopping, and everything sent
                body.swap(box_[head_]);
                head_ = (head_ + 1) % box_.size();
                --size_;
            }
            req.clear();
            req += "POST " + path + " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(port) +
                   "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
            req += body;
            bool ok = send_one(req, &resp);
            if (!ok) {  // one retry on a fresh connection (the kept-alive one may have been closed)
                if (fd_ >= 0) close(fd_);
                fd_ = -1;
                ok = send_one(req, &resp);
            }
            if (ok) sent.fetch_add(1, std::memory_order_relaxed);
            else {
                errors.fetch_add(1, std::memory_order_relaxed);
                if (fd_ >= 0) close(fd_);
                fd_ = -1;
            }
        }
    }
    bool wait_fd(short ev, int64_t deadline) {
        for (;;) {
            int left = int((deadline - now_ns()) / 1000000);
            if (left <= 0) return false;
            pollfd p{fd_, ev, 0};
            int r = poll(&p, 1, left);
            if (r > 0) return true;
            if (r == 0 || errno != EINTR) return false;
        }
    }
    bool send_one(const std::string& req, std::string* resp) {
        int64_t deadline = now_ns() + int64_t(timeout_ms) * 1000000;
        if (fd_ < 0) {
            fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd_ < 0) return false;
            int one = 1;
            setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            if (connect(fd_, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_) != 0) {
                if (errno != EINPROGRESS || !wait_fd(POLLOUT, deadline)) return false;
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err) return false;
            }
        }
        size_t off = 0;
        while (off < req.size()) {
            ssize_t n = ::send(fd_, req.data() + off, req.size() - off, MSG_NOSIGNAL);
            if (n > 0) off += size_t(n);
            else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                if (!wait_fd(POLLOUT, deadline)) return false;
            } else return false;
        }
        // Read the status line and headers, then Content-Length bytes of body.
        resp->clear();
        char buf[4096];
        size_t hdr_end = std::string::npos, need = 0;
        for (;;) {
            ssize_t n = recv(fd_, buf, sizeof buf, 0);
            if (n > 0) {
                resp->append(buf, size_t(n));
                if (hdr_end == std::string::npos) {
                    hdr_end = resp->find("\r\n\r\n");
                    if (hdr_end != std::string::npos) {
                        std::string lower = resp->substr(0, hdr_end);
                        for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
                        size_t cl = lower.find("content-length:");
                        need = cl == std::string::npos ? 0 : size_t(std::strtoull(lower.c_str() + cl + 15, nullptr, 10));
                    }
                }
                if (hdr_end != std::string::npos && resp->size() >= hdr_end + 4 + need) break;
            } else if (n == 0) {
                if (hdr_end == std::string::npos) return false;
                close(fd_);
                fd_ = -1;
                break;
            } else if (errno == EAGAIN || errno == EINTR) {
                if (!wait_fd(POLLIN, deadline)) return false;
            } else {
                return false;
            }
        }
        // 2xx counts as delivered.
        return resp->size() > 12 && resp->compare(0, 5, "HTTP/") == 0 && (*resp)[9] == '2';
    }

    sockaddr_in addr_{};
    int fd_ = -1;
    std::thread worker_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::string> box_;
    size_t head_ = 0, size_ = 0;
    bool stopping_ = false;
};

}  // namespace

Status make_stdout_sink(Fields& f, const BuildEnv& env, std::unique_ptr<Sink>* out) {
    auto s = std::make_unique<LineSink>();
    if (f.node()["type"].Scalar() == "file") {
        std::string p;
        JIFFY_RETURN_IF_ERROR(f.get_string("path", &p, true));
        s->path = env.path(p);
    }
    std::string t;
    JIFFY_RETURN_IF_ERROR(f.get_string("template", &t));
    if (f.has("template")) {
        if (t.empty()) return f.error(f.node()["template"], "'template' is empty");
        Status st = LineSink::parse_template(t, &s->pieces);
        if (!st.ok()) return f.error(f.node()["template"], st.message());
        s->line.reserve(512);
    }
    *out = std::move(s);
    return {};
}

Status make_webhook_sink(Fields& f, const BuildEnv&, std::unique_ptr<Sink>* out) {
    auto s = std::make_unique<WebhookSink>();
    std::string url;
    JIFFY_RETURN_IF_ERROR(f.get_string("url", &url, true));
    const std::string pre = "http://";
    if (url.compare(0, pre.size(), pre) != 0)
        return f.error(f.node()["url"], "'url' must start with http:// (e.g. http://127.0.0.1:8080/hook), got '" + url + "'");
    std::string rest = url.substr(pre.size());
    size_t slash = rest.find('/');
    std::string hp = rest.substr(0, slash);
    s->path = slash == std::string::npos ? "/" : rest.substr(slash);
    size_t colon = hp.rfind(':');
    s->host = hp.substr(0, colon);
    if (colon != std::string::npos) {
        int64_t p;
        if (!Fields::parse_int(hp.substr(colon + 1), &p) || p < 1 || p > 65535)
            return f.error(f.node()["url"], "bad port in 'url': '" + url + "'");
        s->port = int(p);
    }
    if (s->host.empty()) return f.error(f.node()["url"], "no host in 'url': '" + url + "'");
    int64_t t = 1000, cap = 256;
    JIFFY_RETURN_IF_ERROR(f.get_int("timeout_ms", &t, false, 1, 600000));
    JIFFY_RETURN_IF_ERROR(f.get_int("outbox", &cap, false, 1, 1 << 20));
    s->timeout_ms = int(t);
    s->capacity = size_t(cap);
    *out = std::move(s);
    return {};
}

}  // namespace jiffy::agent

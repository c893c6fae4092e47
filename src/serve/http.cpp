#include "serve/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace jiffy::serve {

namespace {

int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// epoll user data below this are listeners (i) and watched fds (kWatchBase + i); connections
// are stored as their pointer.
constexpr uint64_t kWatchBase = 1024;
constexpr uint64_t kMaxTag = 2048;
constexpr size_t kMaxHeaders = 100;
constexpr int kLingerMs = 1000;

bool is_tchar(unsigned char c) {
    if (std::isalnum(c)) return true;
    return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
    return r;
}

std::string json_escape(const std::string& s) {
    std::string r;
    for (char c : s) {
        if (c == '"' || c == '\\') {
            r += '\\';
            r += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
            r += b;
        } else {
            r += c;
        }
    }
    return r;
}

int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// False when `s`, the start of a request whose head has not fully arrived, cannot begin a valid
// request line (so junk, e.g. after a body shorter than its Content-Length, fails at once).
bool plausible_start(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && s[i] >= 'A' && s[i] <= 'Z') ++i;
    if (i == s.size()) return i <= 16;
    if (i == 0 || i > 16 || s[i] != ' ') return false;
    return i + 1 >= s.size() || s[i + 1] == '/';
}

}  // namespace

const char* http_reason(int s) {
    switch (s) {
        case 100: return "Continue";
        case 200: return "OK";
        case 400: return "Bad Request";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 411: return "Length Required";
        case 413: return "Content Too Large";
        case 415: return "Unsupported Media Type";
        case 417: return "Expectation Failed";
        case 431: return "Request Header Fields Too Large";
        case 429: return "Too Many Requests";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        case 505: return "HTTP Version Not Supported";
        default: return "Unknown";
    }
}

const std::string* HttpRequest::header(std::string_view lname) const {
    for (const auto& [k, v] : headers)
        if (k == lname) return &v;
    return nullptr;
}

struct HttpServer::Conn {
    int fd = -1;
    int listener = 0;
    size_t slot = 0;
    uint32_t gen = 0;
    bool closed = false;
    bool waiting = false;  // a deferred response is outstanding
    std::string in;
    size_t scan = 0;  // where to resume looking for the end of the head
    bool have_head = false;
    size_t head_len = 0, body_len = 0;
    // Transfer-Encoding: chunked: chunks are decoded in place, the body growing at
    // in[head_len, head_len + body_len) while raw chunk bytes are read from in[raw, ...).
    bool chunked = false, chunks_done = false;
    int chunk_state = 0;  // 0 size line, 1 data, 2 CRLF after data, 3 trailer lines
    size_t raw = 0, chunk_left = 0, body_limit = 0;
    bool head_only = false;  // HEAD: answer as GET without the body
    HttpRequest req;
    bool keep_alive = true;
    std::string out;
    size_t out_off = 0;
    int64_t out_since = 0;
    int64_t req_start = 0;  // ms when the current request's first byte arrived; 0 = none
    bool req_draining = false;
    int64_t last_active = 0;
    bool close_after = false;  // close once `out` is sent
    bool lingering = false;    // write side shut; discarding input until EOF or deadline
    int64_t linger_until = 0;
    uint32_t events = 0;
};

HttpServer::HttpServer(HttpLimits limits) : limits_(limits), rbuf_(256 * 1024) {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    watch(efd_, [this] {
        uint64_t v;
        while (::read(efd_, &v, sizeof v) == ssize_t(sizeof v)) {
        }
    });
}

HttpServer::~HttpServer() {
    for (auto& c : conns_)
        if (c && !c->closed) ::close(c->fd);
    for (auto& l : listeners_) ::close(l.fd);
    if (ep_ >= 0) ::close(ep_);
    if (efd_ >= 0) ::close(efd_);
}

void HttpServer::complete(uint64_t token, HttpResponse res) {
    {
        std::lock_guard<std::mutex> g(done_mu_);
        done_.emplace_back(token, std::move(res));
    }
    done_count_.fetch_add(1, std::memory_order_seq_cst);
    // Pairs with the loop's store to sleeping_ then load of done_count_: one of the two sees
    // the other, so a completion never waits for the 50 ms epoll timeout.
    if (sleeping_.load(std::memory_order_seq_cst)) {
        uint64_t one = 1;
        ssize_t r = ::write(efd_, &one, sizeof one);
        (void)r;
    }
}

HttpServer::Conn* HttpServer::conn_of(uint64_t token) {
    size_t slot = size_t(token >> 32);
    uint32_t gen = uint32_t(token);
    if (slot >= conns_.size() || !conns_[slot]) return nullptr;
    Conn* c = conns_[slot].get();
    return c->gen == gen && !c->closed ? c : nullptr;
}

void HttpServer::drain_completions() {
    if (done_count_.load(std::memory_order_acquire) == 0) return;
    {
        std::lock_guard<std::mutex> g(done_mu_);
        done_swap_.swap(done_);
        done_count_.store(0, std::memory_order_relaxed);
    }
    for (auto& [token, res] : done_swap_) {
        --outstanding_;
        Conn* c = conn_of(token);
        if (!c || !c->waiting) continue;
        c->waiting = false;
        send(c, res);
        if (!c->closed && !c->lingering) process(c);  // requests pipelined meanwhile
    }
    done_swap_.clear();
}

int HttpServer::listen(const std::string& host, int port, int* bound_port, std::string* err) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    std::string ps = std::to_string(port);
    int rc = getaddrinfo(host.c_str(), ps.c_str(), &hints, &res);
    if (rc != 0) {
        *err = "cannot resolve host '" + host + "': " + gai_strerror(rc);
        return -1;
    }
    int fd = -1;
    std::string last = "no address";
    for (addrinfo* a = res; a; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = std::strerror(errno);
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
        last = std::strerror(errno);
        ::close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        *err = "cannot listen on " + host + ":" + ps + ": " + last;
        return -1;
    }
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
    if (bound_port)
        *bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    int idx = int(listeners_.size());
    listeners_.push_back({fd});
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = uint64_t(idx);
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
    return idx;
}

void HttpServer::watch(int fd, std::function<void()> fn) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWatchBase + watched_.size();
    watched_.emplace_back(fd, std::move(fn));
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
}

void HttpServer::drain(int grace_ms, int max_ms) {
    if (draining_) return;
    draining_ = true;
    int64_t t = now_ms();
    drain_grace_at_ = t + grace_ms;
    drain_hard_at_ = t + std::max(grace_ms, max_ms);
}

bool HttpServer::busy() const {
    for (const auto& c : conns_)
        if (c && !c->closed && !c->lingering && (c->waiting || c->req_start != 0 || c->out.size() > c->out_off))
            return true;
    return false;
}

int HttpServer::run(HttpHandler& handler) {
    handler_ = &handler;
    std::vector<epoll_event> evs(256);
    std::vector<Conn*> closed;
    int64_t next_sweep = now_ms() + 100;
    while (!stop_) {
        int n = 0;
        if (outstanding_ > 0) {
            // Responses are being computed on other threads: poll (sockets and completions) for
            // a short while instead of sleeping, since a futex/eventfd wake-up costs ~20 us here.
            auto t0 = std::chrono::steady_clock::now();
            for (int k = 0;; ++k) {
                if (done_count_.load(std::memory_order_acquire) != 0) break;
                if ((k & 3) == 3) {
                    n = epoll_wait(ep_, evs.data(), int(evs.size()), 0);
                    if (n != 0) break;
                    if (std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(limits_.completion_spin_us)) break;
                }
                sched_yield();  // let the worker have the core on small machines
            }
        }
        if (n == 0 && done_count_.load(std::memory_order_acquire) == 0) {
            sleeping_.store(true, std::memory_order_seq_cst);
            if (done_count_.load(std::memory_order_seq_cst) == 0) n = epoll_wait(ep_, evs.data(), int(evs.size()), 50);
            sleeping_.store(false, std::memory_order_relaxed);
        }
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < n; ++i) {
            uint64_t tag = evs[size_t(i)].data.u64;
            if (tag < kWatchBase) {
                accept_all(int(tag));
            } else if (tag < kMaxTag) {
                auto& [fd, fn] = watched_[size_t(tag - kWatchBase)];
                fn();
            } else {
                Conn* c = reinterpret_cast<Conn*>(tag);
                if (c->closed) continue;
                uint32_t e = evs[size_t(i)].events;
                if (e & EPOLLOUT) on_writable(c);
                if (!c->closed && (e & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_readable(c);
            }
        }
        drain_completions();
        int64_t t = now_ms();
        if (t >= next_sweep) {
            sweep(t);
            next_sweep = t + 100;
        }
        if (draining_ && ((t >= drain_grace_at_ && !busy()) || t >= drain_hard_at_)) break;
    }
    handler_ = nullptr;
    return 0;
}

void HttpServer::accept_all(int li) {
    for (;;) {
        int fd = ::accept4(listeners_[size_t(li)].fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;  // EAGAIN, or an error on one connection: nothing to do
        if (live_conns_ >= limits_.max_connections) {
            ::close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        size_t slot;
        if (!free_slots_.empty()) {
            slot = free_slots_.back();
            free_slots_.pop_back();
        } else {
            slot = conns_.size();
            conns_.emplace_back();
        }
        conns_[slot] = std::make_unique<Conn>();
        Conn* c = conns_[slot].get();
        c->fd = fd;
        c->slot = slot;
        c->gen = next_gen_++;
        if (next_gen_ == 0) next_gen_ = 1;
        c->listener = li;
        c->last_active = now_ms();
        c->events = EPOLLIN;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = reinterpret_cast<uint64_t>(c);
        epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
        ++live_conns_;
    }
}

void HttpServer::close_conn(Conn* c) {
    if (c->closed) return;
    epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    c->closed = true;
    c->in.clear();
    c->in.shrink_to_fit();
    c->out.clear();
    c->out.shrink_to_fit();
    --live_conns_;
    // The Conn object stays until the sweep (epoll events of this batch may still name it).
}

void HttpServer::on_readable(Conn* c) {
    for (;;) {
        ssize_t n = ::read(c->fd, rbuf_.data(), rbuf_.size());
        if (n > 0) {
            c->last_active = now_ms();
            if (c->lingering) {
                if (size_t(n) < rbuf_.size()) return;
                continue;
            }
            if (c->in.empty() && c->req_start == 0) {
                c->req_start = c->last_active;
                c->req_draining = draining_;
            }
            c->in.append(rbuf_.data(), size_t(n));
            if (size_t(n) < rbuf_.size()) break;  // level-triggered: drained for now
            if (c->in.size() > limits_.max_header_bytes + limits_.max_body_bytes + rbuf_.size()) break;
            continue;
        }
        if (n == 0) {  // peer closed
            close_conn(c);
            return;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        close_conn(c);
        return;
    }
    if (!c->lingering) process(c);
}

void HttpServer::on_writable(Conn* c) { flush(c); }

void HttpServer::flush(Conn* c) {
    if (c->closed) return;
    while (c->out_off < c->out.size()) {
        ssize_t n = ::write(c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off);
        if (n > 0) {
            c->out_off += size_t(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!(c->events & EPOLLOUT)) {
                epoll_event ev{};
                ev.events = EPOLLOUT;  // stop reading until the response is out
                ev.data.u64 = reinterpret_cast<uint64_t>(c);
                epoll_ctl(ep_, EPOLL_CTL_MOD, c->fd, &ev);
                c->events = EPOLLOUT;
            }
            return;
        }
        close_conn(c);
        return;
    }
    c->out.clear();
    c->out_off = 0;
    c->out_since = 0;
    if (c->close_after) {
        // Lingering close: shut our side, discard what the client still sends (so the kernel
        // does not answer it with a reset that could destroy the response in flight).
        ::shutdown(c->fd, SHUT_WR);
        c->lingering = true;
        c->linger_until = now_ms() + kLingerMs;
        c->in.clear();
        c->req_start = 0;
    }
    if (c->events != EPOLLIN) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = reinterpret_cast<uint64_t>(c);
        epoll_ctl(ep_, EPOLL_CTL_MOD, c->fd, &ev);
        c->events = EPOLLIN;
        if (!c->lingering) process(c);  // requests that were buffered meanwhile
    }
}

void HttpServer::send(Conn* c, const HttpResponse& res, bool head_only) {
    if (c->closed) return;
    if (head_only) {  // HEAD: the headers GET would get (Content-Length included), no body
        HttpResponse h = res;
        std::string n = std::to_string(res.body.size());
        h.body.clear();
        h.headers.emplace_back("Content-Length", n);
        return send(c, h, false);
    }
    if (res.close || !c->keep_alive) c->close_after = true;
    std::string head;
    head.reserve(256);
    head += "HTTP/1.1 ";
    head += std::to_string(res.status);
    head += ' ';
    head += http_reason(res.status);
    head += "\r\nContent-Type: ";
    head += res.content_type;
    bool has_cl = false;
    for (const auto& kv : res.headers) has_cl |= kv.first == "Content-Length";
    if (!has_cl) {
        head += "\r\nContent-Length: ";
        head += std::to_string(res.body.size());
    }
    head += "\r\n";
    for (const auto& [k, v] : res.headers) {
        head += k;
        head += ": ";
        head += v;
        head += "\r\n";
    }
    if (c->close_after) head += "Connection: close\r\n";
    head += "\r\n";
    if (c->out.size() == c->out_off) {
        // Nothing queued: try to send head and body in one writev without copying the body.
        iovec iov[2] = {{head.data(), head.size()}, {const_cast<char*>(res.body.data()), res.body.size()}};
        size_t total = head.size() + res.body.size();
        ssize_t n;
        do n = ::writev(c->fd, iov, res.body.empty() ? 1 : 2);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                close_conn(c);
                return;
            }
            n = 0;
        }
        c->out.clear();
        c->out_off = 0;
        if (size_t(n) < total) {
            size_t k = size_t(n);
            if (k < head.size()) {
                c->out.append(head, k, std::string::npos);
                c->out.append(res.body);
            } else {
                c->out.append(res.body, k - head.size(), std::string::npos);
            }
            c->out_since = now_ms();
        }
    } else {
        c->out += head;
        c->out += res.body;
    }
    flush(c);
}

void HttpServer::send_error(Conn* c, int status, const std::string& msg, bool close) {
    HttpResponse r;
    r.status = status;
    r.body = "{\"error\":\"" + json_escape(msg) + "\"}";
    r.close = close;
    send(c, r);
}

// Parses c->in[0, head_len) (request line + headers, without the final CRLFCRLF).
bool HttpServer::parse_head(Conn* c, size_t head_len) {
    std::string_view h(c->in.data(), head_len);
    HttpRequest& r = c->req;
    r = HttpRequest{};
    r.listener = c->listener;
    r.while_draining = c->req_draining;
    // Every line must end in CRLF; no bare CR or LF, no NUL.
    for (size_t i = 0; i < h.size(); ++i) {
        char ch = h[i];
        if (ch == '\n' && (i == 0 || h[i - 1] != '\r')) return send_error(c, 400, "bare LF in request head", true), false;
        if (ch == '\r' && (i + 1 >= h.size() || h[i + 1] != '\n')) return send_error(c, 400, "bare CR in request head", true), false;
        if (ch == '\0') return send_error(c, 400, "NUL byte in request head", true), false;
    }
    size_t eol = h.find("\r\n");
    std::string_view line = h.substr(0, eol);
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
        return send_error(c, 400, "malformed request line", true), false;
    std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                     version = line.substr(sp2 + 1);
    if (method.empty() || method.size() > 16 ||
        !std::all_of(method.begin(), method.end(), [](char ch) { return ch >= 'A' && ch <= 'Z'; }))
        return send_error(c, 400, "malformed method in request line", true), false;
    if (target.empty() || target[0] != '/' ||
        !std::all_of(target.begin(), target.end(), [](char ch) { return ch > 0x20 && ch < 0x7f; }))
        return send_error(c, 400, "malformed request target (expected an absolute path)", true), false;
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[5])) ||
        !std::isdigit(static_cast<unsigned char>(version[7])))
        return send_error(c, 400, "malformed HTTP version", true), false;
    if (version[5] != '1' || (version[7] != '0' && version[7] != '1'))
        return send_error(c, 505, "only HTTP/1.0 and HTTP/1.1 are supported", true), false;
    r.method = std::string(method);
    r.target = std::string(target);
    r.minor = version[7] - '0';
    std::string_view rawpath = target.substr(0, target.find('?'));
    r.path.reserve(rawpath.size());
    for (size_t i = 0; i < rawpath.size(); ++i) {
        if (rawpath[i] == '%') {
            int a = i + 2 < rawpath.size() ? hexval(rawpath[i + 1]) : -1, b = a >= 0 ? hexval(rawpath[i + 2]) : -1;
            if (a < 0 || b < 0 || (a == 0 && b == 0)) return send_error(c, 400, "bad percent-encoding in request target", true), false;
            r.path += char(a * 16 + b);
            i += 2;
        } else {
            r.path += rawpath[i];
        }
    }
    // Headers.
    bool have_cl = false, conn_close = false, conn_keep = false;
    uint64_t cl = 0;
    size_t p = eol == std::string_view::npos ? h.size() : eol + 2;
    while (p < h.size()) {
        size_t e = h.find("\r\n", p);
        if (e == std::string_view::npos) e = h.size();
        std::string_view hl = h.substr(p, e - p);
        p = e + 2;
        if (hl.empty()) break;
        if (hl[0] == ' ' || hl[0] == '\t') return send_error(c, 400, "obsolete header line folding", true), false;
        size_t colon = hl.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return send_error(c, 400, "malformed header line (expected 'name: value')", true), false;
        std::string_view name = hl.substr(0, colon), value = hl.substr(colon + 1);
        if (!std::all_of(name.begin(), name.end(), [](char ch) { return is_tchar(static_cast<unsigned char>(ch)); }))
            return send_error(c, 400, "invalid character in header name '" + std::string(name) + "'", true), false;
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
        while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
        for (char ch : value) {
            unsigned char u = static_cast<unsigned char>(ch);
            if ((u < 0x20 && ch != '\t') || u == 0x7f)
                return send_error(c, 400, "invalid character in header '" + std::string(name) + "'", true), false;
        }
        if (r.headers.size() >= kMaxHeaders) return send_error(c, 431, "too many header fields (limit 100)", true), false;
        r.headers.emplace_back(lower(name), std::string(value));
        const std::string& ln = r.headers.back().first;
        if (ln == "content-length") {
            if (value.empty() || value.size() > 18 ||
                !std::all_of(value.begin(), value.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
                return send_error(c, 400, "invalid Content-Length '" + std::string(value) + "'", true), false;
            uint64_t v = std::stoull(std::string(value));
            if (have_cl && v != cl) return send_error(c, 400, "conflicting Content-Length headers", true), false;
            have_cl = true;
            cl = v;
        } else if (ln == "transfer-encoding") {
            if (lower(value) != "chunked")
                return send_error(c, 501, "Transfer-Encoding '" + std::string(value) + "' is not supported (only chunked)", true), false;
            if (c->chunked) return send_error(c, 400, "repeated Transfer-Encoding header", true), false;
            c->chunked = true;
        } else if (ln == "content-encoding") {
            std::string v = lower(value);
            if (!v.empty() && v != "identity")
                return send_error(c, 415, "Content-Encoding '" + std::string(value) + "' is not supported; send the body uncompressed",
                                  true),
                       false;
        } else if (ln == "connection") {
            std::string v = lower(value);
            if (v.find("close") != std::string::npos) conn_close = true;
            if (v.find("keep-alive") != std::string::npos) conn_keep = true;
        }
    }
    if (r.minor == 1 && !r.header("host")) return send_error(c, 400, "missing Host header (required by HTTP/1.1)", true), false;
    if (c->chunked && have_cl)
        return send_error(c, 400, "both Transfer-Encoding and Content-Length given (send one of them)", true), false;
    if (c->chunked && r.minor == 0) return send_error(c, 400, "Transfer-Encoding in an HTTP/1.0 request", true), false;
    if (r.method == "HEAD") {
        c->head_only = true;
        r.method = "GET";  // answered as GET, without the body
    }
    c->keep_alive = r.minor == 1 ? !conn_close : (conn_keep && !conn_close);
    size_t limit = handler_->body_limit(r, limits_.max_body_bytes);
    if (cl > limit)
        return send_error(c, 413, "request body of " + std::to_string(cl) + " bytes exceeds the limit of " +
                                      std::to_string(limit) + " bytes", true),
               false;
    c->body_len = size_t(cl);
    c->body_limit = limit;
    if (const std::string* ex = r.header("expect")) {
        if (lower(*ex) != "100-continue") return send_error(c, 417, "unsupported Expect value '" + *ex + "'", true), false;
        if ((c->body_len > 0 || c->chunked) && c->in.size() == head_len + 2) {
            static const char kCont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            c->out.append(kCont, sizeof kCont - 1);
            flush(c);
            if (c->closed) return false;
        }
    }
    return true;
}

void HttpServer::process(Conn* c) {
    while (!c->closed && !c->lingering && !c->waiting && c->out.size() == c->out_off) {
        if (!c->have_head) {
            size_t from = c->scan >= 3 ? c->scan - 3 : 0;
            size_t e = c->in.find("\r\n\r\n", from);
            if (e == std::string::npos) {
                if (!plausible_start(c->in)) {
                    send_error(c, 400, "malformed request line", true);
                    return;
                }
                if (c->in.size() > limits_.max_header_bytes) {
                    send_error(c, 431, "request head exceeds " + std::to_string(limits_.max_header_bytes) + " bytes", true);
                    return;
                }
                c->scan = c->in.size();
                return;
            }
            if (e + 4 > limits_.max_header_bytes) {
                send_error(c, 431, "request head exceeds " + std::to_string(limits_.max_header_bytes) + " bytes", true);
                return;
            }
            c->chunked = c->chunks_done = false;
            c->chunk_state = 0;
            c->head_only = false;
            if (!parse_head(c, e + 2)) return;
            c->have_head = true;
            c->head_len = e + 4;
            c->raw = c->head_len;
            if (c->in.capacity() < c->head_len + c->body_len) c->in.reserve(c->head_len + c->body_len);
        }
        if (c->chunked) {
            if (!dechunk(c)) return;
        } else if (c->in.size() < c->head_len + c->body_len) {
            return;
        }
        c->req.body = std::string_view(c->in.data() + c->head_len, c->body_len);
        c->req.token = (uint64_t(c->slot) << 32) | c->gen;
        HttpResponse res;
        try {
            handler_->handle(c->req, res);
        } catch (const std::bad_alloc&) {
            res = HttpResponse{};
            res.status = 500;
            res.body = "{\"error\":\"out of memory\"}";
        } catch (const std::exception& ex) {
            res = HttpResponse{};
            res.status = 500;
            res.body = "{\"error\":\"internal error: " + json_escape(ex.what()) + "\"}";
        }
        size_t used = c->chunked ? c->raw : c->head_len + c->body_len;
        bool head_only = c->head_only;
        c->have_head = false;
        c->scan = 0;
        c->req = HttpRequest{};
        if (used >= c->in.size()) {
            c->in.clear();
            if (c->in.capacity() > (size_t(1) << 20)) c->in.shrink_to_fit();
            c->req_start = 0;
        } else {
            c->in.erase(0, used);
            c->req_start = now_ms();
            c->req_draining = draining_;
        }
        if (res.deferred) {
            c->waiting = true;
            ++outstanding_;
            return;
        }
        send(c, res, head_only);
    }
}

// Decodes the chunks that have arrived (RFC 9112 7.1) in place; true once the last chunk and
// the trailer are in. False: wait for more bytes, or an error response was queued.
bool HttpServer::dechunk(Conn* c) {
    std::string& in = c->in;
    while (!c->chunks_done) {
        if (c->chunk_state == 0 || c->chunk_state == 3) {  // a size line or a trailer line
            size_t eol = in.find("\r\n", c->raw);
            if (eol == std::string::npos) {
                if (in.size() - c->raw > 4096) return send_error(c, 400, "chunk size or trailer line too long", true), false;
                return false;
            }
            std::string_view line(in.data() + c->raw, eol - c->raw);
            c->raw = eol + 2;
            if (c->chunk_state == 3) {
                if (line.empty()) c->chunks_done = true;  // trailer fields are ignored
                continue;
            }
            std::string_view hex = line.substr(0, line.find(';'));  // chunk extensions are ignored
            while (!hex.empty() && (hex.back() == ' ' || hex.back() == '\t')) hex.remove_suffix(1);
            if (hex.empty() || hex.size() > 15) return send_error(c, 400, "invalid chunk size line", true), false;
            uint64_t n = 0;
            for (char ch : hex) {
                int v = hexval(ch);
                if (v < 0) return send_error(c, 400, "invalid chunk size '" + std::string(hex) + "'", true), false;
                n = n * 16 + uint64_t(v);
            }
            if (n == 0) {
                c->chunk_state = 3;
                continue;
            }
            if (c->body_len + n > c->body_limit)
                return send_error(c, 413, "chunked request body exceeds the limit of " + std::to_string(c->body_limit) + " bytes", true),
                       false;
            c->chunk_left = size_t(n);
            c->chunk_state = 1;
        } else if (c->chunk_state == 1) {
            size_t take = std::min(c->chunk_left, in.size() - c->raw);
            if (take == 0) return false;
            std::memmove(in.data() + c->head_len + c->body_len, in.data() + c->raw, take);
            c->body_len += take;
            c->raw += take;
            c->chunk_left -= take;
            if (c->chunk_left == 0) c->chunk_state = 2;
        } else {
            if (in.size() - c->raw < 2) return false;
            if (in[c->raw] != '\r' || in[c->raw + 1] != '\n') return send_error(c, 400, "chunk data not followed by CRLF", true), false;
            c->raw += 2;
            c->chunk_state = 0;
        }
    }
    return true;
}

void HttpServer::sweep(int64_t t) {
    for (size_t i = 0; i < conns_.size(); ++i) {
        Conn* c = conns_[i].get();
        if (!c) continue;
        if (c->closed) {
            conns_[i].reset();
            free_slots_.push_back(i);
            continue;
        }
        if (c->lingering) {
            if (t >= c->linger_until) close_conn(c);
        } else if (c->waiting) {
            // the model is computing this connection's response
        } else if (c->out.size() > c->out_off) {
            if (c->out_since && t - c->out_since > limits_.write_timeout_ms) close_conn(c);
        } else if (c->req_start != 0) {
            if (t - c->req_start > limits_.read_timeout_ms)
                send_error(c, 408, "request not received completely within " + std::to_string(limits_.read_timeout_ms) + " ms", true);
        } else if (t - c->last_active > limits_.idle_timeout_ms) {
            close_conn(c);
        }
    }
}

}  // namespace jiffy::serve

// A lean HTTP/1.1 server: one epoll loop on one thread, keep-alive, Content-Length or chunked bodies,
// strict parsing with limits (header bytes, body bytes, read timeout for slow clients). The
// handler runs on the loop thread; it may answer at once or defer the response (set
// `deferred`), which another thread later hands back with complete() (see docs/serving.md).
#pragma once
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jiffy::serve {

struct HttpRequest {
    std::string method;  // "GET", "POST", ...
    std::string target;  // as sent: path plus optional "?query"
    std::string path;    // target before '?'
    int minor = 1;       // HTTP/1.<minor>
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
    std::string_view body;  // valid during handle()
    int listener = 0;       // index of the listening socket that accepted the connection
    bool while_draining = false;  // the request's first byte arrived after drain began
    uint64_t token = 0;     // names the connection for HttpServer::complete()

    // Value of a header (name lower-case), or nullptr.
    const std::string* header(std::string_view lname) const;
};

struct HttpResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::vector<std::pair<std::string, std::string>> headers;  // extra headers
    std::string body;
    bool close = false;  // close the connection after sending
    // The handler will answer later through HttpServer::complete(req.token, ...). The request's
    // body is no longer valid once handle() returns; the connection waits (in order) meanwhile.
    bool deferred = false;
};

struct HttpLimits {
    size_t max_header_bytes = 16 * 1024;     // request line + headers; over it: 431
    size_t max_body_bytes = size_t(64) << 20;  // default body limit; over it: 413 (handler may lower it)
    int read_timeout_ms = 10000;   // a started request must arrive completely within this: else 408
    int idle_timeout_ms = 60000;   // keep-alive connections idle this long are closed
    int write_timeout_ms = 30000;  // a response stuck unsent this long: connection closed
    size_t max_connections = 1024;  // beyond it new connections are closed at once
    int completion_spin_us = 60;    // with deferred responses out: poll this long before sleeping
};

class HttpHandler {
public:
    virtual ~HttpHandler() = default;
    // Body limit for a request whose headers are parsed (body not read yet).
    virtual size_t body_limit(const HttpRequest& req, size_t server_limit) { return server_limit; }
    virtual void handle(const HttpRequest& req, HttpResponse& res) = 0;
};

class HttpServer {
public:
    explicit HttpServer(HttpLimits limits);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds and listens; returns the listener index (>= 0) and the bound port, or -1 with *err.
    int listen(const std::string& host, int port, int* bound_port, std::string* err);
    // Calls `fn` on the loop thread when `fd` is readable (e.g. a signalfd).
    void watch(int fd, std::function<void()> fn);
    // Runs until stop() or until a drain has finished. Returns 0.
    int run(HttpHandler& handler);
    // Stop at once (from the loop thread).
    void stop() { stop_ = true; }
    // Begin draining: requests that start from now on are marked while_draining (the handler
    // answers them 503); the loop exits once `grace_ms` have passed and no request is
    // partially received or being answered, or after `max_ms` in any case.
    void drain(int grace_ms, int max_ms);
    bool draining() const { return draining_; }
    // Hands back a deferred response; callable from any thread. Ignored when the connection has
    // closed meanwhile. Wakes the loop only when it sleeps (it polls while responses are out).
    void complete(uint64_t token, HttpResponse res);

private:
    struct Conn;
    struct Listener {
        int fd;
    };
    void accept_all(int li);
    void on_readable(Conn* c);
    void on_writable(Conn* c);
    void process(Conn* c);
    bool dechunk(Conn* c);
    bool parse_head(Conn* c, size_t head_end);  // false: error response queued
    void send(Conn* c, const HttpResponse& res, bool head_only = false);
    void send_error(Conn* c, int status, const std::string& msg, bool close);
    void flush(Conn* c);
    void close_conn(Conn* c);
    void sweep(int64_t now_ms);
    bool busy() const;
    void drain_completions();
    Conn* conn_of(uint64_t token);

    HttpLimits limits_;
    HttpHandler* handler_ = nullptr;
    int ep_ = -1;
    bool stop_ = false, draining_ = false;
    int64_t drain_grace_at_ = 0, drain_hard_at_ = 0;
    std::vector<Listener> listeners_;
    std::vector<std::pair<int, std::function<void()>>> watched_;
    std::vector<std::unique_ptr<Conn>> conns_;  // index = slot
    std::vector<size_t> free_slots_;
    size_t live_conns_ = 0;
    std::vector<char> rbuf_;
    uint32_t next_gen_ = 1;
    int64_t outstanding_ = 0;  // deferred responses not yet completed (loop thread only)
    int efd_ = -1;             // eventfd: wakes the loop when it sleeps
    std::mutex done_mu_;
    std::vector<std::pair<uint64_t, HttpResponse>> done_, done_swap_;
    std::atomic<int64_t> done_count_{0};
    std::atomic<bool> sleeping_{false};
};

const char* http_reason(int status);

}  // namespace jiffy::serve

// Test helpers for `jiffy serve`: start the real server binary on an ephemeral loopback port and
// talk to it with a tiny blocking HTTP/1.1 client.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace serve_test {

struct Response {
    int status = 0;  // 0: no response (connection closed / timeout)
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
    std::string header(const std::string& n) const {
        auto it = headers.find(n);
        return it == headers.end() ? "" : it->second;
    }
};

class Client {
public:
    explicit Client(int port, int timeout_ms = 10000) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            ::close(fd_);
            fd_ = -1;
            return;
        }
        int one = 1;
        setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    ~Client() {
        if (fd_ >= 0) ::close(fd_);
    }
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;
    bool ok() const { return fd_ >= 0; }

    bool send_raw(const std::string& s) {
        size_t off = 0;
        while (off < s.size()) {
            ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return false;
            off += size_t(n);
        }
        return true;
    }

    // Reads one response (Content-Length framed).
    Response read_response() {
        Response r;
        size_t he;
        while ((he = buf_.find("\r\n\r\n")) == std::string::npos)
            if (!fill()) return r;
        std::string head = buf_.substr(0, he);
        size_t p = head.find("\r\n");
        std::string line = head.substr(0, p);
        if (line.size() < 12) return r;
        r.status = std::atoi(line.c_str() + 9);
        while (p != std::string::npos && p < head.size()) {
            size_t q = head.find("\r\n", p + 2);
            std::string hl = head.substr(p + 2, q == std::string::npos ? std::string::npos : q - p - 2);
            size_t c = hl.find(':');
            if (c != std::string::npos) {
                std::string k = hl.substr(0, c), v = hl.substr(c + 1);
                for (char& ch : k) ch = char(std::tolower(static_cast<unsigned char>(ch)));
                while (!v.empty() && v[0] == ' ') v.erase(0, 1);
                r.headers[k] = v;
            }
            p = q;
        }
        size_t len = size_t(std::atoll(r.header("content-length").c_str()));
        buf_.erase(0, he + 4);
        while (buf_.size() < len)
            if (!fill()) {
                r.status = 0;
                return r;
            }
        r.body = buf_.substr(0, len);
        buf_.erase(0, len);
        if (r.status == 100) return read_response();
        return r;
    }

    Response request(const std::string& method, const std::string& path, const std::string& body = "",
                     const std::vector<std::pair<std::string, std::string>>& headers = {}) {
        std::string s = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
        for (const auto& [k, v] : headers) s += k + ": " + v + "\r\n";
        if (!body.empty() || method == "POST") s += "Content-Length: " + std::to_string(body.size()) + "\r\n";
        s += "\r\n";
        s += body;
        if (!send_raw(s)) return {};
        return read_response();
    }

    // True when the server closed the connection (EOF) within timeout_ms.
    bool closed_by_peer(int timeout_ms = 3000) {
        pollfd p{fd_, POLLIN, 0};
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        while (std::chrono::steady_clock::now() < end) {
            if (::poll(&p, 1, 50) > 0) {
                char b[4096];
                ssize_t n = ::recv(fd_, b, sizeof b, 0);
                if (n <= 0) return true;
            }
        }
        return false;
    }

private:
    bool fill() {
        char b[65536];
        ssize_t n = ::recv(fd_, b, sizeof b, 0);
        if (n <= 0) return false;
        buf_.append(b, size_t(n));
        return true;
    }
    int fd_ = -1;
    std::string buf_;
};

// The server process.
class Server {
public:
    Server() = default;
    ~Server() { kill_now(); }
    // Starts `jiffy serve ARGS --http-port 0` and waits for its "listening on" line.
    bool start(const std::string& binary, std::vector<std::string> args, const std::string& stderr_file) {
        int pfd[2];
        if (pipe(pfd) != 0) return false;
        args.insert(args.begin(), {binary, "serve"});
        args.push_back("--http-port");
        args.push_back("0");
        pid_ = fork();
        if (pid_ == 0) {
            dup2(pfd[1], 1);
            FILE* e = std::fopen(stderr_file.c_str(), "w");
            if (e) dup2(fileno(e), 2);
            close(pfd[0]);
            std::vector<char*> av;
            for (auto& a : args) av.push_back(a.data());
            av.push_back(nullptr);
            execv(binary.c_str(), av.data());
            _exit(127);
        }
        close(pfd[1]);
        out_ = pfd[0];
        std::string got;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (std::chrono::steady_clock::now() < end) {
            pollfd p{out_, POLLIN, 0};
            if (::poll(&p, 1, 100) > 0) {
                char b[512];
                ssize_t n = read(out_, b, sizeof b);
                if (n <= 0) return false;  // exited
                got.append(b, size_t(n));
                size_t k = got.find("listening on http://");
                if (k != std::string::npos && got.find('\n', k) != std::string::npos) {
                    size_t c = got.rfind(':', got.find('\n', k));
                    port_ = std::atoi(got.c_str() + c + 1);
                    return port_ > 0;
                }
            }
        }
        return false;
    }
    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    void signal(int s) {
        if (pid_ > 0) ::kill(pid_, s);
    }
    // Waits for exit; returns the exit status, or -1 on timeout / signal death.
    int wait_exit(int timeout_ms) {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        while (std::chrono::steady_clock::now() < end) {
            int st = 0;
            pid_t r = waitpid(pid_, &st, WNOHANG);
            if (r == pid_) {
                pid_ = -1;
                return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return -1;
    }
    void kill_now() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
            pid_ = -1;
        }
        if (out_ >= 0) {
            close(out_);
            out_ = -1;
        }
    }

private:
    pid_t pid_ = -1;
    int out_ = -1;
    int port_ = 0;
};

}  // namespace serve_test

// MosquittoBroker: a real `mosquitto -c <tmp conf>` on a free loopback port, owned by the test.
// start() waits until it accepts TCP connections; kill9() + start() restarts it on the same port
// (a broker that lost all its state); the destructor always kills it and removes its files. The
// child also dies with its parent (PR_SET_PDEATHSIG), so a crashed test leaves no broker behind.
// Header-only and free of gtest: the bench (bench/mqtt_echo.cpp) uses it too.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace jiffy::testing {

class MosquittoBroker {
public:
    // extra_conf: lines appended to the generated mosquitto.conf.
    explicit MosquittoBroker(std::string extra_conf = "") : extra_(std::move(extra_conf)) {
        char tmpl[] = "/tmp/jiffy-mosq-XXXXXX";
        const char* d = mkdtemp(tmpl);
        dir_ = d ? d : "/tmp";
        port_ = free_port();
    }
    ~MosquittoBroker() {
        kill9();
        std::remove((dir_ + "/mosquitto.conf").c_str());
        std::remove((dir_ + "/mosquitto.log").c_str());
        std::remove((dir_ + "/mosquitto.db").c_str());
        rmdir(dir_.c_str());
    }
    MosquittoBroker(const MosquittoBroker&) = delete;
    MosquittoBroker& operator=(const MosquittoBroker&) = delete;

    int port() const { return port_; }
    bool running() const { return pid_ > 0; }
    const std::string& dir() const { return dir_; }

    // Starts the broker and waits (up to timeout_ms) until it accepts a TCP connection.
    bool start(int timeout_ms = 5000) {
        if (pid_ > 0) return true;
        std::string conf = dir_ + "/mosquitto.conf";
        {
            std::ofstream f(conf);
            f << "listener " << port_ << " 127.0.0.1\n"
              << "allow_anonymous true\n"
              << "set_tcp_nodelay true\n"
              << "persistence false\n"
              << "log_dest stderr\n"
              << "max_queued_messages 100000\n"
              << extra_ << "\n";
        }
        std::string logf = dir_ + "/mosquitto.log";
        pid_t pid = fork();
        if (pid < 0) return false;
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            int fd = open(logf.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            execlp("mosquitto", "mosquitto", "-c", conf.c_str(), (char*)nullptr);
            execl("/usr/sbin/mosquitto", "mosquitto", "-c", conf.c_str(), (char*)nullptr);
            _exit(127);
        }
        pid_ = pid;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        while (std::chrono::steady_clock::now() < deadline) {
            if (accepts()) {
                started_ = std::chrono::steady_clock::now();
                return true;
            }
            int st;
            if (waitpid(pid_, &st, WNOHANG) == pid_) {  // died (port taken, bad conf)
                pid_ = -1;
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        kill9();
        return false;
    }

    // SIGKILL, like a crashed broker: every client connection and all in-memory state are gone.
    void kill9() {
        if (pid_ <= 0) return;
        kill(pid_, SIGKILL);
        int st;
        waitpid(pid_, &st, 0);
        pid_ = -1;
    }

    // SIGSTOP / SIGCONT: a hung broker that keeps its connections open but answers nothing.
    void pause() {
        if (pid_ > 0) kill(pid_, SIGSTOP);
    }
    void resume() {
        if (pid_ > 0) kill(pid_, SIGCONT);
    }

    // When the last start() saw the port accept.
    std::chrono::steady_clock::time_point started_at() const { return started_; }

    bool accepts() const {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return false;
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port_));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bool ok = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
        close(s);
        return ok;
    }

    std::string log_text() const {
        std::ifstream f(dir_ + "/mosquitto.log");
        return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }

    // A loopback port nobody listens on right now.
    static int free_port() {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = 0;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int port = 0;
        if (s >= 0 && bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
            socklen_t len = sizeof(a);
            if (getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) port = ntohs(a.sin_port);
        }
        if (s >= 0) close(s);
        return port;
    }

private:
    std::string extra_;
    std::string dir_;
    int port_ = 0;
    pid_t pid_ = -1;
    std::chrono::steady_clock::time_point started_{};
};

}  // namespace jiffy::testing

// Hot reload (`jiffy serve --repository-poll-ms N`): a background thread scans the repository
// every N ms; a version folder that is new or whose model.onnx / config.yaml changed (size or
// mtime, unchanged over two scans so a half-copied file is not loaded) is loaded, compiled and
// warmed up on that thread. The result is handed to the I/O thread (an eventfd it watches),
// which swaps it in under the repository's lock: requests already running keep the old version
// alive through their shared_ptr. A version that fails keeps the old one serving; the failure
// and its reason show in POST /v2/repository/index, and it is not retried until its files change.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "serve/repository.h"

namespace jiffy::serve {

class HttpServer;

class Reloader {
public:
    // Must be constructed before server.run() (it registers an fd with the loop).
    Reloader(Repository& repo, HttpServer& server, int poll_ms);
    ~Reloader();
    Reloader(const Reloader&) = delete;
    Reloader& operator=(const Reloader&) = delete;

private:
    void loop();
    void scan_once();
    void post(std::function<void()> fn);  // run fn on the I/O thread
    void on_posted();                     // I/O thread

    Repository& repo_;
    int poll_ms_;
    int efd_ = -1;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::vector<std::function<void()>> posted_;
    std::map<std::pair<std::string, int64_t>, uint64_t> seen_;  // fingerprint at the previous scan (debounce)
    std::thread thread_;
};

}  // namespace jiffy::serve

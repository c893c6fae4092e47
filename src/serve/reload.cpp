#include "serve/reload.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "serve/http.h"

namespace fs = std::filesystem;

namespace jiffy::serve {

Reloader::Reloader(Repository& repo, HttpServer& server, int poll_ms) : repo_(repo), poll_ms_(poll_ms) {
    efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    server.watch(efd_, [this] { on_posted(); });
    thread_ = std::thread([this] { loop(); });
}

Reloader::~Reloader() {
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (efd_ >= 0) close(efd_);
}

void Reloader::post(std::function<void()> fn) {
    {
        std::lock_guard<std::mutex> g(mu_);
        posted_.push_back(std::move(fn));
    }
    uint64_t one = 1;
    (void)!write(efd_, &one, sizeof one);
}

void Reloader::on_posted() {
    uint64_t n;
    (void)!read(efd_, &n, sizeof n);
    std::vector<std::function<void()>> todo;
    {
        std::lock_guard<std::mutex> g(mu_);
        todo.swap(posted_);
    }
    for (auto& fn : todo) fn();
}

void Reloader::loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
        cv_.wait_for(lk, std::chrono::milliseconds(poll_ms_), [this] { return stop_; });
        if (stop_) break;
        lk.unlock();
        scan_once();
        lk.lock();
    }
}

void Reloader::scan_once() {
    // What is loaded now (and what failed), read under the repository's lock.
    struct Known {
        std::map<int64_t, uint64_t> loaded, failed;
    };
    std::map<std::string, Known> known;
    {
        std::lock_guard<std::mutex> g(repo_.mu());
        for (const auto& [n, e] : repo_.models()) {
            Known& k = known[n];
            for (const auto& [v, lv] : e->versions) k.loaded[v] = lv->fingerprint;
            k.failed = e->failed_fingerprint;
        }
    }
    for (const std::string& name : repo_.scan()) {
        std::string dir = (fs::path(repo_.root()) / name).string();
        ModelConfig cfg;
        std::error_code ec;
        if (fs::exists(dir + "/config.yaml", ec) && !parse_model_config(dir + "/config.yaml", &cfg).ok()) continue;
        const Known& k = known[name];
        for (int64_t v : Repository::wanted_versions(cfg, Repository::versions_on_disk(dir))) {
            uint64_t fp = Repository::fingerprint(dir, v);
            if (!fp) continue;
            auto l = k.loaded.find(v);
            if (l != k.loaded.end() && l->second == fp) continue;
            auto f = k.failed.find(v);
            if (f != k.failed.end() && f->second == fp) continue;
            uint64_t& prev = seen_[{name, v}];
            if (prev != fp) {  // changed since the last scan: wait until it holds still
                prev = fp;
                continue;
            }
            std::unique_ptr<LoadedVersion> lv;
            auto t0 = std::chrono::steady_clock::now();
            Status st = repo_.prepare_version(name, cfg, v, &lv);
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (st.ok()) {
                std::fprintf(stderr, "jiffy serve: hot reload: model '%s' version %lld loaded and warmed up in %.1f ms\n",
                             name.c_str(), (long long)v, ms);
                auto* raw = lv.release();
                post([this, name, cfg, raw] { repo_.install(name, cfg, std::unique_ptr<LoadedVersion>(raw)); });
            } else {
                std::fprintf(stderr, "jiffy serve: hot reload: model '%s' version %lld failed (old versions keep serving): %s\n",
                             name.c_str(), (long long)v, st.message().c_str());
                std::string why = st.message();
                post([this, name, v, fp, why] { repo_.record_failure(name, v, fp, why); });
            }
        }
    }
}

}  // namespace jiffy::serve

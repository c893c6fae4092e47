// Sets (or, with nullptr, unsets) an environment variable for a scope and restores what it was:
// the tests' A/B switches (JIFFY_BAND_MIN_KB, JIFFY_GEMV_W24 ...), read at compile time.
#pragma once
#include <cstdlib>
#include <string>

namespace jiffy::testenv {

struct ScopedEnv {
    std::string name, old;
    bool had = false;
    ScopedEnv(const char* n, const char* v) : name(n) {
        if (const char* e = std::getenv(n)) old = e, had = true;
        if (v) setenv(n, v, 1);
        else unsetenv(n);
    }
    ScopedEnv(const char* n, const std::string& v) : ScopedEnv(n, v.c_str()) {}
    ~ScopedEnv() {
        if (had) setenv(name.c_str(), old.c_str(), 1);
        else unsetenv(name.c_str());
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace jiffy::testenv

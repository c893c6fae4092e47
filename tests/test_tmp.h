// Scratch paths for tests. ctest runs every gtest case as its own process, two at a time, so a
// fixed name under TempDir() is shared by cases that run at once (one truncates the file the
// other is reading). The process id keeps each case's files its own.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace jiffy::testing {

// A directory of this process's own under TempDir() (made on first use).
inline const std::string& scratch_dir() {
    static const std::string dir = [] {
        std::string d = ::testing::TempDir() + "/jiffy_" + std::to_string(::getpid());
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

inline std::string scratch(const std::string& name) { return scratch_dir() + "/" + name; }

}  // namespace jiffy::testing

// Environment switches read by the passes and the kernels' choices (A/B timing: JIFFY_NHWC=0,
// JIFFY_BAND=0, JIFFY_STEM=0 ...). Read at compile time, never on the run path.
#pragma once
#include <cstdlib>
#include <cstring>

namespace jiffy {

// Whether the environment variable `name` is set to "0" (a switch turned off).
inline bool env_zero(const char* name) {
    const char* e = std::getenv(name);
    return e && std::strcmp(e, "0") == 0;
}

}  // namespace jiffy

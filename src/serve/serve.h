// `jiffy serve`: KServe v2 / Open Inference Protocol REST over our own HTTP/1.1 loop.
// See docs/serving.md.
#pragma once

namespace jiffy::serve {

// argv[0] is "serve". Returns the process exit code: 0 after a clean shutdown (SIGTERM/SIGINT),
// 2 for bad arguments or a model that fails to load at start (unless --no-exit-on-error).
int serve_main(int argc, char** argv);

}  // namespace jiffy::serve

// `jiffy agent CONFIG.yaml [--metrics-port N] [--fast] [--duration S]`.
#pragma once

namespace jiffy::agent {

// argv[0] is "agent". Exit code: 0 after the agents finish (or SIGINT/SIGTERM/--duration),
// 2 for bad arguments or a bad config.
int agent_main(int argc, char** argv);

}  // namespace jiffy::agent

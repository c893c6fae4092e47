#!/usr/bin/env bash
# Configure and build Jiffy (Release) into build/. Used by demo.sh and test.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# shellcheck disable=SC2086
cmake -S "$root" -B "$root/build" $gen -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$(nproc)"

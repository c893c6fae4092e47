#!/usr/bin/env bash
# The main job: set up (packages, models, ONNX Runtime references), build, then run every public
# model on its reference inputs, check its outputs against ONNX Runtime's and print the latency
# table. Extra arguments go to build/jiffy_models (e.g. --seconds 3 --json out.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
exec "$root/build/jiffy_models" "$@"

#!/usr/bin/env bash
# Runs every test: set up (packages, models, ONNX Runtime references), build, then ctest (unit
# tests, ONNX backend conformance ratchet, real models vs ONNX Runtime, zero-allocation, CLI
# contract with bad models). Extra arguments go to ctest (e.g. -R conformance).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure --timeout 1500 -j"$(nproc)" "$@"

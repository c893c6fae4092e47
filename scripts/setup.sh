#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine for building and testing Jiffy:
#   1. the Debian packages (apt-get is skipped when all are installed already),
#   2. the public test models (scripts/fetch_models.sh),
#   3. the ONNX Runtime reference outputs (scripts/make_refs.sh),
#   4. the voice test clips and their reference scores (scripts/make_clips.sh).
# Run as root, or as a user who may sudo. Safe to re-run.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

pkgs="build-essential cmake ninja-build pkg-config git libprotobuf-dev protobuf-compiler
  libonnx-dev libonnx-testdata libgtest-dev libgmock-dev googletest libbenchmark-dev
  nlohmann-json3-dev libyaml-cpp-dev python3-onnx python3-numpy ca-certificates
  mosquitto mosquitto-clients libmosquitto-dev redis-server libhiredis-dev libxxhash-dev
  espeak-ng sox qemu-user g++-aarch64-linux-gnu python3-torch python3-torchvision"
# Node.js may come from elsewhere (e.g. NodeSource); only use Debian's when there is none.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  pkgs="$pkgs nodejs npm"
fi

missing=""
for p in $pkgs; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing="$missing $p"
done

if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing:$missing" >&2
  $sudo apt-get update -q
  # shellcheck disable=SC2086  # word splitting of the package list is intended
  $sudo env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends $missing
else
  echo "setup: all Debian packages already installed" >&2
fi

# make_refs.sh runs scripts/fetch_models.sh first, then builds the references.
"$root/scripts/make_refs.sh"
"$root/scripts/make_clips.sh"
echo "setup: done" >&2

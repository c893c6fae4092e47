#!/usr/bin/env bash
# Produce ONNX Runtime reference outputs in .cache/refs/<name>/ for every model in
# scripts/models.tsv (see scripts/make_refs.mjs for the file layout).
#
# Needs: node + npm and a python3 with the onnx module (Debian: python3-onnx). Runs
# scripts/fetch_models.sh first; installs onnxruntime-node into .cache/ort on first use.
# Idempotent: a model whose refs are up to date (see its stamp file) is skipped.
#
# Usage: scripts/make_refs.sh [--force] [NAME...]
# Env:   PYTHON  python interpreter to use (default: /usr/bin/python3, then python3)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
ort_version=1.30.0
ort_dir="$root/.cache/ort"
ort_pkg="$ort_dir/node_modules/onnxruntime-node"

# 1. onnxruntime-node. --ignore-scripts: its install script would try to download GPU
#    add-ons from a host outside the npm registry; the CPU binding ships in the package.
have=$(node -p "require('$ort_pkg/package.json').version" 2>/dev/null || true)
if [ "$have" != "$ort_version" ]; then
  echo "make_refs: installing onnxruntime-node@$ort_version into $ort_dir" >&2
  mkdir -p "$ort_dir"
  npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
    --prefix "$ort_dir" "onnxruntime-node@$ort_version" >&2
fi
# The CPU native binding must load on this machine.
node -e "
  const ort = require('$ort_pkg');
  if (!ort.listSupportedBackends().some((b) => b.name === 'cpu')) throw new Error('no cpu backend');
" || { echo "make_refs: ERROR: onnxruntime-node's CPU binding does not load (see above)" >&2; exit 1; }

# 2. A python3 that has the onnx module (the first python3 on PATH may not be Debian's).
if [ -z "${PYTHON:-}" ]; then
  for p in /usr/bin/python3 python3; do
    if "$p" -c 'import onnx' 2>/dev/null; then PYTHON=$p; break; fi
  done
fi
[ -n "${PYTHON:-}" ] || { echo "make_refs: ERROR: no python3 with 'onnx' (apt-get install python3-onnx)" >&2; exit 1; }
export PYTHON

# 3. The models (quick when cached), then the references.
"$root/scripts/fetch_models.sh"
"$PYTHON" "$root/scripts/make_models.py" "$root/.cache/models"
"$PYTHON" "$root/scripts/make_torch_models.py" "$root/.cache/models"
exec node "$root/scripts/make_refs.mjs" "$@"

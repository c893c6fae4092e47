#!/usr/bin/env bash
# Regenerates tests/conformance/allow.txt (every ONNX backend test that passes now) and deny.txt
# (every other test, with the reason the runner gives). Review the diff before committing: the
# allow-list is a ratchet, a test leaving it is a regression.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=/usr/share/libonnx-testdata/data
out=$(mktemp)
dirs=()
for suite in node pytorch-converted pytorch-operator simple; do
  for d in "$data/$suite"/*/; do [ -f "$d/model.onnx" ] && dirs+=("${d%/}"); done
done
"$root/build/jiffy_conformance" --verbose "${dirs[@]}" > "$out" || true
{
  echo "# ONNX backend tests that pass (ratchet: CI fails when one of these stops passing)."
  echo "# Regenerate with scripts/update_conformance_lists.sh after making more tests pass."
  grep '^PASS ' "$out" | awk '{print $2}' | sort
} > "$root/tests/conformance/allow.txt"
{
  echo "# ONNX backend tests that do not pass, each with the reason the runner reports."
  grep -E '^(FAIL|ERROR) ' "$out" | sed -E 's/^(FAIL|ERROR) ([^:]+): (.*)$/\2  # \1: \3/' | cut -c1-300 | sort
} > "$root/tests/conformance/deny.txt"
tail -n 6 "$out"

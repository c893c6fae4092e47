#!/usr/bin/env bash
# A periodic agent keeps its period: a 2 ms agent (scale stage + file sink) run for DURATION s
# (default 10: 5,000 ticks), once as a plain thread and once with `rt: fifo` + a pinned CPU +
# mlockall. Prints, per variant, ticks, deadline misses and tick lateness p50/p99/max (the exit
# table of `jiffy agent --duration`). Not a test: numbers depend on the machine's load (docs/agents.md).
#   scripts/periodic_bench.sh [DURATION_S] [CPU]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${JIFFY:-$root/build/jiffy}
dur=${1:-10}
cpu=${2:-$(( $(nproc) - 1 ))}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for variant in plain fifo; do
  rt=""
  [ "$variant" = fifo ] && rt="    rt: fifo
    priority: 80
    cpus: [$cpu]
    mlockall: true"
  cat > "$tmp/$variant.yaml" <<YAML
agents:
  - name: $variant
    trigger: {period_ms: 2}
$rt
    stages: [{name: sc, type: scale, scale: 2}]
    sinks: [{type: file, path: $tmp/$variant.jsonl}]
YAML
  "$bin" agent "$tmp/$variant.yaml" --duration "$dur" 2> "$tmp/$variant.err" || true
  grep -E "warning|cannot" "$tmp/$variant.err" | sed "s/^/  $variant: /" || true
  awk -v v="$variant" '
    /^agent / { ev=$3; miss=$7 }
    /tick lateness/ { p50=$4; p99=$6; mx=$7 }
    END { printf "%-6s ticks %6d  misses %4d (%.2f%%)  tick lateness p50 %7.1f us  p99 %8.1f us  max %9.1f us\n", v, ev, miss, ev ? 100*miss/ev : 0, p50, p99, mx }' "$tmp/$variant.err"
done

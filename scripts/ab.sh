#!/usr/bin/env bash
# A/B timing of one model under two environment settings, alternating A and B in one run so both
# see the same machine noise: scripts/ab.sh MODEL "ENV_A" "ENV_B" [ROUNDS] [extra jiffy bench args]
# e.g. scripts/ab.sh .cache/models/face_detector.onnx "JIFFY_PAR_CHUNKS=1" "JIFFY_PAR_CHUNKS=4" 9 --threads 2
# Prints each round's p50, the medians and the median of the per-round ratios (robust when the
# shared second core stalls for whole rounds).
set -euo pipefail
model=$1; a=$2; b=$3; rounds=${4:-7}; shift 4 || shift $#
bin=${JIFFY_BIN:-build/jiffy}
pa=(); pb=()
for ((i = 0; i < rounds; i++)); do
  ta=$(env $a "$bin" bench "$model" --seconds 0.4 --json "$@" 2>/dev/null | sed -n 's/.*"p50_us": \([0-9.]*\).*/\1/p')
  tb=$(env $b "$bin" bench "$model" --seconds 0.4 --json "$@" 2>/dev/null | sed -n 's/.*"p50_us": \([0-9.]*\).*/\1/p')
  pa+=("$ta"); pb+=("$tb")
  echo "round $i: A $ta  B $tb"
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
ma=$(med "${pa[@]}"); mb=$(med "${pb[@]}")
rs=(); for ((i = 0; i < rounds; i++)); do rs+=("$(awk -v a="${pa[i]}" -v b="${pb[i]}" 'BEGIN {printf "%.4f", b / a}')"); done
echo "median p50: A ($a) $ma us, B ($b) $mb us; median of the rounds' B/A $(med "${rs[@]}")"

#!/usr/bin/env bash
# Test clips for the voice chain (openWakeWord + Silero VAD) and their reference scores.
#
# Writes .cache/clips/:
#   <name>.wav       16 kHz mono int16 WAV: 1 s of digital silence, the clip, 1 s of silence
#   clips.tsv        one line per clip: name, kind (pos|neg|silence|noise), head, text
#                    (head = the wake-word head the phrase must fire; '-' for none)
#   refs/<name>.txt  per-step scores from tests/agent/oww_ref.mjs (ONNX Runtime, the authors'
#                    streaming rules)
# Speech: Debian espeak-ng, voice en-gb, at 130 and 150 words per minute (positives) or 140
# (negatives), resampled with sox without dither (-D: the same bytes on every run). Noise: sox white noise in repeatable mode (-R).
# Idempotent: existing clips are kept; a ref is rebuilt when missing or older than its clip
# or oww_ref.mjs. Needs espeak-ng, sox, node and the models (scripts/make_refs.sh first).
#
# Usage: scripts/make_clips.sh [--force]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.cache/clips"
force=0
[ "${1:-}" = "--force" ] && force=1

for tool in espeak-ng sox node; do
  command -v "$tool" >/dev/null 2>&1 || { echo "make_clips: ERROR: '$tool' not found (scripts/setup.sh installs it)" >&2; exit 1; }
done
mkdir -p "$out/refs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name|kind|head|text|words per minute
clips="
hey_jarvis_130|pos|hey_jarvis_v0.1|hey jarvis|130
hey_jarvis_150|pos|hey_jarvis_v0.1|hey jarvis|150
alexa_130|pos|alexa_v0.1|alexa|130
alexa_150|pos|alexa_v0.1|alexa|150
hey_mycroft_130|pos|hey_mycroft_v0.1|hey my croft|130
hey_mycroft_150|pos|hey_mycroft_v0.1|hey my croft|150
timer_130|pos|timer_v0.1|set a timer for ten minutes|130
timer_150|pos|timer_v0.1|set a timer for ten minutes|150
weather_130|pos|weather_v0.1|what is the weather|130
weather_150|pos|weather_v0.1|what is the weather|150
hello_world|neg|-|hello world|140
lights|neg|-|turn on the lights|140
good_morning|neg|-|good morning everyone|140
silence|silence|-|-|0
noise|noise|-|-|0
"

manifest="$tmp/clips.tsv"
: >"$manifest"
while IFS='|' read -r name kind head text wpm; do
  [ -n "$name" ] || continue
  printf '%s\t%s\t%s\t%s\n' "$name" "$kind" "$head" "$text" >>"$manifest"
  wav="$out/$name.wav"
  if [ "$force" = 0 ] && [ -s "$wav" ]; then continue; fi
  case "$kind" in
    pos|neg)
      espeak-ng -v en-gb -s "$wpm" -w "$tmp/raw.wav" "$text"
      sox -D "$tmp/raw.wav" -r 16000 -c 1 -b 16 -e signed-integer "$tmp/clip.wav" pad 1 1 ;;
    silence)
      sox -n -r 16000 -c 1 -b 16 -e signed-integer "$tmp/clip.wav" trim 0 3 ;;
    noise)  # white noise, peak -26 dBFS (vol 0.05, ~-31 dBFS RMS), 1 s of silence before and after
      sox -R -n -r 16000 -c 1 -b 16 -e signed-integer "$tmp/clip.wav" synth 2 whitenoise vol 0.05 pad 1 1 ;;
  esac
  mv "$tmp/clip.wav" "$wav"
  echo "make_clips: $name.wav" >&2
done <<<"$clips"
cp "$manifest" "$out/clips.tsv"

# References (ONNX Runtime through Node).
ref_js="$root/tests/agent/oww_ref.mjs"
todo=()
while IFS=$'\t' read -r name _; do
  ref="$out/refs/$name.txt"
  if [ "$force" = 1 ] || [ ! -s "$ref" ] || [ "$ref" -ot "$out/$name.wav" ] || [ "$ref" -ot "$ref_js" ]; then
    todo+=("$out/$name.wav" "$ref")
  fi
done <"$out/clips.tsv"
if [ "${#todo[@]}" -gt 0 ]; then
  node "$ref_js" "$root/.cache/models" "${todo[@]}"
fi
echo "make_clips: $(wc -l <"$out/clips.tsv") clips and refs in $out" >&2

#!/bin/sh
# Streams WAV files over MQTT the way examples/voice_mqtt/agent.yaml expects them: 16 kHz mono
# int16, raw little-endian, one message of 1280 samples (2560 bytes, 80 ms) per frame, QoS 1,
# paced in real time (one frame every 80 ms on an absolute schedule) or as fast as possible with
# --fast. The files follow one another as one stream; each file's last partial frame is dropped.
#   stream_wav.sh [-h HOST] [-p PORT] [-t TOPIC] [--fast] FILE.wav...
# Needs sox and mosquitto_pub (Debian: sox, mosquitto-clients); one mosquitto_pub per frame.
set -eu
host=127.0.0.1 port=1883 topic=audio/mic1 fast=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h) host=$2; shift 2 ;;
    -p) port=$2; shift 2 ;;
    -t) topic=$2; shift 2 ;;
    --fast) fast=1; shift ;;
    --) shift; break ;;
    -*) echo "stream_wav.sh: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: stream_wav.sh [-h HOST] [-p PORT] [-t TOPIC] [--fast] FILE.wav..." >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$(date +%s%N) k=0
for wav in "$@"; do
  rm -f "$dir"/f.*
  sox "$wav" -t raw -r 16000 -c 1 -e signed-integer -b 16 -L "$dir/all.raw"
  split -b 2560 -a 5 -d "$dir/all.raw" "$dir/f."
  for f in "$dir"/f.*; do
    [ "$(stat -c %s "$f")" -eq 2560 ] || continue   # the last partial frame
    if [ "$fast" = 0 ]; then                        # frame k is due at start + k * 80 ms
      wait_ms=$(( (start + k * 80000000 - $(date +%s%N)) / 1000000 ))
      [ "$wait_ms" -le 0 ] || sleep "$(printf '%d.%03d' $((wait_ms / 1000)) $((wait_ms % 1000)))"
    fi
    mosquitto_pub -V 5 -h "$host" -p "$port" -t "$topic" -q 1 -f "$f"
    k=$((k + 1))
  done
done
echo "stream_wav.sh: sent $k frames of 1280 samples to '$topic' on $host:$port" >&2

#!/usr/bin/env bash
# The main job: set up (Debian packages, the public models, ONNX Runtime references, the
# synthesized voice clips), build, then run the built-in voice agent (`jiffy agent --demo`:
# openWakeWord gated by Silero VAD, examples/voice/agent.yaml) over every clip in .cache/clips as
# fast as possible: one line per detection (clip, head, time in the clip, score, VAD probability),
# then the per-stage latency table, the pipeline overhead and the real-time factor.
#
#   scripts/demo.sh                      # the voice agent over every clip
#   scripts/demo.sh CLIP.wav ...         # ... over these clips (16 kHz mono int16 WAV)
#   scripts/demo.sh --models [ARGS]      # the model table instead: every public model checked
#                                        # against ONNX Runtime, with its latency (build/jiffy_models)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$root"
if [[ "${1:-}" == "--models" ]]; then
  shift
  exec "$root/build/jiffy_models" "$@"
fi
exec "$root/build/jiffy" agent --demo "$@"

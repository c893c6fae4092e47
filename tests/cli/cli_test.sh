#!/usr/bin/env bash
# CLI contract: bad models and bad inputs give exit code 2 and one clear stderr message; good runs
# write outputs as .npy. Usage: cli_test.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
jiffy="$build/jiffy"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$src/tests/cli/make_bad_models.py" "$work" "$src/.cache/models/alexa_v0.1.onnx" || exit 1
fails=0

# expect CODE PATTERN -- ARGS...: runs jiffy ARGS, checks the exit code and that stderr matches.
expect() {
  local code=$1 pattern=$2
  shift 3
  local err rc
  err=$(timeout 60 "$jiffy" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" != "$code" ] || ! grep -qiE -- "$pattern" <<<"$err"; then
    echo "FAIL: jiffy $* -> rc=$rc (want $code), stderr: $err (want /$pattern/)"
    fails=$((fails + 1))
  else
    echo "ok:   jiffy $(basename "${2:-}") ${*:1:2} -> $rc: $err"
  fi
}

m=$work
expect 2 "empty file" -- run "$m/empty.onnx"
expect 2 "truncated or corrupt" -- run "$m/truncated.onnx"
expect 2 "not a valid ONNX|no graph|corrupt" -- run "$m/random.onnx"
expect 2 "negative dim" -- run "$m/negative_dim.onnx"
expect 2 "memory limit|overflow" -- run "$m/huge_dim.onnx"
expect 2 "raw_data has 8 bytes" -- run "$m/short_raw_data.onnx"
expect 2 "negative dim" -- run "$m/negative_input_dim.onnx"
expect 2 "index.*out of range|out of range" -- run "$m/gather_oob.onnx" --input "i=$m/idx_oob.npy"
expect 2 "cycle" -- run "$m/cycle.onnx"
expect 2 "'nope' is not defined" -- run "$m/undefined_input.onnx"
expect 2 "escapes the model's folder" -- run "$m/external_escape.onnx"
expect 2 "absolute" -- run "$m/external_absolute.onnx"
expect 2 "unknown op 'FrobnicateTensor'" -- run "$m/unknown_op.onnx"
expect 2 "opset 99 is not supported" -- run "$m/bad_opset.onnx"
expect 2 "no outputs" -- run "$m/no_outputs.onnx"
expect 2 "produced twice" -- run "$m/dup_output.onnx"
expect 2 "MatMul\).*(dim|shape)" -- run "$m/matmul_mismatch.onnx"
expect 2 "file not found" -- run "$m/does_not_exist.onnx"
expect 2 "dtype int32 but the model expects float32" -- run "$m/good.onnx" --input "x=$m/wrong_dtype.npy"
expect 2 "dim 0 is fixed to 2" -- run "$m/good.onnx" --input "x=$m/wrong_shape.npy"
expect 2 "not a .npy" -- run "$m/good.onnx" --input "x=$m/corrupt.npy"
expect 2 "shorter than its header" -- run "$m/good.onnx" --input "x=$m/short.npy"
expect 2 "no input of that name" -- run "$m/good.onnx" --input "zz=$m/wrong_dtype.npy"
expect 2 "unknown option" -- run "$m/good.onnx" --frobnicate
expect 2 "memory limit" -- run "$m/good.onnx" --max-memory 8

# Good runs: outputs written as <sanitized name>.npy and listed on stdout.
out=$(timeout 60 "$jiffy" run "$m/good.onnx" --output-dir "$work/out") || { echo "FAIL: good run"; fails=$((fails + 1)); }
grep -q "^y float32 \[2,3\]$" <<<"$out" || { echo "FAIL: run output line: $out"; fails=$((fails + 1)); }
[ -f "$work/out/y.npy" ] || { echo "FAIL: y.npy not written"; fails=$((fails + 1)); }
/usr/bin/python3 -c "
import numpy as np, sys
y = np.load('$work/out/y.npy'); assert y.shape == (2, 3) and (y >= 0).all(), y
" || { echo "FAIL: y.npy content"; fails=$((fails + 1)); }
json=$(timeout 60 "$jiffy" bench "$m/good.onnx" --iters 50 --warmup 2 --json)
/usr/bin/python3 -c "
import json, sys
d = json.loads(sys.argv[1])
for k in ['model', 'threads', 'iters', 'min_us', 'p50_us', 'p90_us', 'p99_us', 'max_us', 'mean_us']:
    assert k in d, k
assert d['iters'] == 50 and d['min_us'] <= d['p50_us'] <= d['p99_us'] <= d['max_us']
" "$json" || { echo "FAIL: bench --json: $json"; fails=$((fails + 1)); }
ins=$(timeout 60 "$jiffy" inspect "$m/good.onnx" --json)
/usr/bin/python3 -c "
import json, sys
d = json.loads(sys.argv[1])
assert d['ops'] == {'Relu': 1} and d['unsupported_ops'] == [] and d['arena_bytes'] >= 0, d
assert d['fast_weight_steps'] == 0 and d['fast_weight_probe'] is None, d  # nothing to probe
" "$ins" || { echo "FAIL: inspect --json: $ins"; fails=$((fails + 1)); }

# The weights-to-17-bits decision (docs/amx.md): a transformer layer's products take it on a
# core with AMX (the probe's movement within its 1e-5), none elsewhere.
amx=$(grep -qw amx_tile /proc/cpuinfo && [ "${JIFFY_AMX:-}" != 0 ] && [ "${JIFFY_AMX:-}" != x2 ] &&
      [ "${JIFFY_AMX:-}" != x3 ] && [ -z "${JIFFY_ISA:-}" ] && echo 1 || echo 0)
ins=$(timeout 60 "$jiffy" inspect "$src/.cache/models/torch_encoder_gelu.onnx" --json)
/usr/bin/python3 -c "
import json, sys
d = json.loads(sys.argv[1])
if sys.argv[2] == '1':
    assert d['fast_weight_steps'] == 4 and 0 < d['fast_weight_probe'] <= 1e-5, d
else:
    assert d['fast_weight_steps'] == 0, d
" "$ins" "$amx" || { echo "FAIL: inspect --json fast weights: $ins"; fails=$((fails + 1)); }

# inspect --steps: one line per step with the kernel variant chosen for it (alexa: Gemm -> gemv).
st=$(timeout 60 "$jiffy" inspect "$src/.cache/models/alexa_v0.1.onnx" --steps)
echo "$st" | grep -q "MFLOP  kernel" && echo "$st" | grep -Eq "^  [0-9]+ +Gemm .* gemv" ||
    { echo "FAIL: inspect --steps: $st"; fails=$((fails + 1)); }

echo "cli_test: $fails failure(s)"
[ "$fails" = 0 ]

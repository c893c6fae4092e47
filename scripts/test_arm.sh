#!/usr/bin/env bash
# Cross-compiles the kernels and their unit tests for aarch64 (g++-aarch64-linux-gnu,
# cmake/aarch64.cmake, JIFFY_KERNELS_ONLY) into build-arm/ and runs them under qemu-aarch64 with
# JIFFY_ISA=scalar and JIFFY_ISA=neon (correctness only: qemu is ~65x slower than native).
# Exits non-zero when the build or a test fails. ctest runs it as `arm_neon_kernels`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${JIFFY_ARM_BUILD_DIR:-$root/build-arm}
for tool in aarch64-linux-gnu-g++ qemu-aarch64 cmake; do
    command -v "$tool" >/dev/null || { echo "test_arm.sh: $tool not found (scripts/setup.sh installs it)" >&2; exit 1; }
done
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [[ ! -f "$bdir/CMakeCache.txt" ]]; then
    cmake -S "$root" -B "$bdir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64.cmake" -DJIFFY_KERNELS_ONLY=ON "${launcher[@]}" >/dev/null
fi
cmake --build "$bdir" -j"${JIFFY_ARM_JOBS:-2}" --target jiffy_kernel_tests
cd "$bdir"
ctest --output-on-failure -R '^kernels_isa_'

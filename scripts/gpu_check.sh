#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (the target is an H200, sm_90): build for sm_90, run the GPU tests (CTest label
# `gpu`) and the GPU benchmarks, and print a short table last. Meant to finish well inside 8 minutes.
#
#   scripts/gpu_check.sh [build_dir]          configure, build and run (needs kiln's build dependencies)
#   scripts/gpu_check.sh --prebuilt <dir>     run binaries built elsewhere for sm_90 and copied into <dir>
#                                             (kiln_cuda_tests, kiln_nccl_tests, gpu_bench): for GPU machines without the
#                                             build dependencies. Make <dir> with scripts/gpu_check.sh --pack <dir>
#                                             on the build machine.
#   scripts/gpu_check.sh --pack <dir> [build_dir]   build for sm_90 here and copy the stripped binaries into <dir>
set -uo pipefail
start=$(date +%s)
mode=build
if [[ "${1:-}" == --prebuilt ]]; then mode=prebuilt; bin=${2:?--prebuilt needs a directory}; fi
if [[ "${1:-}" == --pack ]]; then mode=pack; bin=${2:?--pack needs a directory}; fi

configure_and_build() {
  local build=$1
  # Eigen for the CPU side: the binaries then need no BLAS library where they run.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DKILN_CUDA=ON \
    -DKILN_BLAS=Eigen -DKILN_BUILD_BENCH=ON -DKILN_BENCH_TORCH=OFF -DKILN_BUILD_EXAMPLES=OFF >/dev/null || exit 1
  cmake --build "$build" -j"$(nproc)" --target kiln_cuda_tests kiln_nccl_tests gpu_bench gpu_train_bench fused_bench || exit 1
}

if [[ $mode == pack ]]; then
  build=${3:-build-gpu}
  configure_and_build "$build"
  mkdir -p "$bin"
  cp "$build/tests/kiln_cuda_tests" "$build/tests/distributed/kiln_nccl_tests" "$build/bench/gpu_bench" \
    "$build/bench/gpu_train_bench" "$build/bench/fused_bench" "$bin/"
  strip "$bin/kiln_cuda_tests" "$bin/kiln_nccl_tests" "$bin/gpu_bench" "$bin/gpu_train_bench" "$bin/fused_bench"
  ls -la "$bin"
  exit 0
fi

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [[ $mode == build ]]; then
  build=${1:-build-gpu}
  configure_and_build "$build"
  tests="$build/tests/kiln_cuda_tests"
  nccl_tests="$build/tests/distributed/kiln_nccl_tests"
  bench="$build/bench/gpu_bench"
  train="$build/bench/gpu_train_bench"
  fused="$build/bench/fused_bench"
else
  tests="$bin/kiln_cuda_tests"
  nccl_tests="$bin/kiln_nccl_tests"  # absent from packs made before the nccl backend: then skipped
  bench="$bin/gpu_bench"
  train="$bin/gpu_train_bench"
  fused="$bin/fused_bench"  # absent from older packs: then skipped
  # cuBLAS and cuDNN may live outside the loader's default path (machines set up for Python frameworks keep
  # them in site-packages): find each library the binaries miss and add its folder.
  # kiln opens cuBLAS itself when a product first runs on the GPU (dlopen), so ldd does not list it: it is
  # looked for too unless the loader's cache knows it.
  extra=$(ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.13 ' || echo libcublas.so.13)
  for lib in $( (ldd "$tests" "$bench" "$train" $([[ -x $nccl_tests ]] && echo "$nccl_tests") 2>/dev/null | awk '/not found/ {print $1}'; echo $extra) | sort -u); do
    found=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
    [[ -n $found ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$found")"
    echo "gpu_check: $lib -> ${found:-NOT FOUND}"
  done
fi
log=$(mktemp)
# One process per test suite: a fault that poisons the CUDA context (an illegal address) then fails only its own
# suite, and the rest still report.
test_deadline=$(( $(date +%s) + ${KILN_GPU_TEST_TIMEOUT:-300} ))
rc=0
# kiln_nccl_tests: the nccl process group, in worlds of one rank per GPU (one GPU: worlds of one).
for binary in "$tests" "$nccl_tests"; do
  [[ -x $binary ]] || { echo "gpu_check: $binary not found, skipped"; continue; }
  for suite in $("$binary" --gtest_list_tests | awk '/^[^ ].*\.$/ {print $1}'); do
    left=$(( test_deadline - $(date +%s) ))
    (( left > 0 )) || { echo "gpu_check: out of test time before $suite"; rc=1; break 2; }
    timeout "$left" "$binary" --gtest_brief=1 --gtest_filter="${suite}*" 2>&1 | tee -a "$log"
    src=${PIPESTATUS[0]}
    (( src == 0 )) || { rc=$src; echo "gpu_check: suite $suite exited with $src"; }
  done
done
sum() { grep -oE "$1 [0-9]+" "$log" | awk '{s += $NF} END {print s + 0}'; }
passed=$(sum '\[  PASSED  \]')
skipped=$(sum '\[  SKIPPED \]')
failed=$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$log" || true)
echo
echo "## GPU benchmarks"
timeout "${KILN_GPU_BENCH_TIMEOUT:-120}" "$bench" 2>&1
brc=$?
echo
echo "## Fused cross-entropy and layer norm on the GPU, against their composites"
frc=0
if [[ -x $fused ]]; then timeout "${KILN_GPU_BENCH_TIMEOUT:-120}" "$fused" cuda 20 2>&1; frc=$?; fi
echo
echo "## Training steps on the GPU (W2 MLP + SGD, W3 CNN + Adam), kiln and PyTorch"
kiln_out=$(timeout "${KILN_GPU_BENCH_TIMEOUT:-120}" "$train" 2>&1); trc=$?
echo "$kiln_out" | grep -v '^RESULT'
torch_out=""
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  torch_out=$(timeout "${KILN_GPU_BENCH_TIMEOUT:-120}" python3 bench/torch_gpu_train.py 2>&1)
  echo "$torch_out" | grep -v '^RESULT'
fi
echo "| case | kiln ms/step | PyTorch ms/step | kiln / PyTorch | kiln peak MiB | PyTorch peak MiB |"
echo "|---|---|---|---|---|---|"
echo "$kiln_out" | awk '/^RESULT/ {print $2, $3, $4}' | while read -r name ms peak; do
  t=$(echo "$torch_out" | awk -v n="$name" '$1 == "RESULT" && $2 == n {print $3, $4}')
  tms=${t% *}; tpeak=${t#* }
  ratio=$([[ -n $t ]] && awk -v a="$ms" -v b="$tms" 'BEGIN {printf "%.2f", a / b}' || echo n/a)
  echo "| $name | $ms | ${tms:-n/a} | $ratio | $peak | ${tpeak:-n/a} |"
done
echo
echo "| gpu check | value |"
echo "|---|---|"
echo "| tests passed | ${passed:-0} |"
echo "| tests failed | ${failed:-0} |"
echo "| tests skipped | ${skipped:-0} |"
echo "| test exit code | $rc |"
echo "| benchmark exit codes (gpu_bench, fused_bench, gpu_train_bench) | $brc, $frc, $trc |"
echo "| wall time | $(( $(date +%s) - start )) s |"
[[ $rc == 0 && $brc == 0 && $frc == 0 && $trc == 0 ]]

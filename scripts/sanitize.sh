#!/usr/bin/env bash
# Builds kiln and its tests with AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer
# (KILN_SANITIZE=address, cmake/kiln_sanitize.cmake) in a build directory of their own, and runs the CPU tests.
# Any report fails the test that produced it: ASan and LSan exit non-zero, UBSan halts on its first finding.
#   scripts/sanitize.sh [build_dir] [ctest args...]      (build_dir defaults to build-asan)
#   e.g. scripts/sanitize.sh build-asan -L autograd
# JOBS sets the build's parallelism (default: all cores); TARGETS, if set, builds only those targets (then
# pass ctest a matching selection, e.g. TARGETS=kiln_autograd_tests scripts/sanitize.sh build-asan -L autograd).
# The executables that allow it run as GoogleTest shards (KILN_TEST_SHARDS, tests/CMakeLists.txt), so CTest's
# names there are shards, e.g. kiln_autograd_tests.shard3: select cases with GTEST_FILTER (GTEST_FILTER='Engine.*'
# scripts/sanitize.sh build-asan -L autograd), or set SHARDS=OFF for one CTest test per case (-R then works).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-asan}
shift || true

# Benchmarks and examples are not tests: left out, which also keeps LibTorch out of the sanitized build.
# -O0 -g1 (line tables: reports still name file and line) instead of RelWithDebInfo's -O2 -g: the sanitized
# build is most of CI's time. With the sanitizers' instrumentation the optimizer is what costs:
# kiln/tensor/ops/reduce_cpu.cpp took 360 s at -O2 when first measured, and now 77 s at -O1, 63 s at -Og and
# 27 s at -O0. The tests run slower unoptimized, but less than the build gains: from a clean tree on 2 cores,
# build and tests took 631 + 169 s at -O1 (the sanitizers' documentation suggests -O1 for speed) and 363 + 263 s
# at -O0. An unoptimized build also hides nothing from them (no check optimized away with the code it guarded).
# KILN_NATIVE=OFF: with -march=native on an AVX-512 machine GCC may keep 64-byte-aligned locals and load them
# with aligned 64-byte moves, but ASan's fake stack (detect_stack_use_after_return, below) aligns frames to 32
# bytes only, so such a load faults: DataLoader.SequentialBatches crashed in a vector's initializer list, in
# code no change touched. The sanitized build checks memory and UB, not the machine's widest vectors.
# KILN_TEST_SHARDS: a sanitized process costs about 0.15 s to start and to scan for leaks at exit; one process
# per shard instead of per case took the tensor, autograd, nn, data, optim, serialize and tools tests from 131 s
# to 54 s of wall time here (-j2).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_CUDA=OFF -DKILN_SANITIZE=address \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" -DKILN_BUILD_BENCH=OFF -DKILN_BUILD_EXAMPLES=OFF \
      -DKILN_NATIVE=OFF -DKILN_TEST_SHARDS="${SHARDS:-ON}"
# shellcheck disable=SC2086  # TARGETS is a list
cmake --build "$build" -j "${JOBS:-$(nproc)}" ${TARGETS:+--target $TARGETS}

# scripts/lsan.supp holds LeakSanitizer suppressions (none needed so far; see there before adding one).
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
export LSAN_OPTIONS=suppressions=$root/scripts/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ctest --test-dir "$build" --output-on-failure -LE 'gpu|package' "$@"

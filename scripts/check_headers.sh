#!/usr/bin/env bash
# Checks that every kiln header compiles on its own, included first (and twice, for its include guard): the
# library's sources compile with precompiled headers (KILN_PCH), which put the standard headers and kiln's
# most used ones ahead of every file, so a header that forgot an include of its own still builds there and
# fails only for a user who includes it alone.
#
#   scripts/check_headers.sh [header ...]     (default: every kiln/**/*.h; JOBS=N compiles N at a time, with
#                                             $CXX, g++ by default)
# CTest runs it as the test headers_self_contained.
#
# Headers of optional engines (mpi, gloo, nccl, CUDA's) are checked where those engines are installed.
set -uo pipefail
cd "$(dirname "$0")/.."
headers=("$@")
[[ ${#headers[@]} -gt 0 ]] || mapfile -t headers < <(find kiln -name '*.h' | sort)

KILN_HEADER_FLAGS="-std=c++20 -fsyntax-only -fopenmp -I. -isystem /usr/include/eigen3"
[[ -d /usr/local/cuda/include ]] && KILN_HEADER_FLAGS+=" -isystem /usr/local/cuda/include -DKILN_WITH_CUDA"
mpi_include=$(mpicxx --showme:incdirs 2>/dev/null | awk '{print $1}')
[[ -n $mpi_include ]] && KILN_HEADER_FLAGS+=" -isystem $mpi_include"
KILN_CXX=${CXX:-g++}
export KILN_HEADER_FLAGS KILN_CXX mpi_include

check() {
  local header=$1 tu out
  case $header in
    */mpi/*) [[ -n $mpi_include ]] || { echo "skipped (no MPI): $header"; return 0; } ;;
    */gloo/*) [[ -e /usr/include/gloo/allreduce.h ]] || { echo "skipped (no Gloo): $header"; return 0; } ;;
    */nccl/* | */tensor/cuda/*) [[ -d /usr/local/cuda/include ]] || { echo "skipped (no CUDA): $header"; return 0; } ;;
  esac
  tu=$(mktemp --suffix=.cpp)
  printf '#include "%s"\n#include "%s"\n' "$header" "$header" >"$tu"
  # shellcheck disable=SC2086 # the flags are words
  if ! out=$("$KILN_CXX" $KILN_HEADER_FLAGS "$tu" 2>&1); then
    echo "FAILED: $header"
    echo "$out" | grep -E 'error' | head -5 | sed 's/^/    /'
  fi
  rm -f "$tu"
}
export -f check

report=$(printf '%s\n' "${headers[@]}" | xargs -P "${JOBS:-2}" -I{} bash -c 'check "$1"' _ {})
[[ -n $report ]] && echo "$report"
failed=$(grep -c '^FAILED' <<<"$report")
if [[ $failed -gt 0 ]]; then
  echo "check_headers: $failed of the ${#headers[@]} headers do not compile alone" >&2
  exit 1
fi
echo "check_headers: the ${#headers[@]} headers compile alone"

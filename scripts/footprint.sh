#!/usr/bin/env bash
# BENCHMARKS.md W6, the deployment footprint: for the W2 program (bench/w2_program.cpp) of each build, and for
# the same program over LibTorch (torch_w2_program, built where libtorch-dev is installed), the files it needs
# beyond the system's libraries, and the time from exec to its first training step done.
#
#   scripts/footprint.sh [runs] [program ...]   measure (runs: 21 by default). Without programs:
#                                               build/bench/w2_program, build-static/bench/w2_program and
#                                               build/bench/torch_w2_program, those that exist
#   scripts/footprint.sh --static-build [dir]   configure and build the static CPU-only W2 program in dir
#                                               (build-static by default), for x86-64-v3 (MARCH=native: for
#                                               this machine only)
#
# The system's libraries: those every Debian 12 system has whatever else is installed, by the package that owns
# the file: glibc (libc6), the GCC runtime (libgcc-s1, libstdc++6) and zlib (zlib1g, which dpkg itself needs).
# Everything else ldd lists is counted, beside the program itself, at its size on disk with symlinks resolved.
# Libraries a program opens itself with dlopen are not in ldd's list (kiln's CUDA build opens cuBLAS that way
# when a product first runs on a GPU, and cuDNN opens its engine libraries): a CPU run does not need them.
#
# Time, of `program 1` (one step), the programs interleaved (one run of each in turn), medians over the runs:
#   launch to first step done: the program is given the wall-clock time just before the shell starts it
#     (W2_LAUNCHED_NS) and reports the time from then to its first step done: exec, the dynamic loader, static
#     initialization, building the model and the batch, one step;
#   main to first step done: the program's own figure from main's start, so the difference between the two is
#     what happens before main (mostly loading and relocating libraries);
#   launch to exit: the whole process, measured from outside, its teardown included;
#   and, once started, a step's time: the program runs 101 steps (5 rounds, interleaved) and reports the median
#     of the steps after the first; the median over the rounds is given.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == --static-build ]]; then
  dir=${2:-build-static}
  # CPU-only (no CUDA runtime, no cuDNN), GEMM through Eigen (no BLAS library), none of the optional process-group
  # engines; zlib and OpenMP's runtime (libgomp.a) linked in statically with everything else (-static). For
  # x86-64-v3 (AVX2 and FMA) rather than this machine's instruction set: a file that ships runs elsewhere.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_MARCH="${MARCH:-x86-64-v3}" \
    -DKILN_CUDA=OFF -DKILN_BLAS=Eigen -DKILN_MPI=OFF \
    -DKILN_GLOO=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BENCH_TORCH=OFF -DKILN_INSTALL=OFF \
    -DZLIB_USE_STATIC_LIBS=ON -DOpenMP_gomp_LIBRARY="$(g++ -print-file-name=libgomp.a)" \
    -DCMAKE_EXE_LINKER_FLAGS=-static >/dev/null
  cmake --build "$dir" -j"${JOBS:-2}" --target w2_program
  exit 0
fi

runs=21
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then runs=$1; shift; fi
programs=("$@")
if [[ ${#programs[@]} -eq 0 ]]; then
  for p in build/bench/w2_program build-static/bench/w2_program build/bench/torch_w2_program; do
    [[ -x $p ]] && programs+=("$p")
  done
fi
[[ ${#programs[@]} -gt 0 ]] || { echo "footprint: no W2 program found; build the target w2_program first" >&2; exit 1; }

system_package() {
  case $1 in libc6 | libgcc-s1 | libstdc++6 | zlib1g) return 0 ;; *) return 1 ;; esac
}

# The package that owns a file, trying the path ldd gave and the one with links resolved (Debian 12 merges
# /lib into /usr/lib, and dpkg knows each file under one of the two names).
owner() {
  local pkg
  for f in "$1" "$(readlink -f "$1")" "${1/#\/usr\/lib\//\/lib/}" "${1/#\/lib\//\/usr\/lib/}"; do
    pkg=$(dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1) && [[ -n $pkg ]] && { echo "$pkg"; return; }
  done
  echo "-"
}

mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

echo "# W6: files needed beyond the system's (glibc, libgcc-s1, libstdc++6, zlib1g), sizes with links resolved"
declare -A shipped_libs shipped_mib
for p in "${programs[@]}"; do
  libs=0 bytes=$(stat -c %s "$(readlink -f "$p")")
  echo "## $p: $(mib "$bytes") MiB itself"
  if ldd "$p" >/dev/null 2>&1; then
    listing=""
    while read -r path; do
      pkg=$(owner "$path")
      system_package "$pkg" && continue
      size=$(stat -c %s "$(readlink -f "$path")")
      libs=$((libs + 1)) bytes=$((bytes + size))
      listing+="$size $path ($pkg)"$'\n'
    done < <(ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u)
    # The largest first; a long list is cut after 12.
    echo -n "$listing" | sort -rn | head -12 | while read -r size rest; do echo "   $(mib "$size") MiB  $rest"; done
    (( libs <= 12 )) || echo "   ... and $((libs - 12)) smaller ones"
  else
    echo "   (statically linked: no shared library at all)"
  fi
  shipped_libs[$p]=$libs shipped_mib[$p]=$(mib "$bytes")
done

echo
echo "# one step, $runs runs of each program, interleaved"
declare -A walls inner launch
for ((r = 0; r < runs; r++)); do
  for p in "${programs[@]}"; do
    t0=$(date +%s%N)
    out=$(W2_LAUNCHED_NS=$t0 "$p" 1)
    t1=$(date +%s%N)
    walls[$p]+="$(( (t1 - t0) / 1000 )) "
    inner[$p]+="$(echo "$out" | sed -n 's/.*first step done \([0-9.]*\) ms after main.*/\1/p') "
    launch[$p]+="$(echo "$out" | sed -n 's/.*, \([0-9.]*\) ms after launch.*/\1/p') "
  done
done
declare -A steps
for ((r = 0; r < 5; r++)); do
  for p in "${programs[@]}"; do
    steps[$p]+="$("$p" 101 | sed -n 's/.*later steps \([0-9.]*\) ms.*/\1/p') "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo
echo "| program | libraries beyond the system's | MiB to ship (program + those) | launch to first step done, ms | main to first step done, ms | launch to exit, ms | later steps, ms |"
echo "|---|---|---|---|---|---|---|"
for p in "${programs[@]}"; do
  wall_ms=$(echo "${walls[$p]}" | median | awk '{printf "%.1f", $1 / 1000}')
  inner_ms=$(echo "${inner[$p]}" | median | awk '{printf "%.1f", $1}')
  launch_ms=$(echo "${launch[$p]}" | median | awk '{printf "%.1f", $1}')
  step_ms=$(echo "${steps[$p]}" | median | awk '{printf "%.2f", $1}')
  echo "| $p | ${shipped_libs[$p]} | ${shipped_mib[$p]} | $launch_ms | $inner_ms | $wall_ms | $step_ms |"
done

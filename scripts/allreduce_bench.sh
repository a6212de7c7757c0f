#!/usr/bin/env bash
# W5 all-reduce (BENCHMARKS.md): kiln's tcp process group beside its anchors, run in interleaved rounds
# (kiln, Open MPI default transport, Open MPI TCP only, Gloo, kiln, ...) so that all of them see the same
# machine; every cell is the median over rounds of each round's median. Prints one table and the ratios the
# issue targets: kiln busbw >= 1.0x Open MPI over TCP at 1 MiB and above, 4 KiB latency <= 2x Open MPI's.
#   scripts/allreduce_bench.sh [build_dir] [rounds]
# Anchors are optional: a benchmark that was not built (no MPI, no Gloo) is left out of the table.
# KILN_ALLREDUCE_ARGS passes extra options to allreduce_bench (e.g. "--segment-bytes 262144").
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
worlds="2 4"
kiln="$build/bench/allreduce_bench"
mpi="$build/bench/mpi_allreduce_bench"
gloo="$build/bench/gloo_allreduce_bench"
[ -x "$kiln" ] || { echo "allreduce_bench.sh: $kiln not built (cmake --build $build --target allreduce_bench)" >&2; exit 1; }
have_mpi=0; [ -x "$mpi" ] && command -v mpirun > /dev/null && have_mpi=1
have_gloo=0; [ -x "$gloo" ] && have_gloo=1
[ $have_mpi = 1 ] || echo "allreduce_bench.sh: no mpi_allreduce_bench or mpirun: Open MPI left out" >&2
[ $have_gloo = 1 ] || echo "allreduce_bench.sh: no gloo_allreduce_bench: Gloo left out" >&2
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe)

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, before: $(uptime | sed 's/.*load average/load average/')"
for r in $(seq "$rounds"); do
  # shellcheck disable=SC2086  # KILN_ALLREDUCE_ARGS is a list of options
  "$kiln" --world "${worlds// /,}" ${KILN_ALLREDUCE_ARGS:-} >> "$out"
  if [ $have_mpi = 1 ]; then
    for n in $worlds; do "${mpirun_cmd[@]}" -n "$n" "$mpi" --label mpi >> "$out"; done
    for n in $worlds; do
      "${mpirun_cmd[@]}" --mca pml ob1 --mca btl tcp,self -n "$n" "$mpi" --label mpi-tcp >> "$out"
    done
  fi
  [ $have_gloo = 1 ] && "$gloo" --world "${worlds// /,}" >> "$out"
  echo "# round $r of $rounds done, load: $(uptime | sed 's/.*load average: //')" >&2
done
echo "# after: $(uptime | sed 's/.*load average/load average/'); $rounds rounds; cells: median over rounds"

awk '
  function med(key,   m, j, k, t, a) {
    m = cnt[key]; for (j = 1; j <= m; ++j) a[j] = vals[key, j]
    for (j = 1; j <= m; ++j) for (k = j + 1; k <= m; ++k) if (a[k] < a[j]) { t = a[j]; a[j] = a[k]; a[k] = t }
    return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  function add(key, v) { vals[key, ++cnt[key]] = v }
  function label(b) { return b >= 1048576 ? (b / 1048576) " MiB" : (b / 1024) " KiB" }
  $1 == "result" {
    for (i = 2; i <= NF; ++i) { split($i, kv, "="); f[kv[1]] = kv[2] }
    row = f["backend"] " " f["n"]
    if (!(row in seen_row)) { rows[++nrows] = row; seen_row[row] = 1 }
    if (!(f["bytes"] in seen_size)) { sizes[++nsizes] = f["bytes"]; seen_size[f["bytes"]] = 1 }
    add(row SUBSEP f["bytes"] SUBSEP "ms", f["ms"]); add(row SUBSEP f["bytes"] SUBSEP "busbw", f["busbw_GBps"])
  }
  $1 == "limit" { split($2, kv, "="); if (!(kv[1] in seen_lim)) { lims[++nlims] = kv[1]; seen_lim[kv[1]] = 1 }
                  add("limit" SUBSEP kv[1], kv[2]) }
  END {
    printf "\n%-10s %2s", "backend", "n"
    for (s = 1; s <= nsizes; ++s) printf "  %22s", label(sizes[s]) ": ms, busbw GB/s"
    printf "\n"
    for (r = 1; r <= nrows; ++r) {
      split(rows[r], rb, " "); printf "%-10s %2s", rb[1], rb[2]
      for (s = 1; s <= nsizes; ++s) {
        k = rows[r] SUBSEP sizes[s]
        if (cnt[k SUBSEP "ms"]) printf "  %11.4g, %9.3f", med(k SUBSEP "ms"), med(k SUBSEP "busbw")
        else printf "  %22s", "-"
      }
      printf "\n"
    }
    for (l = 1; l <= nlims; ++l) printf "limit %s: %.3f\n", lims[l], med("limit" SUBSEP lims[l])
    # Ratios against each anchor: busbw kiln / anchor at >= 1 MiB (higher is better, target >= 1.0 against
    # mpi-tcp), and 4 KiB latency kiln / anchor (lower is better, target <= 2.0 against mpi-tcp).
    split("mpi-tcp mpi gloo", anchors, " ")
    printf "\nratios kiln / anchor: busbw (target >= 1.0x mpi-tcp), 4 KiB latency (target <= 2.0x mpi-tcp)\n"
    for (a = 1; a <= 3; ++a) for (r = 1; r <= nrows; ++r) {
      split(rows[r], rb, " "); if (rb[1] != "kiln") continue
      arow = anchors[a] " " rb[2]; if (!(arow in seen_row)) continue
      printf "kiln/%-8s n=%s:", anchors[a], rb[2]
      for (s = 1; s <= nsizes; ++s) {
        kk = rows[r] SUBSEP sizes[s]; ka = arow SUBSEP sizes[s]
        if (!cnt[kk SUBSEP "ms"] || !cnt[ka SUBSEP "ms"]) continue
        if (sizes[s] >= 1048576) {
          v = med(kk SUBSEP "busbw") / med(ka SUBSEP "busbw")
          verdict = anchors[a] == "mpi-tcp" ? (v >= 1.0 ? " ok" : " MISS") : ""
          printf "  busbw %s %.2fx%s", label(sizes[s]), v, verdict
        } else {
          v = med(kk SUBSEP "ms") / med(ka SUBSEP "ms")
          verdict = anchors[a] == "mpi-tcp" ? (v <= 2.0 ? " ok" : " MISS") : ""
          printf "  latency %s %.1f us vs %.1f us = %.2fx%s", label(sizes[s]), 1000 * med(kk SUBSEP "ms"),
                 1000 * med(ka SUBSEP "ms"), v, verdict
        }
      }
      printf "\n"
    }
  }' "$out"

#!/usr/bin/env bash
# Runs kiln's CPU benchmarks in several processes (BENCHMARKS.md: one process can land both threads on one
# vCPU) and prints, per row, the median over processes of every column.
#   scripts/bench.sh [build_dir] [processes]
set -euo pipefail
build=${1:-build}
procs=${2:-3}
# OMP_WAIT_POLICY is left to the caller: BENCHMARKS.md asks for the best thread configuration; on an idle
# machine "active" (workers spin between parallel regions) is fastest for GEMM.
for b in gemm_bench elementwise_bench autograd_bench; do
  exe="$build/bench/$b"
  [ -x "$exe" ] || { echo "bench.sh: $exe not built (cmake --build $build --target $b)" >&2; exit 1; }
  tmp=$(mktemp -d)
  for p in $(seq "$procs"); do "$exe" > "$tmp/$p.txt"; done
  echo "== $b: median over $procs processes =="
  grep '^#' "$tmp/1.txt" | grep -v 'FMA peak' || true
  grep -h '^# fp32 FMA peak' "$tmp"/*.txt || true
  # Rows are identified by their first two columns; the other columns get medians.
  awk '!/^#/ && NF > 2 && $1 != "threads" {
         key = $1 " " $2; if (!(key in seen)) { order[++n] = key; seen[key] = 1 }
         for (i = 3; i <= NF; ++i) vals[key, i, ++cnt[key, i]] = $i; cols[key] = NF
       }
       /^threads/ && !hdr { hdr = $0 }
       function med(key, i,   m, j, k, t, a) {
         m = cnt[key, i]; for (j = 1; j <= m; ++j) a[j] = vals[key, i, j]
         for (j = 1; j <= m; ++j) for (k = j + 1; k <= m; ++k) if (a[k] < a[j]) { t = a[j]; a[j] = a[k]; a[k] = t }
         return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
       }
       END { print hdr; for (r = 1; r <= n; ++r) { key = order[r]; line = key
               for (i = 3; i <= cols[key]; ++i) line = line "  " med(key, i); print line } }' "$tmp"/*.txt
  rm -rf "$tmp"
done

// A hint for CPU training on a machine whose cores other work keeps busy.
//
// OpenMP's threads spin for a while when they wait for work, and kiln's kernels hand them work many times a
// step. When another process keeps the cores busy, the spinning takes the time slices the working threads
// need: on 2 cores with one of them taken, the W2 MLP step went from 1.8 ms to 8.3 ms (OMP_WAIT_POLICY=passive:
// 3.0 ms). OpenMP reads its settings when the process starts, too early for kiln to change them, so the Trainer
// says so instead, once per process, when a CPU fit starts on such a machine.
#pragma once

#include <string>

namespace kiln::trainer {

// The warning (empty: none) for a 1-minute load average `load` on `cpus` CPUs with kiln about to run `threads`
// threads; none when the user chose already (OMP_NUM_THREADS, OMP_WAIT_POLICY or GOMP_SPINCOUNT set).
std::string busy_cores_warning(double load, int cpus, int threads, bool user_chose);

// The same from this machine's figures and environment.
std::string busy_cores_warning();

}  // namespace kiln::trainer

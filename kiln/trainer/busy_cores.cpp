#include "kiln/trainer/busy_cores.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>

#include "kiln/tensor/parallel.h"

namespace kiln::trainer {

std::string busy_cores_warning(double load, int cpus, int threads, bool user_chose) {
  if (user_chose || threads <= 1 || cpus <= 0) return "";
  // Other work fills what kiln's threads would need: with every CPU in use by kiln, any steady load of 1 or
  // more. (The average includes this process's own recent work; the message says what it saw.)
  const int spare = cpus - threads;
  if (load < static_cast<double>(spare) + 1.0) return "";
  char text[512];
  std::snprintf(text, sizeof text,
                "kiln: the machine's load average is %.1f on %d CPUs and kiln runs %d threads. If steps are slow, "
                "set OMP_WAIT_POLICY=passive (OpenMP's waiting threads then sleep instead of spinning on the busy "
                "cores) or OMP_NUM_THREADS=1.",
                load, cpus, threads);
  return text;
}

std::string busy_cores_warning() {
  const bool user_chose =
      std::getenv("OMP_NUM_THREADS") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr ||
      std::getenv("GOMP_SPINCOUNT") != nullptr;
  double load = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (user_chose || getloadavg(&load, 1) != 1 || sched_getaffinity(0, sizeof set, &set) != 0) return "";
  return busy_cores_warning(load, CPU_COUNT(&set), get_num_threads(), user_chose);
}

}  // namespace kiln::trainer

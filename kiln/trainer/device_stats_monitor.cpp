// DeviceStatsMonitor (device_stats_monitor.h): /proc's numbers for the host, the caching allocator's for a GPU.
#include "kiln/trainer/device_stats_monitor.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "kiln/tensor/allocator.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

HostStats read_host_stats() {
  HostStats s;
  // /proc/stat's first line: "cpu  user nice system idle iowait irq softirq steal guest guest_nice" in jiffies;
  // guest time is already inside user and nice.
  if (std::ifstream stat("/proc/stat"); stat) {
    std::string cpu;
    uint64_t v[8] = {};
    if (stat >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> v[7]; stat && cpu == "cpu") {
      uint64_t total = 0;
      for (uint64_t x : v) total += x;
      s.cpu_total = total;
      s.cpu_busy = total - v[3] - v[4];  // less idle and iowait
    }
  }
  if (std::ifstream meminfo("/proc/meminfo"); meminfo) {
    std::map<std::string, double> kib;
    std::string line;
    while (std::getline(meminfo, line)) {
      std::istringstream fields(line);
      std::string name;
      double value = 0;
      if (fields >> name >> value) kib[name] = value;
    }
    if (kib.count("MemTotal:") && kib.count("MemAvailable:") && kib["MemTotal:"] > 0)
      s.vm_percent = 100.0 * (kib["MemTotal:"] - kib["MemAvailable:"]) / kib["MemTotal:"];
    if (kib.count("SwapTotal:") && kib.count("SwapFree:"))
      s.swap_percent = kib["SwapTotal:"] > 0 ? 100.0 * (kib["SwapTotal:"] - kib["SwapFree:"]) / kib["SwapTotal:"] : 0.0;
  }
  if (std::ifstream statm("/proc/self/statm"); statm) {
    uint64_t size = 0, resident = 0;
    if (statm >> size >> resident)
      s.rss_mib = static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
  }
  return s;
}

std::optional<double> cpu_percent_between(const HostStats& before, const HostStats& after) {
  if (!before.cpu_total || !after.cpu_total || *after.cpu_total <= *before.cpu_total) return std::nullopt;
  // Signed: a hypervisor's steal time, or a CPU taken offline, can make a counter go back.
  const double total = static_cast<double>(*after.cpu_total) - static_cast<double>(*before.cpu_total);
  const double busy = static_cast<double>(*after.cpu_busy) - static_cast<double>(*before.cpu_busy);
  if (busy < 0) return std::nullopt;
  return std::min(100.0, 100.0 * busy / total);
}

std::map<std::string, double> DeviceStatsMonitor::read(Trainer& trainer, const std::string& hook) {
  std::map<std::string, double> m;
  const std::string p = "DeviceStatsMonitor." + hook + "/";
  const Device device = trainer.device();
  if (device.is_cuda()) {
    const cuda::MemoryStats c = cuda::memory_stats(device.index);
    const std::pair<const char*, double> stats[] = {
        {"allocated_bytes", static_cast<double>(c.allocated_bytes)},
        {"reserved_bytes", static_cast<double>(c.reserved_bytes)},
        {"peak_allocated_bytes", static_cast<double>(c.peak_allocated_bytes)},
        {"peak_reserved_bytes", static_cast<double>(c.peak_reserved_bytes)},
        {"active_blocks", static_cast<double>(c.active_blocks)},
        {"segments", static_cast<double>(c.segments)},
        {"allocations", static_cast<double>(c.allocations)},
        {"cache_hits", static_cast<double>(c.cache_hits)},
        {"device_mallocs", static_cast<double>(c.device_mallocs)},
        {"device_frees", static_cast<double>(c.device_frees)},
        {"oom_retries", static_cast<double>(c.oom_retries)},
        {"ooms", static_cast<double>(c.ooms)}};
    for (const auto& [name, value] : stats) m[p + name] = value;
  } else {
    const CpuMemoryStats c = cpu_memory_stats();
    m[p + "allocated_bytes"] = static_cast<double>(c.allocated_bytes);
    m[p + "peak_allocated_bytes"] = static_cast<double>(c.peak_allocated_bytes);
    m[p + "ooms"] = static_cast<double>(c.ooms);
  }
  if (!device.is_cuda() || options_.cpu_stats) {
    const HostStats now = read_host_stats();
    if (const auto busy = cpu_percent_between(previous_, now)) m[p + "cpu_percent"] = *busy;
    if (hook == "on_train_batch_end" && now.cpu_total) previous_ = now;  // the next readings measure from here
    if (now.vm_percent) m[p + "cpu_vm_percent"] = *now.vm_percent;
    if (now.swap_percent) m[p + "cpu_swap_percent"] = *now.swap_percent;
    if (now.rss_mib) m[p + "process_rss_mib"] = *now.rss_mib;
  }
  for (const auto& [name, value] : m) last_metrics_[name] = value;
  return m;
}

void DeviceStatsMonitor::on_fit_start(Trainer& trainer, TrainModule& module) {
  previous_ = read_host_stats();
  at_start_.clear();
  last_logged_step_ = trainer.global_step();  // a resumed fit logs from where it is
}

void DeviceStatsMonitor::on_train_batch_start(Trainer& trainer, TrainModule& module, const data::Batch& batch,
                                              int64_t batch_idx) {
  // Read only when this batch's end may log: when its optimizer step would reach the next multiple. (Under
  // gradient accumulation the batches before the stepping one read too; the stepping one's reading is kept.)
  const int64_t n = trainer.options().log_every_n_steps;
  at_start_.clear();
  if ((trainer.global_step() + 1) / n > last_logged_step_ / n) at_start_ = read(trainer, "on_train_batch_start");
}

void DeviceStatsMonitor::on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss,
                                            const data::Batch& batch, int64_t batch_idx) {
  const int64_t n = trainer.options().log_every_n_steps;
  const int64_t step = trainer.global_step();
  if (step / n <= last_logged_step_ / n) return;
  last_logged_step_ = step;
  std::map<std::string, double> m = read(trainer, "on_train_batch_end");
  m.insert(at_start_.begin(), at_start_.end());
  for (const auto& logger : trainer.loggers()) logger->log_metrics(m, step);
}

}  // namespace kiln::trainer

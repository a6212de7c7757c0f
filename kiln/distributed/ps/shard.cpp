// Placing the parameters on the servers: see plan_shards in parameter_server.h.
#include <algorithm>
#include <numeric>

#include "kiln/distributed/ps/parameter_server.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::ps {

ShardPlan plan_shards(const std::vector<int64_t>& numels, size_t element_size, int num_servers, size_t split_bytes) {
  KILN_CHECK(num_servers >= 1, "plan_shards: ", num_servers, " servers");
  KILN_CHECK(element_size >= 1, "plan_shards: element size 0");
  ShardPlan plan;
  plan.servers.resize(static_cast<size_t>(num_servers));
  plan.bytes.assign(static_cast<size_t>(num_servers), 0);
  const auto esize = static_cast<int64_t>(element_size);

  // Large tensors: one contiguous piece per server, the first (numel % S) pieces one element longer.
  std::vector<int> whole;
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t n = numels[i];
    KILN_CHECK(n >= 0, "plan_shards: tensor ", i, " has ", n, " elements");
    if (n == 0) continue;
    if (num_servers > 1 && static_cast<size_t>(n * esize) >= split_bytes && n >= num_servers) {
      int64_t begin = 0;
      for (int k = 0; k < num_servers; ++k) {
        const int64_t len = n / num_servers + (k < n % num_servers ? 1 : 0);
        plan.servers[k].push_back({static_cast<int>(i), begin, begin + len});
        plan.bytes[k] += len * esize;
        begin += len;
      }
    } else {
      whole.push_back(static_cast<int>(i));
    }
  }
  // Small ones whole, largest first, each on the least loaded server (the lowest index among equals), so
  // that every process computes the same plan.
  std::stable_sort(whole.begin(), whole.end(), [&](int a, int b) { return numels[a] > numels[b]; });
  for (int i : whole) {
    const auto k = static_cast<size_t>(std::min_element(plan.bytes.begin(), plan.bytes.end()) - plan.bytes.begin());
    plan.servers[k].push_back({i, 0, numels[i]});
    plan.bytes[k] += numels[i] * esize;
  }
  for (auto& slices : plan.servers) {
    std::sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
      return a.param != b.param ? a.param < b.param : a.begin < b.begin;
    });
  }
  return plan;
}

}  // namespace kiln::distributed::ps

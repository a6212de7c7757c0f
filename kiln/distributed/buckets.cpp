#include "kiln/distributed/buckets.h"

#include <algorithm>
#include <map>

namespace kiln::distributed {

std::vector<BucketSpec> assign_buckets(const std::vector<Tensor>& params, size_t first_bucket_bytes,
                                       size_t bucket_bytes) {
  std::vector<BucketSpec> closed;
  // The open bucket of each dtype, and how many buckets that dtype has closed (its first uses the small limit).
  std::map<DType, BucketSpec> open;
  std::map<DType, int> closed_count;
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    BucketSpec& b = open[p.dtype()];
    b.dtype = p.dtype();
    b.params.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
    const size_t limit = closed_count[p.dtype()] == 0 ? std::min(first_bucket_bytes, bucket_bytes) : bucket_bytes;
    if (static_cast<size_t>(b.numel) * dtype_size(b.dtype) >= limit) {
      closed.push_back(std::move(b));
      open.erase(p.dtype());
      ++closed_count[p.dtype()];
    }
  }
  for (auto& [dtype, b] : open) closed.push_back(std::move(b));
  // params[] indices run backwards, so the bucket whose first parameter has the largest index comes first.
  std::stable_sort(closed.begin(), closed.end(),
                   [](const BucketSpec& a, const BucketSpec& b) { return a.params.front() > b.params.front(); });
  return closed;
}

}  // namespace kiln::distributed

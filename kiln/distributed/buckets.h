// Gradient buckets: which parameters DistributedDataParallel all-reduces together, worked out once from the
// parameters' shapes and dtypes alone, so that every rank (whose parameters were checked to match) gets the
// same buckets in the same order without exchanging a word.
//
// Parameters are taken in reverse registration order, the order backward tends to finish their gradients (the
// last layer first), so the first bucket fills, and can be sent, while backward is still working on the early
// layers. One bucket holds one dtype only (it is one flat buffer, reduced by one collective); each dtype fills
// its own buckets, the first of them small (first_bucket_bytes, 1 MiB as in PyTorch) so communication starts
// early, the later ones up to bucket_bytes. A bucket is closed as soon as it reaches its limit, so a parameter
// larger than the limit gets a bucket of its own, and a limit of 0 gives every parameter its own bucket.
// Buckets are ordered by their first parameter: that is the order they are launched in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/tensor/tensor.h"

namespace kiln::distributed {

struct BucketSpec {
  DType dtype = kFloat32;
  std::vector<size_t> params;    // indices into the list given to assign_buckets, in the bucket's order
  std::vector<int64_t> offsets;  // each parameter's first element in the bucket's flat buffer
  int64_t numel = 0;             // the flat buffer's length
};

// params: in registration order. Returns the buckets in launch order.
std::vector<BucketSpec> assign_buckets(const std::vector<Tensor>& params, size_t first_bucket_bytes,
                                       size_t bucket_bytes);

}  // namespace kiln::distributed

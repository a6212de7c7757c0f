// index_select, gather, scatter, scatter_add and index_add on the GPU against the CPU kernels on the same
// inputs, in every dtype, layout (inputs, index and in-place targets alike) and dim, plus zero-size cases,
// large sums through the atomics with many duplicates, and index errors found on the device.
//
// In-place targets are compared over their whole storage, so a write that lands outside the view (in the gaps
// of a strided target) shows as well as one that is missing. Sums use small integers (0/1 where the 16-bit
// floats would round): exact in every dtype and every order, so even the atomics' sums compare exactly.
#include <algorithm>
#include <functional>
#include <numeric>

#include "cuda/cuda_test_util.h"
#include "tensor/indexing_test_util.h"

namespace kiln {
namespace {

using test::CudaTest;
using test::expect_matches_cpu;
using test::for_each_case;
using test::Layout;
using test::random_indices;
using test::small_ints;
using test::with_layout;

// The same bytes, sizes, strides and offset on the GPU: the whole storage is copied, the view rebuilt on it.
Tensor to_gpu_same_layout(const Tensor& x) {
  const auto storage_numel = static_cast<int64_t>(x.storage()->nbytes() / x.element_size());
  Tensor flat(std::make_shared<TensorImpl>(x.storage(), x.dtype(), Shape{storage_numel}, Shape{1}, 0));
  Tensor on_gpu = flat.to(Device::cuda());
  return Tensor(std::make_shared<TensorImpl>(on_gpu.storage(), x.dtype(), x.sizes(), x.strides(), x.storage_offset()));
}

// Every element of t's storage, as a 1-D view.
Tensor whole_storage(const Tensor& t) {
  const auto storage_numel = static_cast<int64_t>(t.storage()->nbytes() / t.element_size());
  return Tensor(std::make_shared<TensorImpl>(t.storage(), t.dtype(), Shape{storage_numel}, Shape{1}, 0));
}

// An in-place result on the GPU equals the CPU's, inside the view and around it.
void expect_same_in_place(const Tensor& gpu, const Tensor& cpu, const std::string& context) {
  expect_matches_cpu(gpu, cpu, context + ", the view", 0);
  expect_matches_cpu(whole_storage(gpu), whole_storage(cpu), context + ", the whole storage", 0);
}

// Index values for an index of `ishape` along d into a dim of size n, distinct within every line along d (so
// scatter's result does not depend on which duplicate wins).
std::vector<double> distinct_indices(const Shape& ishape, int64_t d, int64_t n, std::mt19937& rng) {
  std::vector<double> v(static_cast<size_t>(shape_numel(ishape)));
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t f = 0; f < shape_numel(ishape); ++f) {
    Shape c = test::unravel(f, ishape);
    if (c[d] != 0) continue;
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (c[d] = 0; c[d] < ishape[d]; ++c[d]) v[test::ravel(c, ishape)] = static_cast<double>(perm[c[d]]);
  }
  return v;
}

// ---- reads ----

TEST_F(CudaTest, IndexSelectMatchesCpu) {
  std::mt19937 rng(101);
  const Shape shape{3, 4, 5};
  int round = 0;
  for_each_case({0, 1, 2, -1}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Tensor x = test::random_tensor(shape, dtype, rng, layout);
    // int32 indices are converted by the frontend; strided ones reach the kernel as they are.
    Tensor index = with_layout(random_indices(7, shape[d], rng), {7}, test::kIndexDTypes[round++ % 2], layout, rng);
    expect_matches_cpu(index_select(to_gpu_same_layout(x), dim, to_gpu_same_layout(index)), index_select(x, dim, index),
                       "index_select", 0);
  });
}

TEST_F(CudaTest, IndexSelectLargeRowsAndColumns) {
  // An embedding lookup: 2^14 rows of 64 out of 1000, and the same through a transposed table.
  std::mt19937 rng(102);
  for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
    Tensor x = test::random_tensor({1000, 64}, kFloat32, rng, layout);
    Tensor index = with_layout(random_indices(1 << 14, 1000, rng), {1 << 14}, kInt64, Layout::Contiguous, rng);
    Tensor gx = to_gpu_same_layout(x), gi = to_gpu_same_layout(index);
    expect_matches_cpu(index_select(gx, 0, gi), index_select(x, 0, index), test::layout_name(layout), 0);
    Tensor cols = with_layout(random_indices(1 << 10, 64, rng), {1 << 10}, kInt64, Layout::Strided, rng);
    expect_matches_cpu(index_select(gx, 1, to_gpu_same_layout(cols)), index_select(x, 1, cols),
                       std::string("columns, ") + test::layout_name(layout), 0);
  }
}

TEST_F(CudaTest, GatherMatchesCpu) {
  std::mt19937 rng(103);
  const Shape shape{3, 4, 5};
  int round = 0;
  for_each_case({0, 1, 2, -2}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Tensor x = test::random_tensor(shape, dtype, rng, layout);
    Shape ishape{2, 3, 4};  // smaller than x outside dim, larger along it
    ishape[d] = 6;
    Tensor index = with_layout(random_indices(shape_numel(ishape), shape[d], rng), ishape,
                               test::kIndexDTypes[round++ % 2], layout, rng);
    expect_matches_cpu(gather(to_gpu_same_layout(x), dim, to_gpu_same_layout(index)), gather(x, dim, index), "gather",
                       0);
  });
}

TEST_F(CudaTest, ReadsOfZeroSizeAndZeroDim) {
  Tensor x = arange(12, kFloat32).view({3, 4});
  Tensor gx = x.to(Device::cuda());
  EXPECT_EQ(index_select(gx, 1, empty({0}, TensorOptions(kInt64).device(Device::cuda()))).sizes(), (Shape{3, 0}));
  EXPECT_EQ(gather(gx, 1, empty({3, 0}, TensorOptions(kInt64).device(Device::cuda()))).sizes(), (Shape{3, 0}));
  Tensor s = scalar_tensor(4.0), i0 = scalar_tensor(0, kInt64);
  expect_matches_cpu(index_select(s.to(Device::cuda()), 0, i0.to(Device::cuda())), index_select(s, 0, i0), "0-dim", 0);
  expect_matches_cpu(gather(s.to(Device::cuda()), 0, i0.to(Device::cuda())), gather(s, 0, i0), "0-dim gather", 0);
}

// ---- writes ----

TEST_F(CudaTest, ScatterMatchesCpu) {
  std::mt19937 rng(104);
  const Shape shape{4, 5, 6};
  for_each_case({0, 1, -1}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Shape ishape{3, 4, 5}, src_shape{4, 5, 6};  // src larger than index: only index's part is read
    ishape[d] = 3;
    src_shape[d] = 4;
    Tensor self = test::random_tensor(shape, dtype, rng, layout);
    Tensor index = with_layout(distinct_indices(ishape, d, shape[d], rng), ishape, kInt64, layout, rng);
    Tensor src = test::random_tensor(src_shape, dtype, rng, layout);
    Tensor gself = to_gpu_same_layout(self);
    scatter_(gself, dim, to_gpu_same_layout(index), to_gpu_same_layout(src));
    scatter_(self, dim, index, src);
    expect_same_in_place(gself, self, "scatter_");
  });
}

TEST_F(CudaTest, ScatterScalarValue) {
  std::mt19937 rng(105);
  for (DType dtype : test::kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor self = test::random_tensor({3, 4}, dtype, rng);
    Tensor index = with_layout(distinct_indices({3, 2}, 1, 4, rng), {3, 2}, kInt32, Layout::Contiguous, rng);
    expect_matches_cpu(scatter(self.to(Device::cuda()), 1, index.to(Device::cuda()), Scalar(1)),
                       scatter(self, 1, index, Scalar(1)), "scatter(value)", 0);
  }
}

TEST_F(CudaTest, ScatterAddSumsDuplicatesLikeCpu) {
  std::mt19937 rng(106);
  const Shape shape{4, 5, 6};
  for_each_case({0, 1, 2, -2}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Shape ishape{3, 4, 5}, src_shape{4, 5, 6};
    ishape[d] = 8;  // more entries than positions: duplicates for sure
    src_shape[d] = 9;
    Tensor self = small_ints(shape, dtype, rng, layout);
    Tensor index = with_layout(random_indices(shape_numel(ishape), shape[d], rng), ishape, kInt64, layout, rng);
    Tensor src = small_ints(src_shape, dtype, rng, layout);
    Tensor gself = to_gpu_same_layout(self);
    scatter_add_(gself, dim, to_gpu_same_layout(index), to_gpu_same_layout(src));
    scatter_add_(self, dim, index, src);
    expect_same_in_place(gself, self, "scatter_add_");
  });
}

TEST_F(CudaTest, IndexAddWithAlphaLikeCpu) {
  std::mt19937 rng(107);
  const Shape shape{4, 5, 3};
  int round = 0;
  for_each_case({0, 1, 2, -1}, [&](DType dtype, Layout layout, int64_t dim, int64_t d) {
    Shape src_shape = shape;
    src_shape[d] = 7;  // 7 entries into 3 to 5 positions: duplicates for sure
    Tensor self = small_ints(shape, dtype, rng, layout);
    Tensor index = with_layout(random_indices(7, shape[d], rng), {7}, test::kIndexDTypes[round++ % 2], layout, rng);
    Tensor src = small_ints(src_shape, dtype, rng, layout);
    // A float alpha that keeps the sums exact (and below 256, for bfloat16); an integer one elsewhere.
    Scalar alpha = is_floating(dtype) ? Scalar(-2.0) : dtype == kBool ? Scalar(true) : Scalar(3);
    Tensor gself = to_gpu_same_layout(self);
    index_add_(gself, dim, to_gpu_same_layout(index), to_gpu_same_layout(src), alpha);
    index_add_(self, dim, index, src, alpha);
    expect_same_in_place(gself, self, "index_add_");
  });
}

TEST_F(CudaTest, AtomicSumsOverManyDuplicates) {
  // 2^20 additions in every dtype. The 16-bit floats add 0s and 1s over 8192 targets (some 128 each, far
  // below 256, where bfloat16 stops counting by ones); the other dtypes small integers over few targets,
  // exact in any order (uint8 wraps and bool ors, both order-free).
  std::mt19937 rng(108);
  const int64_t n = int64_t{1} << 20;
  for (DType dtype : test::kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const bool half = dtype == kFloat16 || dtype == kBFloat16;
    const int64_t targets = half ? 8192 : 16;
    auto src_values = [&](int64_t count) {
      return test::random_values(count, half ? kBool : dtype == kUInt8 || dtype == kBool ? dtype : kInt32, rng);
    };
    // scatter_add into a 1-D tensor.
    Tensor index = with_layout(random_indices(n, targets, rng), {n}, kInt64, Layout::Contiguous, rng);
    Tensor src = test::make_tensor(src_values(n), {n}, dtype);
    Tensor self = zeros({targets}, dtype);
    Tensor gself = self.to(Device::cuda());
    scatter_add_(gself, 0, index.to(Device::cuda()), src.to(Device::cuda()));
    scatter_add_(self, 0, index, src);
    expect_matches_cpu(gself, self, "scatter_add_ 1-D", 0);
    // index_add of 2^16 rows of 16 into `targets / 16` rows (or 4 rows), through a transposed src.
    const int64_t rows = std::max<int64_t>(4, targets / 16), k = n / 16;
    Tensor rindex = with_layout(random_indices(k, rows, rng), {k}, kInt64, Layout::Contiguous, rng);
    Tensor rsrc = test::make_tensor(src_values(n), {16, k}, dtype).t();
    Tensor rself = zeros({rows, 16}, dtype);
    Tensor grself = rself.to(Device::cuda());
    index_add_(grself, 0, rindex.to(Device::cuda()), to_gpu_same_layout(rsrc));
    index_add_(rself, 0, rindex, rsrc);
    expect_matches_cpu(grself, rself, "index_add_ rows", 0);
  }
}

TEST_F(CudaTest, WritesOfZeroSizeAndZeroDim) {
  Tensor self = ones({2, 3});
  Tensor gself = self.to(Device::cuda());
  Tensor no_index = empty({2, 0}, TensorOptions(kInt64).device(Device::cuda()));
  scatter_add_(gself, 1, no_index, empty({2, 0}, Device::cuda()));
  index_add_(gself, 1, empty({0}, TensorOptions(kInt64).device(Device::cuda())), empty({2, 0}, Device::cuda()));
  expect_matches_cpu(gself, self, "empty index", 0);
  Tensor s = scalar_tensor(1.0), i0 = scalar_tensor(0, kInt64), v = scalar_tensor(7.0);
  expect_matches_cpu(scatter(s.to(Device::cuda()), 0, i0.to(Device::cuda()), v.to(Device::cuda())), scatter(s, 0, i0, v),
                     "0-dim scatter", 0);
}

// nonzero (its CUDA kernel) and masked_select (a composite over it): the same coordinates and values as on the
// CPU, in every dtype and layout, NaN (nonzero) and -0.0 (zero) included, with large inputs that span many blocks.
TEST_F(CudaTest, NonzeroAndMaskedSelectMatchCpu) {
  std::mt19937 rng(107);
  // Long enough for many of CUB's tiles, 1-d (the positions written directly) and 4-d (unravelled).
  for (const Shape& shape : std::vector<Shape>{{7}, {3, 4, 5}, {0, 3}, {300, 700}, {70001}, {2, 3, 40, 501}}) {
    for (DType dtype : test::kAllDTypes) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        Tensor x = test::random_tensor(shape, dtype, rng, layout, -1.4, 1.4);
        if (is_floating(dtype)) {
          x.masked_fill_(lt(abs(x), 0.5), 0);
          x.masked_fill_(gt(x, 1.3), -0.0);
          x.masked_fill_(lt(x, -1.3), NAN);
        }
        const Tensor gx = to_gpu_same_layout(x);
        const std::string what = shape_str(shape) + " " + dtype_name(dtype) + " " + test::layout_name(layout);
        expect_matches_cpu(nonzero(gx), nonzero(x), "nonzero " + what, 0);
        expect_matches_cpu(masked_select(gx, ne(gx, 0)), masked_select(x, ne(x, 0)), "masked_select " + what, 0);
      }
    }
  }
}

// Indexing with index tensors is a composite too (nonzero, index_select; index_put: scatter and index_add at
// computed flat positions): the same values and gradients as on the CPU, with index tensors on either device.
TEST_F(CudaTest, AdvancedIndexingMatchesCpu) {
  std::mt19937 rng(108);
  for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
    const Tensor x = test::random_tensor({6, 7, 8}, kFloat32, rng, layout);
    const Tensor gx = to_gpu_same_layout(x);
    const Tensor rows = tensor(std::vector<int64_t>{5, -1, 0, 5}, {2, 2}, kInt64);
    const Tensor cols = tensor(std::vector<int64_t>{7, 0, 3}, {3}, kInt64);
    const Tensor mask = gt(x.select(2, 0), 0);  // (6, 7)
    const std::string what = test::layout_name(layout);
    expect_matches_cpu(gx.index({rows}), x.index({rows}), "rows " + what, 0);
    expect_matches_cpu(gx.index({rows.to(Device::cuda()), Slice(), Slice(1, 3)}), x.index({rows, Slice(), Slice(1, 3)}),
                       "rows, index on the GPU " + what, 0);
    expect_matches_cpu(gx.index({Slice(), Slice(0, 3), cols}), x.index({Slice(), Slice(0, 3), cols}), "cols " + what, 0);
    expect_matches_cpu(gx.index({cols.narrow(0, 0, 2), Slice(), cols.narrow(0, 1, 2)}),
                       x.index({cols.narrow(0, 0, 2), Slice(), cols.narrow(0, 1, 2)}), "apart " + what, 0);
    expect_matches_cpu(gx[mask.to(Device::cuda())], x[mask], "mask " + what, 0);
    const Tensor v = test::random_tensor({3}, kFloat32, rng);
    Tensor cpu = x.clone(), gpu = gx.clone();
    cpu.index_put_({Slice(), Slice(0, 2), cols}, v, true);
    gpu.index_put_({Slice(), Slice(0, 2), cols}, v.to(Device::cuda()), true);
    expect_matches_cpu(gpu, cpu, "index_put_ accumulate " + what);
    cpu.index_put_({mask}, -1.0);
    gpu.index_put_({mask}, -1.0);
    expect_matches_cpu(gpu, cpu, "index_put_ mask " + what, 0);
    // The gradient: an index_add of the repeated rows.
    Tensor xr = x.clone().requires_grad_(), gr = gx.clone().requires_grad_();
    (xr.index({rows}) * 2.0).sum().backward();
    (gr.index({rows}) * 2.0).sum().backward();
    expect_matches_cpu(gr.grad(), xr.grad(), "index gradient " + what, 0);
  }
}

// ---- index errors ----

// Runs `bad` (an op with an out-of-range index), waits for the device, then `next` (a valid indexing op):
// the error must come from one of them (from `next` normally, from `bad` itself with KILN_CUDA_SYNC_DEBUG) and
// name the faulty op and values.
void expect_index_error(const std::function<void()>& bad, const std::function<void()>& next,
                        std::initializer_list<std::string> parts) {
  std::string message;
  try {
    bad();
    cuda::synchronize();
    next();
  } catch (const Error& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty()) << "no error for an out-of-range index";
  for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "\"" << message << "\" lacks " << p;
}

TEST_F(CudaTest, BadIndicesAreReportedByTheNextIndexingOp) {
  const TensorOptions cuda_int64 = TensorOptions(kInt64).device(Device::cuda());
  Tensor x = arange(20, kFloat32).view({4, 5}).to(Device::cuda());
  Tensor good = zeros({1, 1}, cuda_int64);
  expect_index_error([&] { (void)gather(x, 1, full({1, 1}, 5, cuda_int64)); }, [&] { (void)gather(x, 1, good); },
                     {"gather", "index 5", "dim 1", "size 5"});
  // Reported once: the next call succeeds.
  expect_matches_cpu(gather(x, 1, good), gather(x.cpu(), 1, good.cpu()), "after the error", 0);

  Tensor self = zeros({4, 5}, Device::cuda());
  expect_index_error([&] { scatter_add_(self, 0, full({1, 1}, -1, cuda_int64), ones({1, 1}, Device::cuda())); },
                     [&] { (void)index_select(x, 0, good.view({1})); }, {"scatter_add", "index -1", "dim 0", "size 4"});
  // Nothing was written for the bad index.
  expect_matches_cpu(self, zeros({4, 5}), "skipped write", 0);
}

}  // namespace
}  // namespace kiln

// The dispatch table: every op has a CPU kernel, missing CUDA kernels are clear errors, and a user kernel
// installed with register_kernel is the one that runs (and can be swapped back).
#include "test_util.h"

namespace kiln {
namespace {

TEST(Dispatch, EveryOpHasACpuKernel) {
#define KILN_CHECK_CPU(name, K) EXPECT_TRUE(has_kernel<Op::name>(DeviceType::CPU)) << #name;
  KILN_FORALL_OPS(KILN_CHECK_CPU)
#undef KILN_CHECK_CPU
}

TEST(Dispatch, OpNamesFollowTheList) {
  EXPECT_STREQ(op_name(Op::copy), "copy");
  EXPECT_STREQ(op_name(Op::bmm), "bmm");
  EXPECT_STREQ(op_name(Op::index_add), "index_add");
}

TEST(Dispatch, MissingCudaKernelNamesTheOp) {
  if (has_kernel<Op::exp>(DeviceType::CUDA)) GTEST_SKIP() << "exp has a CUDA kernel in this build";
  test::expect_error([] { (void)get_kernel<Op::exp>(Device::cuda(0)); }, {"exp: no CUDA kernel"});
}

int calls = 0;
void counting_exp(const Tensor& out, const Tensor& x) {
  ++calls;
  out.fill_(42);
}

TEST(Dispatch, RegisteredKernelRunsAndCanBeRestored) {
  auto previous = register_kernel<Op::exp>(DeviceType::CPU, counting_exp);
  ASSERT_NE(previous, nullptr);
  calls = 0;
  Tensor y = exp(zeros({3}));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(test::values(y), (std::vector<double>{42, 42, 42}));
  register_kernel<Op::exp>(DeviceType::CPU, previous);
  EXPECT_EQ(test::values(exp(zeros({3}))), (std::vector<double>{1, 1, 1}));
}

}  // namespace
}  // namespace kiln

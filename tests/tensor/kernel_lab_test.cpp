// The kernel lab (kernel_lab.h): a correct variant passes; each way a variant can be wrong fails with a report
// that says where (a wrong value, an element never written, a wrong gradient, a variant never reached); the
// table is restored however the check ends; timing reports both kernels. Each wrong variant is a real kernel
// with one defect, so each test fails if the check stops looking at what it claims to.
#include "test_util.h"

#include "kiln/kiln.h"

namespace kiln {
namespace {

using lab::Check;

// A plain relu over contiguous float32; anything else goes to the kernel it replaced.
KernelFn<Op::relu> builtin_relu = nullptr;
void loop_relu(const Tensor& out, const Tensor& x) {
  if (x.dtype() != kFloat32 || !x.is_contiguous() || !out.is_contiguous()) return builtin_relu(out, x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] > 0 || in[i] != in[i] ? in[i] : 0.0f;  // NaN stays NaN
}
// Leaves the last element unwritten.
void short_relu(const Tensor& out, const Tensor& x) {
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i + 1 < x.numel(); ++i) o[i] = in[i] > 0 ? in[i] : 0.0f;
}
// Off by one part in a thousand.
void sloppy_relu(const Tensor& out, const Tensor& x) {
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] > 0 ? in[i] * 1.001f : 0.0f;
}
// relu's gradient, passing it through at x == 0 and below as well as above.
void leaky_relu_backward(const Tensor& out, const Tensor& grad, const Tensor& x) {
  (void)x;
  out.copy_(grad);
}

struct Init {
  Init() { builtin_relu = reinterpret_cast<KernelFn<Op::relu>>(detail::kernel_slot(Op::relu, DeviceType::CPU)); }
};
const Init init;

// Fresh random inputs inside the work: the check replays the generator, so both runs see the same ones.
std::vector<Tensor> relu_work() {
  Tensor x = randn({37, 11}).requires_grad_();
  Tensor w = randn({37, 11});  // an upstream gradient that is not 0 where relu's input is negative
  Tensor y = relu(x);
  return {y, autograd::grad({(y * w).sum()}, {x})[0]};
}

TEST(KernelLab, ACorrectVariantPassesAndIsCounted) {
  profiler::Profiler recording;  // a profiler of the user's own, recording meanwhile, does not get in the way
  const Check c = lab::check_variant<Op::relu>(DeviceType::CPU, loop_relu, relu_work);
  recording.stop();
  EXPECT_TRUE(c.ok) << c.report;
  EXPECT_EQ(c.variant_calls, 1);
  EXPECT_EQ(c.max_abs_error, 0);
  EXPECT_NE(c.report.find("PASS"), std::string::npos) << c.report;
  // The table holds the built-in kernel again.
  EXPECT_EQ(detail::kernel_slot(Op::relu, DeviceType::CPU), reinterpret_cast<detail::AnyKernel>(builtin_relu));
}

TEST(KernelLab, AnUnwrittenElementShowsAsPoison) {
  const Check c = lab::check_variant<Op::relu>(DeviceType::CPU, short_relu, relu_work);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.report.find("output 0 ((37, 11) float32): at (36, 10)"), std::string::npos) << c.report;
  EXPECT_NE(c.report.find("never wrote"), std::string::npos) << c.report;
}

TEST(KernelLab, AWrongValueFailsWithItsErrorAndPassesALooserTolerance) {
  const Check c = lab::check_variant<Op::relu>(DeviceType::CPU, sloppy_relu, relu_work);
  EXPECT_FALSE(c.ok);
  EXPECT_NEAR(c.max_rel_error, 1e-3, 1e-5);
  EXPECT_NE(c.report.find("worst at"), std::string::npos) << c.report;
  EXPECT_TRUE(lab::check_variant<Op::relu>(DeviceType::CPU, sloppy_relu, relu_work, {.rtol = 2e-3}).ok);
}

TEST(KernelLab, AWrongGradientKernelFailsOnTheGradient) {
  const Check c = lab::check_variant<Op::relu_backward>(DeviceType::CPU, leaky_relu_backward, relu_work);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.report.find("output 0 ((37, 11) float32): max abs error 0,"), std::string::npos) << c.report;
  EXPECT_NE(c.report.find("output 1 ((37, 11) float32)"), std::string::npos) << c.report;
  EXPECT_GE(c.variant_calls, 1);
}

TEST(KernelLab, AVariantTheWorkNeverReachesFails) {
  const Check c =
      lab::check_variant<Op::relu>(DeviceType::CPU, loop_relu, [] { return std::vector<Tensor>{exp(ones({3}))}; });
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.variant_calls, 0);
  EXPECT_NE(c.report.find("never called"), std::string::npos) << c.report;
}

TEST(KernelLab, TheTableIsRestoredWhenTheWorkThrows) {
  // The second run (the variant's, poisoned) throws: the kernel it replaced and the poison flag come back.
  int runs = 0;
  test::expect_error([&] {
    lab::check_variant<Op::relu>(DeviceType::CPU, short_relu, [&]() -> std::vector<Tensor> {
      relu(ones({2}));
      if (++runs == 2) {
        EXPECT_EQ(detail::kernel_slot(Op::relu, DeviceType::CPU), reinterpret_cast<detail::AnyKernel>(
                                                                     &lab::detail::CountingKernel<Op::relu>::call));
        EXPECT_TRUE(cpu_poison_allocations());
        throw Error("work failed");
      }
      return {};
    });
  }, {"work failed"});
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(detail::kernel_slot(Op::relu, DeviceType::CPU), reinterpret_cast<detail::AnyKernel>(builtin_relu));
  EXPECT_FALSE(cpu_poison_allocations());
}

TEST(KernelLab, PoisonedAllocationsAreNaNAndAllOnes) {
  set_cpu_poison_allocations(true);
  const Tensor f = empty({5}), i = empty({3}, kInt32);
  set_cpu_poison_allocations(false);
  for (double v : test::values(f)) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(test::values(i), (std::vector<double>{-1, -1, -1}));
}

TEST(KernelLab, TimingReportsBothKernelsAndTheRoofline) {
  const Tensor x = randn({1 << 16});
  const lab::Timing t = lab::time_variant<Op::relu>(
      DeviceType::CPU, loop_relu, [&] { return std::vector<Tensor>{relu(x)}; },
      {.reps = 3, .warmup = 1, .flops = 1.0 * x.numel(), .bytes = 8.0 * x.numel(), .peaks = {100, 10}});
  EXPECT_GT(t.reference_seconds, 0);
  EXPECT_GT(t.variant_seconds, 0);
  EXPECT_DOUBLE_EQ(t.speedup, t.reference_seconds / t.variant_seconds);
  for (const char* part : {"reference", "variant", "GB/s", "roofline", "speedup"})
    EXPECT_NE(t.report.find(part), std::string::npos) << part << "\n" << t.report;
  EXPECT_EQ(detail::kernel_slot(Op::relu, DeviceType::CPU), reinterpret_cast<detail::AnyKernel>(builtin_relu));
}

TEST(KernelLab, ScopedKernelPutsThePreviousOneBack) {
  {
    lab::ScopedKernel<Op::relu> scoped(DeviceType::CPU, short_relu);
    EXPECT_EQ(scoped.previous(), builtin_relu);
    EXPECT_EQ(detail::kernel_slot(Op::relu, DeviceType::CPU), reinterpret_cast<detail::AnyKernel>(short_relu));
  }
  EXPECT_EQ(detail::kernel_slot(Op::relu, DeviceType::CPU), reinterpret_cast<detail::AnyKernel>(builtin_relu));
}

}  // namespace
}  // namespace kiln

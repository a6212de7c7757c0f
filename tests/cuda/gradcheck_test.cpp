// Gradients computed on the GPU against central differences, in float64: the backward rules running on CUDA
// kernels (element-wise, reductions, softmax, cuBLAS, cuDNN, pooling, indexing). gradcheck perturbs the inputs on
// the CPU; each function moves them to the GPU, so every forward and backward op runs there.
#include <random>
#include <string>

#include "cuda/cuda_test_util.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/nn/functional.h"

namespace kiln {
namespace {

using test::CudaTest;

Tensor gpu(const Tensor& x) { return x.to(Device::cuda()); }

Tensor input(IntArrayRef shape, Generator& gen) { return randn(shape, kFloat64, &gen).requires_grad_(); }

TEST_F(CudaTest, GradcheckElementwiseAndReductionsOnTheGpu) {
  Generator gen(test::fresh_seed());
  Tensor a = input({3, 4}, gen), b = input({4}, gen);
  autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor x = gpu(in[0]), y = gpu(in[1]);
        Tensor z = tanh(x * y) + sigmoid(x - y).exp() / (1 + y * y);
        return std::vector<Tensor>{z.sum(1), z.mean(), var(z, {0}), norm(z), amax(z, {1})};
      },
      {a, b});
}

TEST_F(CudaTest, GradcheckMatmulSoftmaxAndCrossEntropyOnTheGpu) {
  Generator gen(test::fresh_seed());
  Tensor x = input({5, 6}, gen), w = input({6, 4}, gen), bias = input({4}, gen);
  Tensor target = randint(0, 4, {5}, kInt64, &gen);
  autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        Tensor logits = matmul(gpu(in[0]), gpu(in[1])) + gpu(in[2]);
        return std::vector<Tensor>{nn::F::cross_entropy(logits, gpu(target)), softmax(logits, 0),
                                   log_softmax(logits, 1)};
      },
      {x, w, bias});
}

TEST_F(CudaTest, GradcheckConvolutionAndPoolingOnTheGpu) {
  Generator gen(test::fresh_seed());
  Tensor x = input({2, 4, 7, 6}, gen), w = input({6, 2, 3, 3}, gen), bias = input({6}, gen);
  autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor y = nn::F::conv2d(gpu(in[0]), gpu(in[1]), gpu(in[2]), /*stride=*/{2, 1}, /*padding=*/1,
                                 /*dilation=*/1, /*groups=*/2);
        // y is (2, 6, 4, 6): adaptive pooling to (3, 4) has overlapping bins along both dims.
        return std::vector<Tensor>{nn::F::max_pool2d(y, 2, 1), nn::F::adaptive_avg_pool2d(y, {3, 4}),
                                   nn::F::adaptive_max_pool2d(y, {3, 4})};
      },
      {x, w, bias});
}

// The 3-d convolutions and pools are composites (the 2-d kernels, unfold, pad, index_add, max): on the GPU they
// run those ops' CUDA kernels, checked here by finite differences and against the CPU.
TEST_F(CudaTest, GradcheckVolumetricConvolutionAndPoolingOnTheGpu) {
  Generator gen(test::fresh_seed());
  Tensor x = input({1, 4, 4, 5, 4}, gen), w = input({4, 2, 2, 3, 2}, gen), wt = input({4, 1, 2, 2, 2}, gen);
  auto run = [](const std::vector<Tensor>& in) {
    const Tensor y = nn::F::conv3d(in[0], in[1], {}, 1, nn::F::same, 1, /*groups=*/2);  // (1, 4, 4, 5, 4)
    return std::vector<Tensor>{y,
                               nn::F::conv_transpose3d(y, in[2], {}, {2, 1, 1}, {1, 0, 0}, {1, 0, 0}, /*groups=*/2),
                               nn::F::max_pool3d(y, 2, 1),
                               nn::F::avg_pool3d(y, {2, 3, 3}, 1, 1, /*count_include_pad=*/false, /*ceil_mode=*/true)};
  };
  autograd::gradcheck([&](const std::vector<Tensor>& in) { return run({gpu(in[0]), gpu(in[1]), gpu(in[2])}); },
                      {x, w, wt});
  const std::vector<Tensor> on_gpu = run({gpu(x.detach()), gpu(w.detach()), gpu(wt.detach())}),
                            on_cpu = run({x.detach(), w.detach(), wt.detach()});
  for (size_t i = 0; i < on_cpu.size(); ++i)
    test::expect_matches_cpu(on_gpu[i], on_cpu[i], "volumetric output " + std::to_string(i));
}

TEST_F(CudaTest, GradcheckIndexingAndNormalizationOnTheGpu) {
  Generator gen(test::fresh_seed());
  Tensor x = input({4, 5}, gen), table = input({7, 3}, gen), gamma = input({5}, gen);
  Tensor idx = tensor(std::vector<int64_t>{2, 0, 6, 2});
  autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        Tensor e = nn::F::embedding(gpu(idx), gpu(in[1]));  // repeated index 2: its rows' gradients add up
        Tensor n = nn::F::layer_norm(gpu(in[0]), {5}, gpu(in[2]));
        return std::vector<Tensor>{e * 2, n, index_select(gpu(in[0]), 1, gpu(idx.narrow(0, 0, 2)))};
      },
      {x, table, gamma});
}

// The composites built this way run on the GPU too: padding in each mode (index_select there, index_add back),
// the pixel shuffles and rms_norm.
TEST_F(CudaTest, GradcheckPaddingPixelShuffleAndRmsNormOnTheGpu) {
  Generator gen(test::fresh_seed());
  Tensor x = input({2, 8, 3, 4}, gen), w = input({4}, gen);
  autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        const Tensor y = gpu(in[0]);
        return std::vector<Tensor>{nn::F::pad(y, {2, 1, 1, 2}, nn::F::PadMode::Reflect),
                                   nn::F::pad(y, {3, 0, 0, 2}, nn::F::PadMode::Replicate),
                                   nn::F::pad(y, {1, 4, 3, 3}, nn::F::PadMode::Circular),
                                   nn::F::pixel_shuffle(y, 2), nn::F::pixel_unshuffle(y.narrow(2, 0, 2), 2),
                                   nn::F::rms_norm(y, {4}, gpu(in[1]), 1e-3)};
      },
      {x, w});
}

// The CTC loss's kernels on the GPU: alpha forward, beta and the gradient backward, through a log_softmax and on
// log-probabilities directly, with repeated labels, an empty target and frames past an input length.
TEST_F(CudaTest, GradcheckCtcLossOnTheGpu) {
  Generator gen(test::fresh_seed());
  Tensor z = input({7, 3, 4}, gen);
  const Tensor targets = tensor(std::vector<int64_t>{1, 1, 2, 3, 0, 0, 2, 3, 3}, {3, 3});
  autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        const Tensor y = gpu(in[0]);
        const nn::F::CTCLossOptions none{.reduction = nn::F::Reduction::None};
        return std::vector<Tensor>{nn::F::ctc_loss(log_softmax(y, 2), targets, {7, 6, 7}, {3, 0, 3}, none),
                                   nn::F::ctc_loss(y - 2.0, targets, {5, 7, 6}, {2, 1, 3})};
      },
      {z});
}

}  // namespace
}  // namespace kiln

// The loss modules (kiln/nn/loss.h): each must compute its functional loss with the options it was built with
// (options chosen so that dropping any of them changes the value), keep its weights as buffers that move,
// convert and load with the module, and print as PyTorch prints it.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using nn::F::Reduction;
using test::expect_error;
using test::randn64;

// a and b equal to the last bit, as two calls of the same function on the same inputs must be.
void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << what;
}
void expect_differs(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_FALSE(a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>())
      << what << ": the option made no difference, so the test could not tell it was dropped";
}

TEST(LossModules, RegressionLossesUseTheirOptions) {
  Tensor a = randn64({4, 3}, 1), b = randn64({4, 3}, 2) * 2;
  nn::MSELoss mse(Reduction::Sum);
  expect_same(mse(a, b), nn::F::mse_loss(a, b, Reduction::Sum), "MSELoss");
  expect_differs(mse(a, b), nn::MSELoss()(a, b), "MSELoss reduction");
  nn::L1Loss l1(Reduction::None);
  expect_same(l1(a, b), nn::F::l1_loss(a, b, Reduction::None), "L1Loss");
  nn::SmoothL1Loss sl1(nn::SmoothL1LossOptions{.reduction = Reduction::Sum, .beta = 0.5});
  expect_same(sl1(a, b), nn::F::smooth_l1_loss(a, b, Reduction::Sum, 0.5), "SmoothL1Loss");
  expect_differs(sl1(a, b), nn::SmoothL1Loss(nn::SmoothL1LossOptions{.reduction = Reduction::Sum})(a, b), "SmoothL1Loss beta");
  nn::HuberLoss huber(nn::HuberLossOptions{.delta = 1.5});
  expect_same(huber(a, b), nn::F::huber_loss(a, b, Reduction::Mean, 1.5), "HuberLoss");
  expect_differs(huber(a, b), nn::HuberLoss()(a, b), "HuberLoss delta");
  // Gradients flow through the module call as through the function.
  Tensor x = a.detach().requires_grad_();
  mse(x, b).backward();
  Tensor want = (2 * (a - b)).detach();
  EXPECT_EQ(x.grad().to_vector<double>(), want.to_vector<double>());
}

TEST(LossModules, ClassificationLossesUseTheirOptionsAndWeights) {
  const int64_t N = 6, C = 4;
  Tensor logits = randn64({N, C}, 3) * 2;
  Tensor target = tensor(std::vector<int64_t>{0, 3, 1, 1, 2, 3}, {N});
  Tensor weight = tensor({0.5, 2.0, 1.0, 3.0}, kFloat64);
  nn::F::CrossEntropyOptions ce_opts{.weight = weight, .ignore_index = 1, .label_smoothing = 0.2};
  nn::CrossEntropyLoss ce(ce_opts);
  expect_same(ce(logits, target), nn::F::cross_entropy(logits, target, ce_opts), "CrossEntropyLoss");
  for (auto drop : std::vector<std::function<void(nn::F::CrossEntropyOptions&)>>{
           [](auto& o) { o.weight = Tensor(); }, [](auto& o) { o.ignore_index = -100; },
           [](auto& o) { o.label_smoothing = 0; }, [](auto& o) { o.reduction = Reduction::Sum; }}) {
    nn::F::CrossEntropyOptions other = ce_opts;
    drop(other);
    expect_differs(ce(logits, target), nn::F::cross_entropy(logits, target, other), "CrossEntropyLoss option");
  }
  Tensor logp = log_softmax(logits, 1);
  nn::NLLLoss nll(nn::F::NllLossOptions{.weight = weight, .ignore_index = 3, .reduction = Reduction::Sum});
  expect_same(nll(logp, target), nn::F::nll_loss(logp, target, {.weight = weight, .ignore_index = 3,
                                                                 .reduction = Reduction::Sum}), "NLLLoss");
  expect_differs(nll(logp, target), nn::NLLLoss()(logp, target), "NLLLoss options");

  Tensor z = randn64({N, C}, 4) * 3;
  Tensor t = ops::gt(randn64({N, C}, 5), 0).to(kFloat64);
  Tensor elem_weight = tensor({1.0, 0.5, 2.0, 1.5}, kFloat64);
  Tensor pos_weight = tensor({3.0, 1.0, 0.25, 2.0}, kFloat64);
  nn::BCEWithLogitsLoss bcel(nn::BCEWithLogitsLossOptions{.weight = elem_weight, .pos_weight = pos_weight});
  expect_same(bcel(z, t), nn::F::binary_cross_entropy_with_logits(z, t, elem_weight, pos_weight), "BCEWithLogitsLoss");
  expect_differs(bcel(z, t), nn::BCEWithLogitsLoss(nn::BCEWithLogitsLossOptions{.weight = elem_weight})(z, t), "BCEWithLogitsLoss pos_weight");
  nn::BCELoss bce(nn::BCELossOptions{.weight = elem_weight, .reduction = Reduction::Sum});
  expect_same(bce(sigmoid(z), t), nn::F::binary_cross_entropy(sigmoid(z), t, elem_weight, Reduction::Sum), "BCELoss");
  expect_differs(bce(sigmoid(z), t), nn::BCELoss(nn::BCELossOptions{.reduction = Reduction::Sum})(sigmoid(z), t), "BCELoss weight");

  Tensor p = softmax(randn64({N, C}, 6), 1);
  nn::KLDivLoss kl(nn::KLDivLossOptions{.batchmean = true});
  expect_same(kl(logp, p), nn::F::kl_div(logp, p, Reduction::Mean, false, true), "KLDivLoss");
  expect_differs(kl(logp, p), nn::KLDivLoss()(logp, p), "KLDivLoss batchmean");
  nn::KLDivLoss kl_log(nn::KLDivLossOptions{.reduction = Reduction::Sum, .log_target = true});
  expect_same(kl_log(logp, log(p)), nn::F::kl_div(logp, log(p), Reduction::Sum, true), "KLDivLoss log_target");
}

TEST(LossModules, WeightsAreBuffersThatMoveConvertAndLoad) {
  Tensor weight = tensor({1.0, 2.0, 3.0}, kFloat64);
  nn::CrossEntropyLoss ce(nn::F::CrossEntropyOptions{.weight = weight});
  nn::StateDict sd = ce->state_dict();
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd.at("weight").to_vector<double>(), weight.to_vector<double>());
  EXPECT_TRUE(nn::CrossEntropyLoss()->state_dict().empty()) << "no weight, no buffer";
  nn::BCEWithLogitsLoss bcel(nn::BCEWithLogitsLossOptions{.pos_weight = tensor({2.0}, kFloat64)});
  EXPECT_EQ(bcel->state_dict().count("pos_weight"), 1u);
  EXPECT_EQ(bcel->state_dict().count("weight"), 0u);

  // to() converts the buffer in place, and the loss computes with the converted weight.
  ce->to(kFloat32);
  EXPECT_EQ(ce->options().weight.dtype(), kFloat32);
  Tensor logits = randn64({5, 3}, 7).to(kFloat32);
  Tensor target = tensor(std::vector<int64_t>{0, 1, 2, 2, 1}, {5});
  expect_same(ce(logits, target), nn::F::cross_entropy(logits, target, {.weight = weight.to(kFloat32)}),
              "CrossEntropyLoss after to(float32)");
  // load_state_dict replaces the weight the loss uses.
  Tensor other = tensor({3.0, 0.5, 1.0}, kFloat32);
  ce->load_state_dict({{"weight", other}});
  expect_same(ce(logits, target), nn::F::cross_entropy(logits, target, {.weight = other}),
              "CrossEntropyLoss after load_state_dict");
}

TEST(LossModules, PrintAndBadOptions) {
  EXPECT_EQ(nn::MSELoss()->str(), "MSELoss(reduction=mean)");
  EXPECT_EQ(nn::CrossEntropyLoss(nn::F::CrossEntropyOptions{.label_smoothing = 0.1})->str(),
            "CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1, reduction=mean)");
  EXPECT_EQ(nn::KLDivLoss(nn::KLDivLossOptions{.batchmean = true})->str(), "KLDivLoss(reduction=batchmean, log_target=false)");
  EXPECT_EQ(nn::SmoothL1Loss(nn::SmoothL1LossOptions{.reduction = Reduction::Sum, .beta = 0.5})->str(), "SmoothL1Loss(beta=0.5, reduction=sum)");
  expect_error([] { nn::HuberLoss(nn::HuberLossOptions{.delta = 0}); }, {"HuberLoss", "delta = 0", "> 0"});
  expect_error([] { nn::SmoothL1Loss(nn::SmoothL1LossOptions{.beta = -1}); }, {"SmoothL1Loss", "beta = -1"});
  expect_error([] { nn::CrossEntropyLoss(nn::F::CrossEntropyOptions{.label_smoothing = 1.5}); },
               {"CrossEntropyLoss", "label_smoothing = 1.5", "[0, 1]"});
  expect_error([] { nn::CrossEntropyLoss(nn::F::CrossEntropyOptions{.weight = ones({2, 2})}); },
               {"CrossEntropyLoss", "1-D", "(2, 2)"});
  expect_error([] { nn::KLDivLoss(nn::KLDivLossOptions{.reduction = Reduction::Sum, .batchmean = true}); }, {"KLDivLoss", "batchmean", "sum"});
  // A loss takes two inputs: its one-input forward says so.
  expect_error([] { nn::MSELoss()->Module::forward(ones({2})); }, {"MSELoss", "forward(Tensor) is not defined"});
}

TEST(LossModules, AttentionIsCalledWithQueryKeyAndValueThroughItsHolder) {
  nn::MultiheadAttention mha(8, 2);
  Tensor q = randn({3, 2, 8}), k = randn({5, 2, 8}), v = randn({5, 2, 8});  // (L, N, E)
  auto through_holder = mha(q, k, v);
  auto direct = mha->forward(q, k, v);
  EXPECT_EQ(through_holder.output.to_vector<double>(), direct.output.to_vector<double>());
}

// Options as braced lists: the holder's constructors that end in the module's Options type.
TEST(ModuleHolderOptions, BracedListsBuildTheSameModulesAsNamedOptions) {
  const Tensor input = tensor(std::vector<double>{0.0, 3.0, -1.5, 0.25}), target = zeros({4}, kFloat64);
  nn::HuberLoss braced({.delta = 2.0});
  nn::HuberLoss named(nn::HuberLossOptions{.delta = 2.0});
  EXPECT_EQ(braced(input, target).item<double>(), named(input, target).item<double>());
  EXPECT_NE(braced(input, target).item<double>(), nn::HuberLoss()(input, target).item<double>());  // delta matters here

  nn::Conv2d conv(3, 4, 3, {.stride = 2, .padding = 1});
  EXPECT_EQ(conv(zeros({1, 3, 9, 9})).sizes(), Shape({1, 4, 5, 5}));
  nn::BatchNorm2d bn(4, {.affine = false});
  EXPECT_TRUE(bn->parameters().empty());
  nn::LSTM lstm(3, 5, {.num_layers = 2, .bidirectional = true});
  EXPECT_EQ(lstm->parameters().size(), 16u);  // 2 layers x 2 directions x (w_ih, w_hh, b_ih, b_hh)
}

}  // namespace
}  // namespace kiln

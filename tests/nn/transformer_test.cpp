// The Transformer modules against their formulas written out with float64 loops (tests/nn/attention_reference.h
// for the attention; layer norms, residuals and the feed-forward blocks by hand): each layer pre- and post-norm,
// with relu and gelu, every mask kind; the stacks as their layers in turn; nn::Transformer as the encoder's
// output fed to the decoder. Gradients by gradcheck and by central differences over every parameter; PyTorch's
// state dict keys; a small Transformer learning to reverse sequences.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "nn/attention_reference.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using test::expect_error;
using test::expect_near;
using test::kInf;
using test::kNoMask;
using test::layer_norm_rows;
using test::linear_rows;
using test::MaskFn;
using test::mha_reference;
using test::plus;
using test::randn64;
using test::values;
using test::weights_of;

constexpr int64_t kD = 4, kHeads = 2, kFF = 8, kSeq = 3, kMem = 4, kBatch = 2;

// A parameter's values, or zeros of `size` when the layer has none (bias = false).
std::vector<double> values_or_zeros(const Tensor& t, int64_t size) {
  return t.defined() ? values(t) : std::vector<double>(static_cast<size_t>(size), 0.0);
}

// The pieces both layers are made of, over `rows` tokens of kD features.
struct Blocks {
  int64_t rows;
  bool gelu;
  std::vector<double> norm(nn::LayerNorm& ln, const std::vector<double>& x) const {
    return layer_norm_rows(x, rows, kD, values(ln->weight), values_or_zeros(ln->bias, kD), 1e-5);
  }
  std::vector<double> ff(nn::Linear& l1, nn::Linear& l2, const std::vector<double>& x) const {
    std::vector<double> h = linear_rows(x, rows, kD, kFF, values(l1->weight), values_or_zeros(l1->bias, kFF));
    for (double& e : h) e = gelu ? 0.5 * e * (1 + std::erf(e / std::sqrt(2.0))) : std::max(e, 0.0);
    return linear_rows(h, rows, kFF, kD, values(l2->weight), values_or_zeros(l2->bias, kD));
  }
};

// src: (kSeq, kBatch, kD) time-first and flat.
std::vector<double> encoder_reference(nn::TransformerEncoderLayerImpl& layer, const std::vector<double>& src,
                                      const MaskFn& mask) {
  const auto& o = layer.options();
  Blocks b{kSeq * kBatch, o.activation == "gelu"};
  auto sa = [&](const std::vector<double>& x) {
    return mha_reference(x, x, x, kSeq, kSeq, kBatch, kD, kHeads, weights_of(*layer.self_attn), mask).out;
  };
  auto ff = [&](const std::vector<double>& x) { return b.ff(layer.linear1, layer.linear2, x); };
  std::vector<double> x = src;
  if (o.norm_first) {
    x = plus(x, sa(b.norm(layer.norm1, x)));
    x = plus(x, ff(b.norm(layer.norm2, x)));
  } else {
    x = b.norm(layer.norm1, plus(x, sa(x)));
    x = b.norm(layer.norm2, plus(x, ff(x)));
  }
  return x;
}

// tgt: (kSeq, kBatch, kD), memory: (kMem, kBatch, kD), time-first and flat.
std::vector<double> decoder_reference(nn::TransformerDecoderLayerImpl& layer, const std::vector<double>& tgt,
                                      const std::vector<double>& memory, const MaskFn& self_mask,
                                      const MaskFn& memory_mask) {
  const auto& o = layer.options();
  Blocks b{kSeq * kBatch, o.activation == "gelu"};
  auto sa = [&](const std::vector<double>& x) {
    return mha_reference(x, x, x, kSeq, kSeq, kBatch, kD, kHeads, weights_of(*layer.self_attn), self_mask).out;
  };
  auto ca = [&](const std::vector<double>& x) {
    return mha_reference(x, memory, memory, kSeq, kMem, kBatch, kD, kHeads, weights_of(*layer.multihead_attn),
                         memory_mask)
        .out;
  };
  auto ff = [&](const std::vector<double>& x) { return b.ff(layer.linear1, layer.linear2, x); };
  std::vector<double> x = tgt;
  if (o.norm_first) {
    x = plus(x, sa(b.norm(layer.norm1, x)));
    x = plus(x, ca(b.norm(layer.norm2, x)));
    x = plus(x, ff(b.norm(layer.norm3, x)));
  } else {
    x = b.norm(layer.norm1, plus(x, sa(x)));
    x = b.norm(layer.norm2, plus(x, ca(x)));
    x = b.norm(layer.norm3, plus(x, ff(x)));
  }
  return x;
}

// Every parameter random, the norms' and biases included, so that each one shows in the output; norm weights
// around 1.
void randomize(nn::Module& m, uint64_t seed) {
  NoGradGuard no_grad;
  for (auto& [name, p] : m.named_parameters()) {
    bool norm_weight = name.find("norm") != std::string::npos && name.find("weight") != std::string::npos;
    p.copy_(randn64(p.sizes(), seed++) * 0.5 + (norm_weight ? 1.0 : 0.0));
  }
}

nn::TransformerLayerOptions layer_options(bool norm_first, const std::string& activation, bool batch_first = false) {
  nn::TransformerLayerOptions o;
  o.dim_feedforward = kFF;
  o.dropout = 0.0;
  o.norm_first = norm_first;
  o.activation = activation;
  o.batch_first = batch_first;
  return o;
}

nn::TransformerEncoderLayer make_encoder(bool norm_first, const std::string& activation, bool batch_first = false) {
  nn::TransformerEncoderLayer layer(kD, kHeads, layer_options(norm_first, activation, batch_first));
  layer->to(kFloat64);
  randomize(*layer, 200);
  return layer;
}

nn::TransformerDecoderLayer make_decoder(bool norm_first, const std::string& activation, bool batch_first = false) {
  nn::TransformerDecoderLayer layer(kD, kHeads, layer_options(norm_first, activation, batch_first));
  layer->to(kFloat64);
  randomize(*layer, 300);
  return layer;
}

// Masks used below: key padding of a (kBatch, len) batch, and the causal mask.
MaskFn padding_fn(int64_t pad0, int64_t pad1) {
  return [=](int64_t n, int64_t, int64_t, int64_t j) {
    return (n == 0 && j == pad0) || (n == 1 && j == pad1) ? -kInf : 0.0;
  };
}
Tensor padding_mask(int64_t len, int64_t pad0, int64_t pad1) {
  std::vector<bool> m(static_cast<size_t>(kBatch * len), false);
  m[pad0] = true;
  m[len + pad1] = true;
  return tensor(m, {kBatch, len});
}
const MaskFn kCausal = [](int64_t, int64_t, int64_t i, int64_t j) { return j > i ? -kInf : 0.0; };
MaskFn both(MaskFn a, MaskFn b) {
  return [=](int64_t n, int64_t h, int64_t i, int64_t j) { return a(n, h, i, j) + b(n, h, i, j); };
}

// d(loss) / d(every parameter element), by central differences, against backward.
void check_parameter_gradients(nn::Module& m, const std::function<Tensor()>& loss) {
  m.zero_grad();
  loss().backward();
  NoGradGuard no_grad;
  const double eps = 1e-6;
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<double> analytic = values(p.grad());
    double* x = p.data_ptr<double>();
    for (int64_t e = 0; e < p.numel(); ++e) {
      double saved = x[e];
      x[e] = saved + eps;
      double up = loss().item<double>();
      x[e] = saved - eps;
      double down = loss().item<double>();
      x[e] = saved;
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(analytic[e], numeric, 1e-6 + 1e-4 * std::abs(numeric)) << name << "[" << e << "]";
    }
  }
}

std::vector<std::string> parameter_names(nn::Module& m) {
  std::vector<std::string> names;
  for (auto& [name, t] : m.named_parameters()) names.push_back(name);
  return names;
}

// ---- TransformerEncoderLayer ----

TEST(TransformerEncoderLayer, PreAndPostNormMatchLoopReference) {
  Tensor src = randn64({kSeq, kBatch, kD}, 30);
  std::vector<double> sv = values(src);
  Tensor padding = padding_mask(kSeq, 2, 1);
  for (bool norm_first : {true, false})
    for (const char* act : {"relu", "gelu"}) {
      SCOPED_TRACE(std::string(norm_first ? "pre-norm " : "post-norm ") + act);
      auto layer = make_encoder(norm_first, act);
      expect_near(values(layer(src)), encoder_reference(*layer, sv, kNoMask), 1e-12, "no mask");
      expect_near(values(layer->forward(src, {}, padding)), encoder_reference(*layer, sv, padding_fn(2, 1)), 1e-12,
                  "key padding");
      // unbatched: a batch of one
      expect_near(values(layer(src.select(1, 1))), values(layer(src.narrow(1, 1, 1))), 1e-14, "unbatched");
      expect_near(values(layer->forward(src, {}, padding, /*is_causal=*/true)),
                  encoder_reference(*layer, sv, both(padding_fn(2, 1), kCausal)), 1e-12, "causal and padding");
    }
}

TEST(TransformerEncoderLayer, BatchFirstIsATranspose) {
  auto a = make_encoder(true, "relu"), b = make_encoder(true, "relu", /*batch_first=*/true);
  Tensor src = randn64({kSeq, kBatch, kD}, 31);
  Tensor padding = padding_mask(kSeq, 1, 2);
  expect_near(values(b->forward(src.transpose(0, 1), {}, padding).transpose(0, 1)),
              values(a->forward(src, {}, padding)), 1e-12, "batch_first");
}

TEST(TransformerEncoderLayer, Gradchecks) {
  Tensor padding = padding_mask(kSeq, 2, 0);
  for (bool norm_first : {true, false}) {
    SCOPED_TRACE(norm_first ? "pre-norm" : "post-norm");
    auto layer = make_encoder(norm_first, "gelu");
    Tensor src = randn64({kSeq, kBatch, kD}, 41).requires_grad_();
    gradcheck([&](const std::vector<Tensor>& in) { return layer->forward(in[0], {}, padding, true); }, {src});
    Tensor r = randn64({kSeq, kBatch, kD}, 40);
    check_parameter_gradients(*layer, [&] { return (layer->forward(src.detach(), {}, padding, true) * r).sum(); });
  }
}

TEST(TransformerEncoderLayer, PyTorchStateDictKeys) {
  nn::TransformerEncoderLayerOptions o;
  o.dim_feedforward = 32;
  nn::TransformerEncoderLayer layer(16, 4, o);
  std::vector<std::string> names = parameter_names(*layer);
  EXPECT_EQ(names, (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                             "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                             "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                             "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  EXPECT_EQ(layer->state_dict().size(), names.size());
  EXPECT_EQ(layer->linear1->weight.sizes(), (Shape{32, 16}));
  std::vector<std::string> children;
  for (auto& [name, c] : layer->named_children()) children.push_back(name);
  EXPECT_EQ(children, (std::vector<std::string>{"self_attn", "linear1", "dropout", "linear2", "norm1", "norm2",
                                                "dropout1", "dropout2"}));
  // a state dict of one loads into another
  nn::TransformerEncoderLayer other(16, 4, o);
  other->load_state_dict(layer->state_dict());
  expect_near(values(other->self_attn->in_proj_weight), values(layer->self_attn->in_proj_weight), 0, "loaded");
}

// bias = false, as PyTorch 2.1's: no bias in the attention, the linear layers or the norms.
TEST(TransformerEncoderLayer, WithoutBiasesMatchesLoopReference) {
  nn::TransformerLayerOptions o = layer_options(false, "relu");
  o.bias = false;
  nn::TransformerEncoderLayer layer(kD, kHeads, o);
  layer->to(kFloat64);
  randomize(*layer, 400);
  EXPECT_EQ(parameter_names(*layer), (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight",
                                                               "linear1.weight", "linear2.weight", "norm1.weight",
                                                               "norm2.weight"}));
  Tensor src = randn64({kSeq, kBatch, kD}, 32);
  expect_near(values(layer(src)), encoder_reference(*layer, values(src), kNoMask), 1e-12, "no biases");
  nn::LayerNorm ln(Shape{kD}, 1e-5, true, /*bias=*/false);
  EXPECT_FALSE(ln->bias.defined());
  EXPECT_EQ(ln->parameters().size(), 1u);
}

TEST(TransformerEncoderLayer, BadOptionsAreNamed) {
  expect_error([] { nn::TransformerEncoderLayer(6, 4); }, {"TransformerEncoderLayer", "d_model (6)", "nhead (4)"});
  nn::TransformerEncoderLayerOptions o;
  o.activation = "tanh";
  expect_error([&] { nn::TransformerEncoderLayer(8, 2, o); }, {"TransformerEncoderLayer", "\"tanh\"", "relu"});
  expect_error([&] { nn::TransformerDecoderLayer(8, 3); }, {"TransformerDecoderLayer", "d_model (8)", "nhead (3)"});
}

// ---- TransformerDecoderLayer ----

TEST(TransformerDecoderLayer, PreAndPostNormMatchLoopReference) {
  Tensor tgt = randn64({kSeq, kBatch, kD}, 50), memory = randn64({kMem, kBatch, kD}, 51);
  std::vector<double> tv = values(tgt), mv = values(memory);
  Tensor tgt_padding = padding_mask(kSeq, 2, 1), memory_padding = padding_mask(kMem, 0, 3);
  // an explicit (T, S) memory mask, bool: query i may not see key (i + 1) % kMem
  std::vector<bool> blocked(static_cast<size_t>(kSeq * kMem), false);
  for (int64_t i = 0; i < kSeq; ++i) blocked[i * kMem + (i + 1) % kMem] = true;
  Tensor memory_mask = tensor(blocked, {kSeq, kMem});
  MaskFn memory_mask_fn = [](int64_t, int64_t, int64_t i, int64_t j) { return j == (i + 1) % kMem ? -kInf : 0.0; };
  for (bool norm_first : {true, false})
    for (const char* act : {"relu", "gelu"}) {
      SCOPED_TRACE(std::string(norm_first ? "pre-norm " : "post-norm ") + act);
      auto layer = make_decoder(norm_first, act);
      expect_near(values(layer(tgt, memory)), decoder_reference(*layer, tv, mv, kNoMask, kNoMask), 1e-12, "no mask");
      expect_near(values(layer->forward(tgt, memory, {}, {}, tgt_padding, memory_padding, /*tgt_is_causal=*/true)),
                  decoder_reference(*layer, tv, mv, both(kCausal, padding_fn(2, 1)), padding_fn(0, 3)), 1e-12,
                  "causal, padding of both");
      Tensor causal = nn::TransformerImpl::generate_square_subsequent_mask(kSeq, kFloat64);
      expect_near(values(layer->forward(tgt, memory, causal, memory_mask)),
                  decoder_reference(*layer, tv, mv, kCausal, memory_mask_fn), 1e-12, "float and bool masks");
      expect_near(values(layer->forward(tgt, memory, {}, {}, {}, {}, false, /*memory_is_causal=*/true)),
                  decoder_reference(*layer, tv, mv, kNoMask, kCausal), 1e-12, "memory_is_causal");
      expect_near(values(layer(tgt.select(1, 0), memory.select(1, 0))),
                  values(layer(tgt.narrow(1, 0, 1), memory.narrow(1, 0, 1))), 1e-14, "unbatched");
    }
}

TEST(TransformerDecoderLayer, BatchFirstIsATranspose) {
  auto a = make_decoder(false, "gelu"), b = make_decoder(false, "gelu", /*batch_first=*/true);
  Tensor tgt = randn64({kSeq, kBatch, kD}, 52), memory = randn64({kMem, kBatch, kD}, 53);
  Tensor padding = padding_mask(kMem, 1, 2);
  expect_near(values(b->forward(tgt.transpose(0, 1), memory.transpose(0, 1), {}, {}, {}, padding, true)
                         .transpose(0, 1)),
              values(a->forward(tgt, memory, {}, {}, {}, padding, true)), 1e-12, "batch_first");
}

TEST(TransformerDecoderLayer, Gradchecks) {
  Tensor padding = padding_mask(kMem, 3, 1);
  Tensor memory_mask = tensor(std::vector<bool>{false, true, false, false, false, false, true, false, false, false,
                                                false, true},
                              {kSeq, kMem});
  for (bool norm_first : {true, false}) {
    SCOPED_TRACE(norm_first ? "pre-norm" : "post-norm");
    auto layer = make_decoder(norm_first, "gelu");
    Tensor tgt = randn64({kSeq, kBatch, kD}, 54).requires_grad_();
    Tensor memory = randn64({kMem, kBatch, kD}, 55).requires_grad_();
    auto run = [&](const Tensor& t, const Tensor& m) {
      return layer->forward(t, m, {}, memory_mask, {}, padding, /*tgt_is_causal=*/true);
    };
    gradcheck([&](const std::vector<Tensor>& in) { return run(in[0], in[1]); }, {tgt, memory});
    Tensor r = randn64({kSeq, kBatch, kD}, 56);
    check_parameter_gradients(*layer, [&] { return (run(tgt.detach(), memory.detach()) * r).sum(); });
  }
}

TEST(TransformerDecoderLayer, PyTorchStateDictKeys) {
  nn::TransformerDecoderLayer layer(16, 4, {.dim_feedforward = 32});
  std::vector<std::string> want;
  for (const char* attn : {"self_attn", "multihead_attn"})
    for (const char* p : {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"})
      want.push_back(std::string(attn) + "." + p);
  for (const char* p : {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                        "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"})
    want.push_back(p);
  EXPECT_EQ(parameter_names(*layer), want);
  EXPECT_EQ(layer->linear2->weight.sizes(), (Shape{16, 32}));
  expect_error([&] { layer(randn64({3, 2, 16}, 1).to(kFloat32), Tensor()); },
               {"TransformerDecoderLayer", "memory"});
}

// ---- the stacks ----

TEST(TransformerEncoder, StartsAsCopiesAndRunsItsLayersThenTheNorm) {
  auto layer = make_encoder(false, "relu");
  layer->self_attn->in_proj_weight.requires_grad_(false);
  nn::LayerNorm norm(Shape{kD});
  norm->to(kFloat64);
  nn::TransformerEncoder encoder(layer, 3, norm);
  // copies: equal values, their own storage, the same dtype and requires_grad flags
  ASSERT_EQ(encoder->layers->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    auto& copy = encoder->layer(i);
    EXPECT_NE(copy.linear1->weight.data_ptr<double>(), layer->linear1->weight.data_ptr<double>());
    expect_near(values(copy.linear1->weight), values(layer->linear1->weight), 0, "copied");
    EXPECT_FALSE(copy.self_attn->in_proj_weight.requires_grad());
    EXPECT_TRUE(copy.linear1->weight.requires_grad());
  }
  std::vector<std::string> names = parameter_names(*encoder);
  EXPECT_EQ(names.front(), "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[names.size() - 3], "layers.2.norm2.bias");
  EXPECT_EQ(names.back(), "norm.bias");
  // then made different: the stack is each layer in turn, then the norm
  randomize(*encoder, 500);
  Tensor src = randn64({kSeq, kBatch, kD}, 60);
  Tensor padding = padding_mask(kSeq, 0, 2);
  std::vector<double> x = values(src);
  for (size_t i = 0; i < 3; ++i) x = encoder_reference(encoder->layer(i), x, both(kCausal, padding_fn(0, 2)));
  x = layer_norm_rows(x, kSeq * kBatch, kD, values(encoder->norm->weight), values(encoder->norm->bias), 1e-5);
  expect_near(values(encoder->forward(src, {}, padding, true)), x, 1e-12, "stack");
  // no norm: none registered
  nn::TransformerEncoder bare(layer, 2);
  EXPECT_TRUE(bare->norm.is_empty());
  EXPECT_EQ(bare->named_children().size(), 1u);
  expect_error([&] { nn::TransformerEncoder(layer, 0); }, {"TransformerEncoder", "num_layers", "0"});
}

TEST(TransformerDecoder, RunsItsLayersOverOneMemoryThenTheNorm) {
  auto layer = make_decoder(true, "gelu");
  nn::TransformerDecoder decoder(layer, 2, nn::LayerNorm(Shape{kD}));
  decoder->to(kFloat64);
  randomize(*decoder, 600);
  Tensor tgt = randn64({kSeq, kBatch, kD}, 61), memory = randn64({kMem, kBatch, kD}, 62);
  Tensor padding = padding_mask(kMem, 2, 2);
  std::vector<double> x = values(tgt), mv = values(memory);
  for (size_t i = 0; i < 2; ++i) x = decoder_reference(decoder->layer(i), x, mv, kCausal, padding_fn(2, 2));
  x = layer_norm_rows(x, kSeq * kBatch, kD, values(decoder->norm->weight), values(decoder->norm->bias), 1e-5);
  expect_near(values(decoder->forward(tgt, memory, {}, {}, {}, padding, true)), x, 1e-12, "stack");
  EXPECT_EQ(parameter_names(*decoder)[4], "layers.0.multihead_attn.in_proj_weight");
}

// ---- Transformer ----

nn::TransformerOptions small_transformer() {
  nn::TransformerOptions o;
  o.d_model = kD;
  o.nhead = kHeads;
  o.num_encoder_layers = 2;
  o.num_decoder_layers = 1;
  o.layer = layer_options(false, "relu");
  return o;
}

TEST(Transformer, IsTheDecoderOverTheEncodersOutput) {
  nn::Transformer model(small_transformer());
  model->to(kFloat64);
  // Xavier-initialized after the copies, so the two encoder layers differ
  EXPECT_GT(amax(abs(model->encoder->layer(0).linear1->weight - model->encoder->layer(1).linear1->weight))
                .item<double>(),
            0.01);
  randomize(*model, 700);
  Tensor src = randn64({kMem, kBatch, kD}, 70), tgt = randn64({kSeq, kBatch, kD}, 71);
  Tensor src_padding = padding_mask(kMem, 3, 0), tgt_padding = padding_mask(kSeq, 1, 2);
  std::vector<double> memory = values(src);
  for (size_t i = 0; i < 2; ++i) {
    auto& l = model->encoder->layer(i);
    // the encoder reference's sizes are kSeq tokens: run the memory's kMem tokens through the same math
    Blocks b{kMem * kBatch, false};
    auto w = weights_of(*l.self_attn);
    memory = b.norm(l.norm1, plus(memory, mha_reference(memory, memory, memory, kMem, kMem, kBatch, kD, kHeads, w,
                                                        padding_fn(3, 0))
                                               .out));
    memory = b.norm(l.norm2, plus(memory, b.ff(l.linear1, l.linear2, memory)));
  }
  memory = layer_norm_rows(memory, kMem * kBatch, kD, values(model->encoder->norm->weight),
                           values(model->encoder->norm->bias), 1e-5);
  std::vector<double> y = decoder_reference(model->decoder->layer(0), values(tgt), memory,
                                            both(kCausal, padding_fn(1, 2)), padding_fn(3, 0));
  y = layer_norm_rows(y, kSeq * kBatch, kD, values(model->decoder->norm->weight), values(model->decoder->norm->bias),
                      1e-5);
  Tensor causal = nn::TransformerImpl::generate_square_subsequent_mask(kSeq, kFloat64);
  Tensor out = model->forward(src, tgt, {}, causal, {}, src_padding, tgt_padding, src_padding);
  expect_near(values(out), y, 1e-12, "transformer");
}

TEST(Transformer, PyTorchKeysMaskAndErrors) {
  nn::Transformer model(small_transformer());
  std::vector<std::string> names = parameter_names(*model);
  // 2 encoder layers of 12, a norm of 2, 1 decoder layer of 18, a norm of 2
  EXPECT_EQ(names.size(), 2u * 12 + 2 + 18 + 2);
  EXPECT_EQ(names.front(), "encoder.layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[2 * 12], "encoder.norm.weight");
  EXPECT_EQ(names[2 * 12 + 2 + 4], "decoder.layers.0.multihead_attn.in_proj_weight");
  EXPECT_EQ(names.back(), "decoder.norm.bias");

  Tensor mask = nn::TransformerImpl::generate_square_subsequent_mask(3);
  EXPECT_EQ(mask.dtype(), kFloat32);
  std::vector<double> want{0, -kInf, -kInf, 0, 0, -kInf, 0, 0, 0};
  EXPECT_EQ(values(mask), want);

  Tensor src = randn64({5, 2, kD}, 1).to(kFloat32);
  expect_error([&] { model(src, randn64({3, 3, kD}, 2).to(kFloat32)); }, {"Transformer", "batch size", "(3, 3, 4)"});
  expect_error([&] { model(src, randn64({3, 2, 6}, 2).to(kFloat32)); }, {"Transformer", "d_model = 4", "(3, 2, 6)"});
  expect_error([&] { model(src, randn64({3, kD}, 2).to(kFloat32)); }, {"Transformer", "both be batched", "(3, 4)"});
  nn::TransformerOptions none = small_transformer();
  none.num_decoder_layers = 0;
  expect_error([&] { nn::Transformer{none}; }, {"Transformer", "num_decoder_layers", "positive"});
}

// A Transformer that reads a sequence of tokens and writes it reversed, trained with teacher forcing: the
// decoder sees <start> and the answer so far under the causal mask. It has to learn attention over the memory
// by position, which neither stack alone can do.
TEST(Transformer, LearnsToReverseSequences) {
  constexpr int64_t kVocab = 6, kLen = 5, kExamples = 32, kModel = 32, kStart = kVocab;
  Generator g(7);
  nn::TransformerOptions o;
  o.d_model = kModel;
  o.nhead = 4;
  o.num_encoder_layers = 1;
  o.num_decoder_layers = 1;
  o.layer.dim_feedforward = 64;
  o.layer.dropout = 0.0;
  o.layer.batch_first = true;
  nn::Transformer model(o);
  nn::Embedding embed(kVocab + 1, kModel);  // tokens and <start>
  Tensor positions = randn({kLen, kModel}, kFloat32, &g).requires_grad_();
  nn::Linear head(kModel, kVocab);
  std::vector<Tensor> params = model->parameters();
  for (auto* m : std::initializer_list<nn::Module*>{embed.ptr().get(), head.ptr().get()})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  params.push_back(positions);
  optim::Adam opt(params, {.lr = 3e-3});
  Tensor causal = nn::TransformerImpl::generate_square_subsequent_mask(kLen);
  auto run = [&](const Tensor& src) {
    Tensor target = flip(src, {1});
    Tensor start = full({kExamples, 1}, kStart, kInt64);
    Tensor shifted = cat({start, target.narrow(1, 0, kLen - 1)}, 1);  // the decoder's input
    Tensor out = model->forward(embed(src) + positions, embed(shifted) + positions, {}, causal);
    Tensor logits = head(out);
    Tensor loss = nn::functional::cross_entropy(logits.reshape({kExamples * kLen, kVocab}), target.reshape({-1}));
    double accuracy = (logits.argmax(-1) == target).to(kFloat64).mean().item<double>();
    return std::make_pair(loss, accuracy);
  };
  double first = 0, accuracy = 0;
  for (int step = 0; step < 150; ++step) {
    Tensor src = randint(0, kVocab, {kExamples, kLen}, kInt64, &g);
    auto [loss, acc] = run(src);
    if (step == 0) first = loss.item<double>();
    opt.zero_grad();
    loss.backward();
    opt.step();
    accuracy = acc;
  }
  model->eval();
  NoGradGuard no_grad;
  Tensor src = randint(0, kVocab, {kExamples, kLen}, kInt64, &g);
  auto [loss, held_out] = run(src);
  EXPECT_GT(first, 1.5);  // about log(6) at the start
  EXPECT_LT(loss.item<double>(), 0.2) << "training accuracy " << accuracy;
  EXPECT_GT(held_out, 0.95);
  // Greedy decoding, one token at a time from <start>: right only if training never let a position see the
  // token it predicts (the causal mask), since here the answer is not there to see.
  Tensor memory = model->encoder->forward(embed(src) + positions);
  Tensor written = full({kExamples, 1}, kStart, kInt64);
  for (int64_t i = 0; i < kLen; ++i) {
    Tensor out = model->decoder->forward(embed(written) + positions.narrow(0, 0, i + 1), memory,
                                         nn::TransformerImpl::generate_square_subsequent_mask(i + 1));
    Tensor next = head(out.select(1, i)).argmax(-1).reshape({kExamples, 1});
    written = cat({written, next}, 1);
  }
  double decoded = (written.narrow(1, 1, kLen) == flip(src, {1})).to(kFloat64).mean().item<double>();
  EXPECT_GT(decoded, 0.95);
}

}  // namespace
}  // namespace kiln

// Linear, Bilinear, Embedding, EmbeddingBag, Identity, Flatten, Unflatten.
#pragma once

#include <optional>

#include "kiln/nn/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// y = x W^T + b. x: (..., in_features) -> (..., out_features); weight: (out, in), bias: (out).
// Initialized as PyTorch's: W and b uniform in +-1/sqrt(in_features).
class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();
  Tensor weight, bias;

 private:
  int64_t in_features_, out_features_;
};
using Linear = ModuleHolder<LinearImpl>;

// y[o] = x1 W[o] x2 + b[o]. x1 (..., in1), x2 (..., in2) -> (..., out); weight (out, in1, in2), bias (out).
// Initialized as PyTorch's: uniform in +-1/sqrt(in1). Called with both inputs: bilinear(x1, x2).
class BilinearImpl : public Module {
 public:
  BilinearImpl(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x1, const Tensor& x2) { return functional::bilinear(x1, x2, weight, bias); }
  std::string extra_repr() const override;
  Tensor weight, bias;
};
using Bilinear = ModuleHolder<BilinearImpl>;

struct EmbeddingOptions {
  // This row starts at zero and gets no gradient (a sequence's padding token); negative counts from the end.
  std::optional<int64_t> padding_idx;
  // Each looked-up row whose norm_type-norm exceeds this is scaled down to it in place first (F::embedding).
  std::optional<double> max_norm;
  double norm_type = 2.0;
  // Each row's gradient divided by how many times the batch's indices name it (word frequencies).
  bool scale_grad_by_freq = false;
};

// A table of num_embeddings vectors of size dim; indices (any shape, int64) -> (*indices.shape, dim).
// Initialized from N(0, 1), as PyTorch's.
class EmbeddingImpl : public Module {
 public:
  using Options = EmbeddingOptions;  // ModuleHolder takes it as a braced list
  EmbeddingImpl(int64_t num_embeddings, int64_t dim, EmbeddingOptions options = {});
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  Tensor weight;

 private:
  EmbeddingOptions options_;
};
using Embedding = ModuleHolder<EmbeddingImpl>;

using EmbeddingBagOptions = functional::EmbeddingBagOptions;

// An Embedding whose lookups come in bags, each reduced to one vector (functional::embedding_bag): called with a
// (B, L) input, or 1-d indices and offsets, and optionally per-sample weights. Initialized as Embedding, the
// padding_idx row zero.
class EmbeddingBagImpl : public Module {
 public:
  using Options = EmbeddingBagOptions;  // ModuleHolder takes it as a braced list
  EmbeddingBagImpl(int64_t num_embeddings, int64_t dim, EmbeddingBagOptions options = {});
  Tensor forward(const Tensor& input) override { return forward(input, {}); }
  Tensor forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights = {}) {
    return functional::embedding_bag(input, weight, offsets, options_, per_sample_weights);
  }
  std::string extra_repr() const override;
  Tensor weight;

 private:
  EmbeddingBagOptions options_;
};
using EmbeddingBag = ModuleHolder<EmbeddingBagImpl>;

class IdentityImpl : public Module {
 public:
  IdentityImpl() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};
using Identity = ModuleHolder<IdentityImpl>;

// Flattens dims start_dim..end_dim (by default all but the batch dim).
class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim_, end_dim_); }
  std::string extra_repr() const override;

 private:
  int64_t start_dim_, end_dim_;
};
using Flatten = ModuleHolder<FlattenImpl>;

// Splits dim into sizes (whose product is its size; one of them may be -1): Flatten's inverse.
class UnflattenImpl : public Module {
 public:
  UnflattenImpl(int64_t dim, IntArrayRef sizes) : Module("Unflatten"), dim_(dim), sizes_(sizes.vec()) {}
  Tensor forward(const Tensor& x) override { return x.unflatten(dim_, sizes_); }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
  Shape sizes_;
};
using Unflatten = ModuleHolder<UnflattenImpl>;

}  // namespace kiln::nn

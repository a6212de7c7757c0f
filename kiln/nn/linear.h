// Linear, Embedding, Identity, Flatten, Unflatten.
#pragma once

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

// A table of num_embeddings vectors of size dim; indices (any shape, int64) -> (*indices.shape, dim).
// Initialized from N(0, 1), as PyTorch's.
class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim);
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  Tensor weight;
};
using Embedding = ModuleHolder<EmbeddingImpl>;

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

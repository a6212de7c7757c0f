#include "kiln/nn/linear.h"

#include <cmath>
#include <optional>
#include <string>

#include "kiln/nn/functional.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  KILN_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be positive, got ",
             in_features, " and ", out_features);
  register_parameter("weight", weight, empty({out_features, in_features}));
  if (with_bias) register_parameter("bias", bias, empty({out_features}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  // kaiming_uniform with a = sqrt(5) is PyTorch's default for Linear: bound 1/sqrt(in_features).
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features_));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& x) { return functional::linear(x, weight, bias); }

std::string LinearImpl::extra_repr() const {
  return detail::concat("in_features=", in_features_, ", out_features=", out_features_,
                        ", bias=", bias.defined() ? "true" : "false");
}

BilinearImpl::BilinearImpl(int64_t in1_features, int64_t in2_features, int64_t out_features, bool with_bias)
    : Module("Bilinear") {
  KILN_CHECK(in1_features > 0 && in2_features > 0 && out_features > 0, "Bilinear: sizes must be positive, got ",
             in1_features, ", ", in2_features, " and ", out_features);
  register_parameter("weight", weight, empty({out_features, in1_features, in2_features}));
  if (with_bias) register_parameter("bias", bias, empty({out_features}));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in1_features));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

std::string BilinearImpl::extra_repr() const {
  return detail::concat("in1_features=", weight.size(1), ", in2_features=", weight.size(2),
                        ", out_features=", weight.size(0), ", bias=", bias.defined() ? "true" : "false");
}

namespace {
// A table initialized from N(0, 1), its padding row (if any, negative counting from the end) zero.
// Registered as m's "weight", bound to the member `weight`.
void embedding_table(Module& m, Tensor& weight, const char* layer, int64_t num_embeddings, int64_t dim,
                     std::optional<int64_t>* padding_idx) {
  KILN_CHECK(num_embeddings > 0 && dim > 0, layer, ": sizes must be positive, got ", num_embeddings, " and ", dim);
  if (*padding_idx) {
    const int64_t p = **padding_idx;
    KILN_CHECK(p >= -num_embeddings && p < num_embeddings, layer, ": padding_idx ", p, " is outside the ",
               num_embeddings, " embeddings");
    *padding_idx = p < 0 ? p + num_embeddings : p;
  }
  m.register_parameter("weight", weight, empty({num_embeddings, dim}));
  init::normal_(weight);
  if (*padding_idx) {
    NoGradGuard no_grad;
    weight.narrow(0, **padding_idx, 1).zero_();
  }
}
}  // namespace

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim, EmbeddingOptions options)
    : Module("Embedding"), options_(options) {
  embedding_table(*this, weight, "Embedding", num_embeddings, dim, &options_.padding_idx);
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return functional::embedding(indices, weight, options_.padding_idx, options_.max_norm, options_.norm_type,
                               options_.scale_grad_by_freq);
}

namespace {
// ", max_norm=1.5, norm_type=1" as PyTorch prints them: each only when set (norm_type when not 2).
std::string norm_repr(std::optional<double> max_norm, double norm_type) {
  return detail::concat(max_norm ? detail::concat(", max_norm=", *max_norm) : "",
                        norm_type != 2.0 ? detail::concat(", norm_type=", norm_type) : "");
}
}  // namespace

std::string EmbeddingImpl::extra_repr() const {
  return detail::concat(weight.size(0), ", ", weight.size(1),
                        options_.padding_idx ? ", padding_idx=" + std::to_string(*options_.padding_idx) : "",
                        norm_repr(options_.max_norm, options_.norm_type),
                        options_.scale_grad_by_freq ? ", scale_grad_by_freq=true" : "");
}

EmbeddingBagImpl::EmbeddingBagImpl(int64_t num_embeddings, int64_t dim, EmbeddingBagOptions options)
    : Module("EmbeddingBag"), options_(options) {
  embedding_table(*this, weight, "EmbeddingBag", num_embeddings, dim, &options_.padding_idx);
}

std::string EmbeddingBagImpl::extra_repr() const {
  const auto& o = options_;
  const char* mode = o.mode == functional::BagMode::Sum ? "sum" : o.mode == functional::BagMode::Mean ? "mean" : "max";
  return detail::concat(weight.size(0), ", ", weight.size(1), norm_repr(o.max_norm, o.norm_type),
                        o.scale_grad_by_freq ? ", scale_grad_by_freq=true" : "", ", mode='", mode, "'",
                        o.include_last_offset ? ", include_last_offset=true" : "",
                        o.padding_idx ? ", padding_idx=" + std::to_string(*o.padding_idx) : "");
}

std::string FlattenImpl::extra_repr() const { return detail::concat("start_dim=", start_dim_, ", end_dim=", end_dim_); }
std::string UnflattenImpl::extra_repr() const {
  return detail::concat("dim=", dim_, ", unflattened_size=", shape_str(sizes_));
}

}  // namespace kiln::nn

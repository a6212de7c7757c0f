#include "kiln/nn/reparametrize.h"

#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/nn/functional.h"
#include "kiln/tensor/factories.h"

namespace kiln::nn {

namespace {

Tensor own_parameter(const Module& m, const std::string& name, const char* fn) {
  for (auto& [n, p] : m.named_parameters(false))
    if (n == name) return p;
  detail::throw_error(detail::concat(fn, ": ", m.type_name(), " has no parameter \"", name, "\""));
}

// Checks that name can be reparametrized by fn and that dim, when given, is a dim of the weight; returns the
// weight. no_dim: what leaving dim out means to fn, for the error.
Tensor check_reparametrizable(const Module& m, const std::string& name, std::optional<int64_t> dim, const char* fn,
                              const char* no_dim) {
  KILN_CHECK(!m.parametrization(name), fn, ": \"", name, "\" of ", m.type_name(),
             " is reparametrized already (remove that first)");
  Tensor weight = own_parameter(m, name, fn);
  KILN_CHECK(m.bound_member(name), fn, ": ", m.type_name(), " does not read \"", name,
             "\" through a bound member, so it cannot be reparametrized (register it with "
             "register_parameter(name, member, value))");
  KILN_CHECK(weight.is_floating_point(), fn, ": \"", name, "\" of ", m.type_name(), " is ", weight.dtype(),
             "; expected a floating tensor");
  if (dim) {
    // PyTorch's weight_norm reads dim -1 as "the whole tensor", not as the last dim: refused rather than guessed.
    KILN_CHECK(*dim >= 0 && *dim < weight.dim(), fn, ": dim ", *dim, " is not a dim of \"", name, "\" ",
               shape_str(weight.sizes()), " (expected 0 to ", weight.dim() - 1, ", or no dim for ", no_dim,
               "; negative dims are refused)");
  }
  return weight;
}

// ||v|| over every dim but dim, kept as size 1; over all of v (0-dim) without one.
Tensor norm_except_dim(const Tensor& v, std::optional<int64_t> dim) {
  if (!dim) return norm(v);
  std::vector<int64_t> others;
  for (int64_t d = 0; d < v.dim(); ++d)
    if (d != *dim) others.push_back(d);
  if (others.empty()) return abs(v);  // a 1-d weight along its only dim: each element's magnitude
  return norm(v, 2.0, others, /*keepdim=*/true);
}

class WeightNorm final : public Module::Parametrization {
 public:
  WeightNorm(Tensor g, Tensor v, std::optional<int64_t> dim) : g_(std::move(g)), v_(std::move(v)), dim_(dim) {}
  Tensor compute(Module&) override { return v_ * (g_ / norm_except_dim(v_, dim_)); }

 private:
  // The registered tensors themselves: Module::to and load_state_dict change them in place.
  Tensor g_, v_;
  std::optional<int64_t> dim_;
};

class SpectralNorm final : public Module::Parametrization {
 public:
  SpectralNorm(Tensor weight, Tensor u, Tensor v, int64_t iterations, double eps, int64_t dim)
      : weight_(std::move(weight)), u_(std::move(u)), v_(std::move(v)), iterations_(iterations), eps_(eps),
        dim_(dim) {}

  // The weight as a (size(dim), rest) matrix.
  Tensor matrix() const {
    Tensor w = weight_;
    if (dim_ != 0) {
      std::vector<int64_t> order{dim_};
      for (int64_t d = 0; d < w.dim(); ++d)
        if (d != dim_) order.push_back(d);
      w = w.permute(order);
    }
    return w.reshape({w.size(0), -1});
  }

  Tensor compute(Module& m) override { return weight(m.is_training()); }

  Tensor weight(bool power_iterate) {
    const Tensor mat = matrix();
    Tensor u = u_, v = v_;
    if (power_iterate) {
      {
        NoGradGuard no_grad;
        for (int64_t i = 0; i < iterations_; ++i) {
          v_.copy_(functional::normalize(mat.transpose(0, 1).matmul(u_), 2.0, 0, eps_));
          u_.copy_(functional::normalize(mat.matmul(v_), 2.0, 0, eps_));
        }
      }
      // The graph keeps copies: the next call's iteration changes the buffers in place.
      u = u_.clone();
      v = v_.clone();
    }
    const Tensor sigma = (u * mat.matmul(v)).sum();
    return weight_ / sigma;
  }

 private:
  Tensor weight_, u_, v_;
  int64_t iterations_;
  double eps_;
  int64_t dim_;
};

// Ends a reparametrization of name: `weight` becomes its plain parameter again (the bound member follows it),
// and the parameters and buffers it was computed from go.
void restore_plain(Module& m, const std::string& name, const Tensor& weight, std::initializer_list<const char*> params,
                   std::initializer_list<const char*> buffers) {
  m.remove_parametrization(name);
  for (const char* suffix : params) m.remove_parameter(name + suffix);
  for (const char* suffix : buffers) m.remove_buffer(name + suffix);
  m.register_parameter(name, weight.detach());
}

}  // namespace

void weight_norm(Module& module, const std::string& name, std::optional<int64_t> dim) {
  const Tensor weight = check_reparametrizable(module, name, dim, "weight_norm", "the whole tensor");
  Tensor g;
  {
    NoGradGuard no_grad;
    g = norm_except_dim(weight, dim);
  }
  module.remove_parameter(name);
  Tensor registered_g = module.register_parameter(name + "_g", g);
  Tensor registered_v = module.register_parameter(name + "_v", weight.detach());
  auto p = std::make_shared<WeightNorm>(registered_g, registered_v, dim);
  *module.bound_member(name) = p->compute(module);
  module.register_parametrization(name, std::move(p));
}

void remove_weight_norm(Module& module, const std::string& name) {
  auto* p = dynamic_cast<WeightNorm*>(module.parametrization(name));
  KILN_CHECK(p, "remove_weight_norm: \"", name, "\" of ", module.type_name(), " has no weight_norm");
  NoGradGuard no_grad;
  restore_plain(module, name, p->compute(module), {"_g", "_v"}, {});
}

void spectral_norm(Module& module, const std::string& name, int64_t n_power_iterations, double eps,
                   std::optional<int64_t> dim) {
  KILN_CHECK(n_power_iterations > 0, "spectral_norm: n_power_iterations must be positive, got ",
             n_power_iterations);
  KILN_CHECK(eps >= 0, "spectral_norm: eps must not be negative, got ", eps);
  const std::string& type = module.type_name();
  if (!dim) dim = type.starts_with("ConvTranspose") ? 1 : 0;
  const Tensor weight = check_reparametrizable(module, name, dim, "spectral_norm",
                                               "the default (1 for transposed convolutions, else 0)");
  const int64_t h = weight.size(*dim), w = weight.numel() / h;
  Tensor u, v;
  {
    NoGradGuard no_grad;
    const TensorOptions like = TensorOptions(weight.dtype()).device(weight.device());
    u = functional::normalize(randn({h}, like), 2.0, 0, eps);
    v = functional::normalize(randn({w}, like), 2.0, 0, eps);
  }
  module.remove_parameter(name);
  Tensor orig = module.register_parameter(name + "_orig", weight);
  module.register_buffer(name + "_u", u);
  module.register_buffer(name + "_v", v);
  // As PyTorch, the layer reads the weight as it was until its first call, which normalizes it.
  *module.bound_member(name) = weight.detach();
  module.register_parametrization(name, std::make_shared<SpectralNorm>(orig, u, v, n_power_iterations, eps, *dim));
}

void remove_spectral_norm(Module& module, const std::string& name) {
  auto* p = dynamic_cast<SpectralNorm*>(module.parametrization(name));
  KILN_CHECK(p, "remove_spectral_norm: \"", name, "\" of ", module.type_name(), " has no spectral_norm");
  NoGradGuard no_grad;
  restore_plain(module, name, p->weight(false), {"_orig"}, {"_u", "_v"});
}

StateDict from_pytorch_parametrizations(const StateDict& state) {
  static const std::string kMark = "parametrizations.";
  StateDict out;
  for (const auto& [key, value] : state) {
    const size_t at = key.rfind(kMark);
    if (at == std::string::npos || (at > 0 && key[at - 1] != '.')) {
      KILN_CHECK(out.emplace(key, value).second, "from_pytorch_parametrizations: two keys become \"", key, "\"");
      continue;
    }
    const std::string prefix = key.substr(0, at), rest = key.substr(at + kMark.size());  // "<name>.<entry>"
    const size_t dot = rest.find('.');
    const std::string name = rest.substr(0, dot), entry = dot == std::string::npos ? "" : rest.substr(dot + 1);
    std::string suffix;
    if (entry == "original0") suffix = "_g";
    else if (entry == "original1" || entry == "0._v") suffix = "_v";
    else if (entry == "original") suffix = "_orig";
    else if (entry == "0._u") suffix = "_u";
    KILN_CHECK(!name.empty() && !suffix.empty(), "from_pytorch_parametrizations: \"", key, "\" is not a weight_norm "
               "(original0, original1) or spectral_norm (original, 0._u, 0._v) entry");
    KILN_CHECK(out.emplace(prefix + name + suffix, value).second, "from_pytorch_parametrizations: two keys become \"",
               prefix + name + suffix, "\"");
  }
  return out;
}

}  // namespace kiln::nn

// Weight reparametrizations, as torch.nn.utils.weight_norm and spectral_norm: a layer's weight is replaced by
// other parameters and recomputed from them before every call of the layer.
//
//   nn::Conv1d conv(80, 256, 7);
//   nn::weight_norm(*conv);      // parameters: bias, weight_g (256, 1, 1), weight_v (256, 80, 7)
//   nn::Linear critic(512, 1);
//   nn::spectral_norm(*critic);  // parameter weight_orig; buffers weight_u (1), weight_v (512)
//
// The names and the order of the parameters are PyTorch's (the replaced weight's entries go last), so the
// state dicts of models trained with them there (vocoders, GAN discriminators) load as they are. Apply them
// before building the optimizer, which must see the new parameters, and call the layer (layer(x)), not
// layer->forward(x), which skips the recomputation as it skips PyTorch's hooks. Any layer whose forward reads the weight
// through a bound member works (every built-in layer; see Module::register_parameter).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/module.h"

namespace kiln::nn {

// weight = g v / ||v||: direction and length trained apart (Salimans and Kingma, 2016). ||v|| is taken over
// every dim but `dim`, so g has the weight's size along dim and 1 elsewhere; dim nullopt takes it over the
// whole weight and g is a scalar. Registers name_g and name_v (v starts as the weight, g as its norm, so the
// layer computes what it did) and removes name.
void weight_norm(Module& module, const std::string& name = "weight", std::optional<int64_t> dim = 0);
// Makes name a plain parameter again, holding g v / ||v||.
void remove_weight_norm(Module& module, const std::string& name = "weight");

// weight = W / sigma(W), sigma the largest singular value of W as a (size(dim), rest) matrix, estimated by
// power iteration (Miyato et al., 2018): in training, each call runs n_power_iterations steps, updating the
// buffers name_u and name_v in place without gradient; in eval it uses them as they are. dim nullopt: 1 for the
// transposed convolutions (their output channels), 0 otherwise. Registers name_orig (the weight itself) and
// the buffers, which start as random unit vectors from kiln's generator, and removes name.
void spectral_norm(Module& module, const std::string& name = "weight", int64_t n_power_iterations = 1,
                   double eps = 1e-12, std::optional<int64_t> dim = std::nullopt);
// Makes name a plain parameter again, holding W / sigma with the current u and v (no further iteration).
void remove_spectral_norm(Module& module, const std::string& name = "weight");

// A state dict saved from PyTorch 2's torch.nn.utils.parametrizations.weight_norm / spectral_norm, renamed to
// the names above, so it loads into a kiln model with nn::weight_norm / nn::spectral_norm applied:
//   <p>parametrizations.<name>.original0 -> <p><name>_g      (weight_norm)
//   <p>parametrizations.<name>.original1 -> <p><name>_v
//   <p>parametrizations.<name>.original  -> <p><name>_orig   (spectral_norm)
//   <p>parametrizations.<name>.0._u      -> <p><name>_u
//   <p>parametrizations.<name>.0._v      -> <p><name>_v
// Other keys pass unchanged. A parametrizations entry of any other form is an error naming it (a
// parametrization kiln does not have).
StateDict from_pytorch_parametrizations(const StateDict& state);

}  // namespace kiln::nn

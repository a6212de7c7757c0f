// Custom functions: a new op with a forward and a backward written by the user (a fused kernel, a
// numerically careful formula), joining the graph like a built-in op.
//
//   struct ScaledTanh : kiln::autograd::Function<ScaledTanh> {
//     // Any arguments; the Tensor ones (and std::vector<Tensor> ones) are the op's inputs.
//     static Tensor forward(AutogradContext* ctx, const Tensor& x, double scale) {
//       Tensor y = (x * scale).tanh();          // runs with grad off: only this op is recorded
//       ctx->save_for_backward({y});
//       ctx->saved_data["scale"] = scale;
//       return y;
//     }
//     // One gradient per output in, one per Tensor input out (or one per forward argument, undefined for
//     // the non-Tensor ones, as PyTorch's C++ API has it). An undefined gradient means zero.
//     static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> grads) {
//       Tensor y = ctx->get_saved_variables()[0];
//       double scale = std::any_cast<double>(ctx->saved_data["scale"]);
//       return {grads[0] * (1 - y * y) * scale};
//     }
//   };
//   Tensor y = ScaledTanh::apply(x, 2.0);
//
// forward may return a Tensor or a std::vector<Tensor>. Check a new function with gradcheck (gradcheck.h).
#pragma once

#include <any>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/meta.h"
#include "kiln/autograd/node.h"
#include "kiln/tensor/views.h"

namespace kiln::autograd {

class AutogradContext {
 public:
  // Tensors backward needs; checked against in-place changes when backward reads them.
  void save_for_backward(std::vector<Tensor> tensors) { to_save_ = std::move(tensors); }
  std::vector<Tensor> get_saved_variables() const;
  // Anything else backward needs.
  std::unordered_map<std::string, std::any> saved_data;
  // Whether input i (counting Tensor inputs) needs a gradient: backward may skip the others.
  bool needs_input_grad(size_t i) const { return node_ && node_->needs_input_grad(i); }
  // Outputs that have no gradient (indices, masks): they do not require grad.
  void mark_non_differentiable(const std::vector<Tensor>& outputs) { non_differentiable_ = outputs; }

 private:
  template <class T>
  friend struct Function;
  template <class T>
  friend class CustomNode;
  std::vector<Tensor> to_save_;
  std::vector<SavedTensor> saved_;
  std::vector<Tensor> non_differentiable_;
  const Node* node_ = nullptr;
};

// The node of a custom function: calls T::backward.
template <class T>
class CustomNode final : public Node {
 public:
  CustomNode() : Node(name_of()) {}
  TensorList apply(TensorList&& grads) override {
    KILN_CHECK(!released_, name(), ": backward through the graph a second time, after its saved tensors were freed; "
               "pass retain_graph=true to the first backward (or grad) call to keep them");
    TensorList out = T::backward(&ctx, std::move(grads));
    if (out.size() != next_edges.size() && out.size() == arg_is_tensor.size()) {
      TensorList picked;  // one per forward argument: keep the Tensor arguments' gradients
      for (size_t i = 0; i < out.size(); ++i)
        if (arg_is_tensor[i]) picked.push_back(std::move(out[i]));
      out = std::move(picked);
    }
    KILN_CHECK(out.size() == next_edges.size(), name(), ": backward returned ", out.size(), " gradients, expected ",
               next_edges.size(), " (one per Tensor input)");
    return out;
  }
  void release_saved() override {
    ctx.saved_.clear();
    ctx.saved_data.clear();
    released_ = true;
  }
  static const char* name_of() {
    if constexpr (requires { T::name; }) return T::name;
    else return typeid(T).name();
  }

  AutogradContext ctx;
  std::vector<bool> arg_is_tensor;  // per forward argument; a vector<Tensor> argument counts as Tensors

 private:
  bool released_ = false;
};

template <class T>
struct Function {
  template <typename... Args>
  static auto apply(Args&&... args) {
    auto node = std::make_shared<CustomNode<T>>();
    std::vector<Tensor> inputs;
    (collect(inputs, node->arg_is_tensor, args), ...);
    bool record = GradMode::is_enabled();
    bool any = false;
    for (const Tensor& t : inputs) any |= requires_grad(t);
    record = record && any;

    auto result = [&] {
      GradModeGuard no_grad(false);
      return T::forward(&node->ctx, std::forward<Args>(args)...);
    }();
    using R = decltype(result);
    static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, std::vector<Tensor>>,
                  "Function::forward must return a Tensor or a std::vector<Tensor>");
    std::vector<Tensor> outputs;
    if constexpr (std::is_same_v<R, Tensor>) outputs = {result};
    else outputs = result;

    if (record) {
      node->ctx.node_ = node.get();
      for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
      for (size_t i = 0; i < outputs.size(); ++i) {
        Tensor& out = outputs[i];
        // An output that is an input returned as is gets a new handle, so the input keeps its own history.
        for (const Tensor& in : inputs)
          if (in.defined() && out.impl() == in.impl()) out = ops::alias(out);
        node->output_meta.push_back(TensorMeta::of(out));
        bool differentiable = is_floating(out.dtype());
        for (const Tensor& nd : node->ctx.non_differentiable_) differentiable &= nd.impl() != out.impl();
        if (differentiable) set_history(out, node, static_cast<uint32_t>(i));
      }
      for (const Tensor& t : node->ctx.to_save_) {
        bool is_output = false;
        for (const Tensor& out : outputs) is_output |= t.defined() && out.impl() == t.impl();
        node->ctx.saved_.emplace_back(t, is_output);
      }
    }
    node->ctx.to_save_.clear();
    node->ctx.non_differentiable_.clear();
    if constexpr (std::is_same_v<R, Tensor>) return outputs[0];
    else return outputs;
  }

 private:
  template <typename A>
  static void collect(std::vector<Tensor>& inputs, std::vector<bool>& is_tensor, const A& arg) {
    using D = std::decay_t<A>;
    if constexpr (std::is_same_v<D, Tensor>) {
      inputs.push_back(arg);
      is_tensor.push_back(true);
    } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
      for (const Tensor& t : arg) {
        inputs.push_back(t);
        is_tensor.push_back(true);
      }
    } else {
      is_tensor.push_back(false);
    }
  }
};

}  // namespace kiln::autograd

// nn::Module: a tree of named parameters, buffers and submodules, with a forward.
//
//   struct Net : nn::Module {
//     nn::Linear fc1{784, 256}, fc2{256, 10};
//     Net() {
//       register_module("fc1", fc1);
//       register_module("fc2", fc2);
//     }
//     Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }
//   };
//   auto net = std::make_shared<Net>();
//   net->named_parameters();  // fc1.weight, fc1.bias, fc2.weight, fc2.bias: PyTorch's names and order
//
// A module is shared (std::shared_ptr): the built-in layers come as ModuleHolder handles (nn::Linear is a
// ModuleHolder<LinearImpl>) that construct the module, call it with (), and reach it with ->. Calling a module
// (module(x), not module.forward(x)) runs its forward hooks and names it in anomaly mode's reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/autograd/autograd.h"
#include "kiln/tensor/tensor.h"

namespace kiln::nn {

// Parameters and persistent buffers by dotted name ("layers.0.weight"), as PyTorch's state_dict.
using StateDict = std::map<std::string, Tensor>;

// What load_state_dict(strict = false) could not match.
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the module
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's computation. Modules whose forward takes other arguments define their own and leave this.
  virtual Tensor forward(const Tensor& x);
  // Runs forward with the forward pre-hooks before it and the forward hooks after it.
  Tensor operator()(const Tensor& x);

  // ---- registration (names may not contain '.'; a name is registered once) ----
  // Returns a handle to the parameter, which requires grad (unless requires_grad is false).
  Tensor& register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  // The same, and binds `member`, the field the layer's forward reads the parameter from (LinearImpl::weight):
  // the member gets the handle now, and a reparametrization (nn::weight_norm) can later point it at a tensor
  // computed from other parameters. The member must live as long as the module (a field of it).
  Tensor& register_parameter(const std::string& name, Tensor& member, Tensor value, bool requires_grad = true);
  // A buffer is state that is not trained (BatchNorm's running mean); persistent ones go into state_dict.
  Tensor& register_buffer(const std::string& name, Tensor value, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  template <class H>
  auto register_module(const std::string& name, H& holder) -> decltype(holder.ptr()) {
    add_child(name, holder.ptr());
    return holder.ptr();
  }

  // ---- the tree ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module first (named ""), then every descendant depth-first, as PyTorch's named_modules.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  std::vector<std::shared_ptr<Module>> modules();
  // By dotted name, as PyTorch's get_submodule / get_parameter / get_buffer: get_submodule("encoder.layers.0")
  // ("" is this module), get_parameter("encoder.layers.0.weight"), get_buffer("bn.running_mean"). The tensor
  // is the registered handle (in-place changes reach the module). A missing name is an error that says which
  // part of the path was not found and what was there instead.
  Module& get_submodule(const std::string& path);
  Tensor get_parameter(const std::string& path);
  Tensor get_buffer(const std::string& path);
  // Calls fn on every module of the tree, children first, then this one (PyTorch's apply order).
  void apply(const std::function<void(Module&)>& fn);
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- modes and placement ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves (and converts floating parameters and buffers) in place: the tensors keep their identity, so
  // optimizers built before keep working.
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);
  void zero_grad(bool set_to_none = true);
  // Sets requires_grad on every parameter of the tree, as PyTorch's Module.requires_grad_: false freezes it
  // (backward leaves its parameters without gradients, and optimizers skip them), e.g. a pretrained backbone:
  // model->get_submodule("backbone").requires_grad_(false).
  Module& requires_grad_(bool requires_grad = true);

  // ---- state ----
  StateDict state_dict() const;
  // Copies values into the module's tensors (shapes must match; dtypes are converted). strict: any missing or
  // unexpected key is an error listing them all.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

  // ---- hooks ----
  using ForwardPreHook = std::function<Tensor(Module&, const Tensor& input)>;  // a defined result replaces input
  using ForwardHook = std::function<Tensor(Module&, const Tensor& input, const Tensor& output)>;  // ... output
  unsigned register_forward_pre_hook(ForwardPreHook hook);
  unsigned register_forward_hook(ForwardHook hook);
  void remove_hook(unsigned handle);

  // ---- reparametrization: nn::weight_norm and nn::spectral_norm are built on these ----
  // Computes a bound member from other registered tensors (weight = g v / ||v||) before each call.
  class Parametrization {
   public:
    virtual ~Parametrization() = default;
    virtual Tensor compute(Module& module) = 0;
  };
  // The member bound to `name` by register_parameter's member form, or null.
  Tensor* bound_member(const std::string& name) const;
  // Unregisters a parameter or buffer of this module and returns it; a member bound to it keeps its value.
  Tensor remove_parameter(const std::string& name);
  Tensor remove_buffer(const std::string& name);
  // From the next call of this module on (operator(), with one argument or several), p->compute(*this) runs
  // first and its result becomes the member bound to `name`, which is what forward reads. Until then the
  // member keeps its value.
  void register_parametrization(const std::string& name, std::shared_ptr<Parametrization> p);
  std::shared_ptr<Parametrization> remove_parametrization(const std::string& name);
  // The parametrization of `name`, or null.
  Parametrization* parametrization(const std::string& name) const;
  // Recomputes this module's parametrized members (not its children's); each call of the module runs it.
  void refresh_parametrizations();

  // ---- printing ----
  const std::string& type_name() const { return type_name_; }
  // The layer's settings, shown in str(): "in_features=784, out_features=256, bias=true".
  virtual std::string extra_repr() const { return ""; }
  // The module tree, as PyTorch prints it.
  std::string str() const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  // Parameters and buffers in registration order, reachable by name from subclasses.
  Tensor& parameter(const std::string& name);
  Tensor& buffer(const std::string& name);

 private:
  struct Buffer {
    Tensor value;
    bool persistent;
  };
  void check_name(const std::string& name, const char* what) const;
  void collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);
  void print(std::ostream& out, int indent) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Buffer>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::pair<unsigned, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<unsigned, ForwardHook>> hooks_;
  std::vector<std::pair<std::string, Tensor*>> members_;  // bound by register_parameter's member form
  std::vector<std::pair<std::string, std::shared_ptr<Parametrization>>> parametrizations_;
};

std::ostream& operator<<(std::ostream& out, const Module& m);

// A shared handle to a module of type M: constructs it from the given arguments, calls it with (), reaches it
// with ->. nn::Linear is ModuleHolder<LinearImpl>; a user's own module works the same way.
template <class M>
class ModuleHolder {
 public:
  template <typename... Args>
    requires(std::is_constructible_v<M, Args...> &&
             !(sizeof...(Args) == 1 && (std::is_same_v<std::remove_cvref_t<Args>, ModuleHolder> || ...)))
  explicit ModuleHolder(Args&&... args) : impl_(std::make_shared<M>(std::forward<Args>(args)...)) {}
  ModuleHolder(std::shared_ptr<M> impl) : impl_(std::move(impl)) {}  // NOLINT: a holder is its pointer
  // An empty holder, for an optional submodule (TransformerEncoder's norm); is_empty() tells.
  ModuleHolder(std::nullptr_t) {}  // NOLINT: as a null pointer
  // A module whose constructor ends with an options struct names it `using Options = ...;`, and then the
  // options can be a braced list, which the constructor above cannot deduce: nn::HuberLoss({.delta = 2}),
  // nn::Conv2d(3, 16, 3, {.stride = 2}).
  template <class T = M>
    requires std::is_constructible_v<M, const typename T::Options&>
  explicit ModuleHolder(const typename T::Options& options) : impl_(std::make_shared<M>(options)) {}
  template <class A, class T = M>
    requires std::is_constructible_v<M, A, const typename T::Options&>
  ModuleHolder(A&& a, const typename T::Options& options)
      : impl_(std::make_shared<M>(std::forward<A>(a), options)) {}
  template <class A, class B, class T = M>
    requires std::is_constructible_v<M, A, B, const typename T::Options&>
  ModuleHolder(A&& a, B&& b, const typename T::Options& options)
      : impl_(std::make_shared<M>(std::forward<A>(a), std::forward<B>(b), options)) {}
  template <class A, class B, class C, class T = M>
    requires std::is_constructible_v<M, A, B, C, const typename T::Options&>
  ModuleHolder(A&& a, B&& b, C&& c, const typename T::Options& options)
      : impl_(std::make_shared<M>(std::forward<A>(a), std::forward<B>(b), std::forward<C>(c), options)) {}

  // A list of sizes as a braced list, first, second or third, which the constructors above cannot deduce either:
  // nn::AdaptiveAvgPool3d({2, 4, 3}), nn::LayerNorm({64}), nn::ConstantPad2d({1, 1, 2, 0}, 0.5),
  // nn::Unflatten(1, {2, 3}). The list lives until the constructor has copied it.
  template <class... Rest>
    requires std::is_constructible_v<M, std::initializer_list<int64_t>, Rest...>
  explicit ModuleHolder(std::initializer_list<int64_t> sizes, Rest&&... rest)
      : impl_(std::make_shared<M>(sizes, std::forward<Rest>(rest)...)) {}
  template <class A, class... Rest>
    requires std::is_constructible_v<M, A, std::initializer_list<int64_t>, Rest...>
  ModuleHolder(A&& a, std::initializer_list<int64_t> sizes, Rest&&... rest)
      : impl_(std::make_shared<M>(std::forward<A>(a), sizes, std::forward<Rest>(rest)...)) {}
  // First, as a pool's kernel, then options: nn::MaxPool3d({1, 3, 3}, {.stride = {1, 2, 2}}).
  template <class T = M>
    requires std::is_constructible_v<M, std::initializer_list<int64_t>, const typename T::Options&>
  ModuleHolder(std::initializer_list<int64_t> sizes, const typename T::Options& options)
      : impl_(std::make_shared<M>(sizes, options)) {}
  // Second, as an LP pool's kernel, then options: nn::LPPool2d(2, {3, 2}, {.stride = 2}).
  template <class A, class T = M>
    requires std::is_constructible_v<M, A, std::initializer_list<int64_t>, const typename T::Options&>
  ModuleHolder(A&& a, std::initializer_list<int64_t> sizes, const typename T::Options& options)
      : impl_(std::make_shared<M>(std::forward<A>(a), sizes, options)) {}
  // Third, as a convolution's kernel: nn::Conv2d(3, 16, {3, 5}), and then options too.
  template <class A, class B, class... Rest>
    requires std::is_constructible_v<M, A, B, std::initializer_list<int64_t>, Rest...>
  ModuleHolder(A&& a, B&& b, std::initializer_list<int64_t> sizes, Rest&&... rest)
      : impl_(std::make_shared<M>(std::forward<A>(a), std::forward<B>(b), sizes, std::forward<Rest>(rest)...)) {}
  template <class A, class B, class T = M>
    requires std::is_constructible_v<M, A, B, std::initializer_list<int64_t>, const typename T::Options&>
  ModuleHolder(A&& a, B&& b, std::initializer_list<int64_t> sizes, const typename T::Options& options)
      : impl_(std::make_shared<M>(std::forward<A>(a), std::forward<B>(b), sizes, options)) {}

  M* operator->() const { return impl_.get(); }
  M& operator*() const { return *impl_; }
  const std::shared_ptr<M>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  operator std::shared_ptr<Module>() const { return impl_; }  // NOLINT
  Tensor operator()(const Tensor& x) const { return (*impl_)(x); }
  // Modules whose forward takes more than one argument (the losses' input and target, attention's query, key
  // and value) are called with all of them; this refreshes parametrized members, then runs forward itself
  // (hooks take one input).
  template <class... Args>
    requires(sizeof...(Args) >= 2)
  decltype(auto) operator()(Args&&... args) const {
    impl_->refresh_parametrizations();
    return impl_->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<M> impl_;
};

}  // namespace kiln::nn

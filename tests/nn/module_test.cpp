// nn::Module: names, traversal, state_dict, modes, placement and hooks, as PyTorch defines them.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::values;

struct Block : nn::Module {
  nn::Linear fc{4, 3};
  nn::Dropout drop{0.5};
  Block() : nn::Module("Block") {
    register_module("fc", fc);
    register_module("drop", drop);
    register_buffer("steps", zeros({1}, kInt64));
    register_buffer("scratch", zeros({2}), /*persistent=*/false);
  }
  Tensor forward(const Tensor& x) override { return drop(fc(x)); }
};

struct Net : nn::Module {
  nn::ModuleHolder<Block> block;
  nn::Sequential head{nn::Linear(3, 2), nn::ReLU(), nn::Linear(2, 1, false)};
  Net() : nn::Module("Net") {
    register_module("block", block);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override { return head(block(x)); }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (auto& [n, t] : named) out.push_back(n);
  return out;
}

TEST(Module, DottedNamesInRegistrationOrder) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(names_of(net->named_parameters()),
            (std::vector<std::string>{"block.fc.weight", "block.fc.bias", "head.0.weight", "head.0.bias",
                                      "head.2.weight"}));
  EXPECT_EQ(names_of(net->named_buffers()), (std::vector<std::string>{"block.steps", "block.scratch"}));
  std::vector<std::string> modules;
  for (auto& [n, m] : net->named_modules()) modules.push_back(n + ":" + m->type_name());
  EXPECT_EQ(modules, (std::vector<std::string>{":Net", "block:Block", "block.fc:Linear", "block.drop:Dropout",
                                               "head:Sequential", "head.0:Linear", "head.1:ReLU", "head.2:Linear"}));
  EXPECT_EQ(net->num_parameters(), 4 * 3 + 3 + 3 * 2 + 2 + 2);
  EXPECT_EQ(net->children().size(), 2u);
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
}

// Every name of named_modules / named_parameters / named_buffers reaches the same object through the dotted
// lookups; a missing part of a path is an error naming that part and what is there.
TEST(Module, LookupByDottedName) {
  auto net = std::make_shared<Net>();
  for (auto& [n, m] : net->named_modules()) EXPECT_EQ(&net->get_submodule(n), m.get()) << n;
  for (auto& [n, p] : net->named_parameters()) EXPECT_EQ(net->get_parameter(n).impl(), p.impl()) << n;
  for (auto& [n, b] : net->named_buffers()) EXPECT_EQ(net->get_buffer(n).impl(), b.impl()) << n;
  net->get_parameter("head.0.bias").detach().fill_(7.0);  // the registered tensor itself
  EXPECT_EQ(net->head->children()[0]->named_parameters()[1].second.to_vector<float>(), (std::vector<float>{7, 7}));
  EXPECT_EQ(&net->block->get_submodule("fc"), net->block->fc.ptr().get());

  expect_error([&] { net->get_submodule("block.conv"); }, {"Block) has no child \"conv\" (its children: fc, drop)"});
  expect_error([&] { net->get_submodule("head.0.x"); }, {"head.0 (Linear) has no child \"x\" (its children: none)"});
  expect_error([&] { net->get_parameter("block.fc.scale"); }, {"Linear's parameters: weight, bias"});
  expect_error([&] { net->get_parameter("block.steps"); }, {"no parameter \"block.steps\""});
  expect_error([&] { net->get_buffer("block.fc.weight"); }, {"Linear's buffers: none"});
  expect_error([&] { net->get_buffer("nothing.steps"); }, {"Net (Net) has no child \"nothing\""});
  expect_error([&] { net->get_submodule("block."); }, {"a path does not end in '.'"});
}

// requires_grad_ on a subtree freezes only its parameters: backward gives the rest gradients and leaves the
// frozen ones without, and unfreezing brings them back.
TEST(Module, RequiresGradFreezesASubtree) {
  auto net = std::make_shared<Net>();
  net->eval();  // (dropout off)
  EXPECT_EQ(&net->block->requires_grad_(false), net->block.ptr().get());
  for (auto& [n, p] : net->named_parameters()) EXPECT_EQ(p.requires_grad(), n.rfind("block.", 0) != 0) << n;
  net->forward(randn({2, 4})).sum().backward();
  for (auto& [n, p] : net->named_parameters()) EXPECT_EQ(p.grad().defined(), n.rfind("block.", 0) != 0) << n;
  net->requires_grad_();
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
  net->zero_grad();
  net->forward(randn({2, 4})).sum().backward();
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(Module, StateDictRoundTripAndErrors) {
  auto a = std::make_shared<Net>(), b = std::make_shared<Net>();
  nn::StateDict state = a->state_dict();
  EXPECT_EQ(state.size(), 6u);  // 5 parameters + the persistent buffer
  EXPECT_FALSE(state.count("block.scratch"));
  b->load_state_dict(state);
  for (auto& [name, t] : b->state_dict())
    EXPECT_EQ(t.to(kFloat64).to_vector<double>(), state.at(name).to(kFloat64).to_vector<double>()) << name;

  nn::StateDict bad = state;
  bad.erase("head.0.bias");
  bad["head.9.weight"] = zeros({1});
  expect_error([&] { b->load_state_dict(bad); }, {"missing keys \"head.0.bias\"", "unexpected keys \"head.9.weight\""});
  nn::LoadResult r = b->load_state_dict(bad, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"head.0.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"head.9.weight"}));

  nn::StateDict wrong = state;
  wrong["block.fc.weight"] = zeros({3, 5});
  Tensor before = b->block->fc->weight.clone();
  expect_error([&] { b->load_state_dict(wrong); }, {"block.fc.weight", "(3, 5)", "(3, 4)"});
  EXPECT_EQ(b->block->fc->weight.to_vector<float>(), before.to_vector<float>());  // nothing changed
}

TEST(Module, TrainEvalReachesEveryModule) {
  auto net = std::make_shared<Net>();
  Tensor x = ones({8, 4});
  net->eval();
  EXPECT_FALSE(net->block->drop->is_training());
  Tensor y1 = (*net)(x), y2 = (*net)(x);
  EXPECT_EQ(y1.to_vector<float>(), y2.to_vector<float>());  // dropout off: deterministic
  net->train();
  EXPECT_TRUE(net->block->drop->is_training());
}

TEST(Module, ToConvertsInPlaceKeepingIdentity) {
  auto lin = nn::Linear(3, 2);
  Tensor held = lin->weight;  // as an optimizer would hold it
  std::vector<float> values = held.to_vector<float>();
  lin->to(kFloat64);
  EXPECT_EQ(held.dtype(), kFloat64);
  EXPECT_TRUE(held.requires_grad());
  std::vector<double> now = held.to_vector<double>();
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(now[i], static_cast<double>(values[i]));
  Tensor y = lin(ones({1, 3}, kFloat64)).sum();
  y.backward();
  EXPECT_TRUE(held.grad().defined());  // the held handle is the trained parameter
  lin->zero_grad();
  EXPECT_FALSE(held.grad().defined());
}

TEST(Module, HooksAndApply) {
  auto lin = nn::Linear(2, 2);
  std::vector<std::string> calls;
  unsigned pre = lin->register_forward_pre_hook([&](nn::Module&, const Tensor& in) {
    calls.push_back("pre");
    return in * 2;
  });
  Tensor seen;
  lin->register_forward_hook([&](nn::Module& m, const Tensor& in, const Tensor& out) {
    calls.push_back("post " + m.type_name());
    seen = in;
    return Tensor();
  });
  lin(ones({1, 2}));
  EXPECT_EQ(calls, (std::vector<std::string>{"pre", "post Linear"}));
  EXPECT_EQ(seen.to_vector<float>(), (std::vector<float>{2, 2}));  // the forward hook sees the replaced input
  lin->remove_hook(pre);
  calls.clear();
  lin(ones({1, 2}));
  EXPECT_EQ(calls, (std::vector<std::string>{"post Linear"}));

  auto net = std::make_shared<Net>();
  std::vector<std::string> order;
  net->apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  EXPECT_EQ(order.front(), "Linear");
  EXPECT_EQ(order.back(), "Net");
}

TEST(Module, RegistrationErrorsAndPrinting) {
  nn::Module m("Custom");
  m.register_parameter("w", zeros({2}));
  expect_error([&] { m.register_parameter("w", zeros({2})); }, {"Custom", "\"w\"", "already taken"});
  expect_error([&] { m.register_buffer("a.b", zeros({2})); }, {"Custom", "\"a.b\"", "'.'"});
  expect_error([&] { m.forward(zeros({2})); }, {"Custom", "forward"});
  auto net = std::make_shared<Net>();
  std::string s = net->str();
  EXPECT_NE(s.find("(fc): Linear(in_features=4, out_features=3, bias=true)"), std::string::npos) << s;
  EXPECT_NE(s.find("(2): Linear(in_features=2, out_features=1, bias=false)"), std::string::npos) << s;
}

TEST(Module, ContainersIndexAndName) {
  nn::ModuleList list;
  list->push_back(nn::Linear(2, 2));
  list->push_back(nn::ReLU());
  EXPECT_EQ(list->size(), 2u);
  EXPECT_EQ(list->at<nn::LinearImpl>(0)->weight.sizes(), (Shape{2, 2}));
  expect_error([&] { list->at<nn::LinearImpl>(1); }, {"ModuleList", "ReLU"});
  expect_error([&] { (*list)[5]; }, {"index 5", "2 modules"});
  nn::ModuleDict dict;
  dict->insert("enc", nn::Linear(2, 3));
  EXPECT_TRUE(dict->contains("enc"));
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"enc"}));
  expect_error([&] { (*dict)["dec"]; }, {"ModuleDict", "dec"});
  EXPECT_EQ(names_of(dict->named_parameters()), (std::vector<std::string>{"enc.weight", "enc.bias"}));
}

// ParameterList and ParameterDict inside a model: their parameters are the model's (named as PyTorch names
// them, trained, saved, loaded and moved with it); Functional puts a function in a Sequential.
TEST(Module, ParameterContainersAndFunctional) {
  struct Model : nn::Module {
    nn::ParameterList scales;
    nn::ParameterDict extra;
    Model() : Module("Model") {
      register_module("scales", scales);
      register_module("extra", extra);
      scales->append(ones({2}));
      scales->append(full({2}, 3.0));
      extra->insert("bias", zeros({2}));
      extra->insert("frozen", ones({1}), false);
    }
    Tensor forward(const Tensor& x) override { return x * (*scales)[0] * (*scales)[1] + (*extra)["bias"]; }
  };
  Model m;
  EXPECT_EQ(names_of(m.named_parameters()),
            (std::vector<std::string>{"scales.0", "scales.1", "extra.bias", "extra.frozen"}));
  EXPECT_EQ(m.scales->size(), 2u);
  EXPECT_TRUE(m.scales->get_parameter("1").equal(full({2}, 3.0)));
  EXPECT_FALSE((*m.extra)["frozen"].requires_grad());
  EXPECT_EQ(m.extra->keys(), (std::vector<std::string>{"bias", "frozen"}));
  EXPECT_TRUE(m.extra->contains("bias"));
  EXPECT_FALSE(m.extra->contains("weight"));
  expect_error([&] { (*m.scales)[2]; }, {"ParameterList", "index 2", "2 parameters"});
  expect_error([&] { (*m.extra)["weight"]; }, {"ParameterDict", "weight"});
  expect_error([&] { m.extra->insert("a.b", ones({1})); }, {"a.b"});
  // Trained: the gradient of sum(x * s0 * s1 + b) reaches each.
  const Tensor x = tensor({1.0, 2.0});
  m.forward(x).sum().backward();
  EXPECT_EQ(values((*m.scales)[0].grad()), (std::vector<double>{3, 6}));
  EXPECT_EQ(values((*m.extra)["bias"].grad()), (std::vector<double>{1, 1}));
  // Saved and loaded under those names.
  Model other;
  (*other.scales)[1].detach().fill_(7.0);
  m.load_state_dict(other.state_dict());
  EXPECT_EQ(values((*m.scales)[1]), (std::vector<double>{7, 7}));
  // Functional in a Sequential.
  nn::Sequential seq(nn::Functional([](const Tensor& t) { return t * 2; }, "Double"),
                     nn::Functional([](const Tensor& t) { return t + 1; }));
  EXPECT_EQ(values(seq->forward(x)), (std::vector<double>{3, 5}));
  EXPECT_NE(seq->str().find("(0): Double"), std::string::npos) << seq->str();
  EXPECT_TRUE(seq->parameters().empty());
  expect_error([] { nn::Functional(std::function<Tensor(const Tensor&)>()); }, {"Functional", "empty"});
}


// A parametrization that counts its calls and gives the member scale * w.
struct Scaled : nn::Module::Parametrization {
  Tensor w;
  double scale;
  int calls = 0;
  Scaled(Tensor w_, double s) : w(std::move(w_)), scale(s) {}
  Tensor compute(nn::Module&) override {
    ++calls;
    return w * scale;
  }
};

TEST(Module, BoundMembersFollowRemovalRegistrationAndParametrization) {
  nn::Linear lin(2, 2);
  nn::Module& m = *lin;
  EXPECT_EQ(m.bound_member("weight"), &lin->weight);
  EXPECT_EQ(m.bound_member("nothing"), nullptr);
  const Tensor w = m.remove_parameter("weight");
  EXPECT_EQ(names_of(m.named_parameters()), (std::vector<std::string>{"bias"}));
  EXPECT_EQ(lin->weight.impl(), w.impl());  // the member keeps its value
  m.register_parameter("weight", ones({2, 2}));
  EXPECT_TRUE(lin->weight.equal(ones({2, 2})));  // and follows a parameter registered again under its name
  auto p = std::make_shared<Scaled>(m.named_parameters()[1].second, 3.0);
  m.register_parametrization("weight", p);
  EXPECT_EQ(p->calls, 0);  // not before the next call
  lin(ones({1, 2}));
  EXPECT_EQ(p->calls, 1);
  EXPECT_TRUE(lin->weight.equal(full({2, 2}, 3.0)));
  EXPECT_EQ(m.parametrization("weight"), p.get());
  EXPECT_EQ(m.remove_parametrization("weight"), p);
  lin(ones({1, 2}));
  EXPECT_EQ(p->calls, 1);
  expect_error([&] { m.remove_parametrization("weight"); }, {"Linear: \"weight\" is not parametrized"});
  expect_error([&] { m.remove_parameter("gamma"); }, {"cannot remove parameter \"gamma\": there is none"});
  expect_error([&] { m.remove_buffer("gamma"); }, {"cannot remove buffer \"gamma\": there is none"});
  expect_error([&] { m.register_parametrization("bias_scale", p); }, {"Linear has no member bound to \"bias_scale\""});
}

// parameters_to_vector and vector_to_parameters: the order, a round trip that keeps each tensor's identity (an
// optimizer built before sees the new values), gradients through the vector, and the errors.
TEST(ParamVector, FlattensInOrderAndWritesBackInPlace) {
  nn::Sequential net(nn::Linear(3, 2), nn::ReLU(), nn::Linear(2, 1));
  const std::vector<Tensor> params = net->parameters();
  const Tensor vec = nn::parameters_to_vector(params);
  ASSERT_EQ(vec.sizes(), Shape({3 * 2 + 2 + 2 * 1 + 1}));
  std::vector<double> want;
  for (const Tensor& p : params)
    for (double v : test::values(p)) want.push_back(v);
  EXPECT_EQ(test::values(vec), want);
  // Gradients flow back to each parameter: d(sum of i * vec[i]) / d param = its positions' indices.
  const Tensor weights = arange(0, vec.numel(), 1, TensorOptions(kFloat32));
  (vec * weights).sum().backward();
  std::vector<double> grads;
  for (const Tensor& p : params)
    for (double v : test::values(p.grad())) grads.push_back(v);
  EXPECT_EQ(grads, test::values(weights));
  // Back: every element set to its index; the same tensors hold the values.
  const Tensor first = params[0];
  nn::vector_to_parameters(arange(0, vec.numel(), 1, TensorOptions(kFloat64)), params);
  EXPECT_EQ(first.data_ptr<float>(), net->parameters()[0].data_ptr<float>());
  EXPECT_EQ(test::values(nn::parameters_to_vector(net->parameters())), test::values(weights));
  EXPECT_TRUE(params[0].requires_grad());
  EXPECT_EQ(nn::parameters_to_vector({}).numel(), 0);
  expect_error([&] { nn::vector_to_parameters(zeros({12}), params); }, {"vector_to_parameters", "12 elements", "hold 11"});
  expect_error([&] { nn::vector_to_parameters(zeros({11, 1}), params); }, {"vector_to_parameters", "1-d", "(11, 1)"});
  expect_error([&] { nn::parameters_to_vector({zeros({2}), zeros({2}, TensorOptions(kFloat64))}); },
               {"parameters_to_vector", "parameter 1", "float64"});
}
}  // namespace
}  // namespace kiln

// Optimizer state_dict: resuming from a snapshot is bitwise identical to never stopping, and bad snapshots
// are refused with a clear error before anything changes.
#include <memory>

#include "optim/optim_test_util.h"

namespace kiln::test {
namespace {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

// Two params in two groups; the second gets no grad on odd steps (so its step count lags).
void expect_bitwise_resume(const MakeOptimizer& make, const std::string& what) {
  auto fresh_params = [] {
    return std::vector<Tensor>{make_param(initial_values()), make_param({1.0, -2.0, 0.25}, {3})};
  };
  auto feed = [](const std::vector<Tensor>& ps, int t) {
    ps[0].set_grad(tensor(fixed_grad(t), {2, 3}));
    ps[1].set_grad(t % 2 ? Tensor{} : tensor(fixed_grad(t + 7, 3), {3}));
  };
  const int k = 4, n = 9;
  std::vector<Tensor> a = fresh_params();
  auto opt_a = make(a);
  for (int t = 0; t < n; ++t) feed(a, t), opt_a->step();

  std::vector<Tensor> b = fresh_params();
  auto opt_b = make(b);
  for (int t = 0; t < k; ++t) feed(b, t), opt_b->step();
  optim::OptimizerState saved = opt_b->state_dict();
  for (int t = k; t < n; ++t) feed(b, t), opt_b->step();  // keeps going: must not change `saved`

  // A new process: parameters restored to their step-k values, a new optimizer, the saved state.
  std::vector<Tensor> c = fresh_params();
  {
    std::vector<Tensor> replay = fresh_params();
    auto opt_r = make(replay);
    for (int t = 0; t < k; ++t) feed(replay, t), opt_r->step();
    NoGradGuard g;
    for (size_t i = 0; i < c.size(); ++i) c[i].copy_(replay[i]);
  }
  auto opt_c = make(c);
  opt_c->load_state_dict(saved);
  for (int t = k; t < n; ++t) feed(c, t), opt_c->step();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(values(a[i]), values(c[i])) << what << ": param " << i << " differs after resuming";
    EXPECT_EQ(values(a[i]), values(b[i])) << what << ": param " << i;
  }
  // (c matching a also shows that `saved` was not changed by b's later steps.)
  EXPECT_TRUE(make(fresh_params())->state_dict().tensors.empty()) << what << ": a new optimizer has no state";
}

TEST(StateDict, ResumeIsBitwiseIdenticalForEveryOptimizer) {
  expect_bitwise_resume([](const std::vector<Tensor>& p) {
    auto o = std::make_unique<optim::SGD>(std::vector<Tensor>{p[0]}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    o->add_param_group({p[1]}, optim::SGDOptions{.lr = 0.05, .momentum = 0.5, .weight_decay = 0.1});
    return o;
  }, "SGD");
  expect_bitwise_resume([](const std::vector<Tensor>& p) {
    auto o = std::make_unique<optim::Adam>(std::vector<Tensor>{p[0]}, optim::AdamOptions{.lr = 0.1, .amsgrad = true});
    o->add_param_group({p[1]}, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
    return o;
  }, "Adam");
  expect_bitwise_resume([](const std::vector<Tensor>& p) {
    return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.1, .weight_decay = 0.1});
  }, "AdamW");
  expect_bitwise_resume([](const std::vector<Tensor>& p) {
    return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions{.lr = 0.01, .momentum = 0.9, .centered = true});
  }, "RMSprop");
  expect_bitwise_resume([](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.01});
  }, "Adagrad");
  expect_bitwise_resume([](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adamax>(p, optim::AdamaxOptions{.lr = 0.1, .weight_decay = 0.01});
  }, "Adamax");
  expect_bitwise_resume([](const std::vector<Tensor>& p) {  // mu_product is state too
    return std::make_unique<optim::NAdam>(p, optim::NAdamOptions{.lr = 0.1, .momentum_decay = 0.3});
  }, "NAdam");
  expect_bitwise_resume([](const std::vector<Tensor>& p) {  // rectified from step 6: both sides of the resume
    return std::make_unique<optim::RAdam>(p, optim::RAdamOptions{.lr = 0.1, .weight_decay = 0.1,
                                                                 .decoupled_weight_decay = true});
  }, "RAdam");
}

TEST(StateDict, KeysAndValues) {
  Tensor p = make_param(initial_values()), q = make_param({1.0, 2.0, 3.0}, {3});
  optim::Adam opt({p}, {.lr = 0.1});
  opt.add_param_group({q}, optim::AdamOptions{.lr = 0.2});
  p.set_grad(tensor(fixed_grad(1), {2, 3}));
  opt.step();
  optim::OptimizerState s = opt.state_dict();
  EXPECT_EQ(s.scalars.at("param_groups.0.lr"), 0.1);
  EXPECT_EQ(s.scalars.at("param_groups.1.lr"), 0.2);
  EXPECT_EQ(s.scalars.at("param_groups.1.num_params"), 1.0);
  EXPECT_EQ(s.scalars.at("param_groups.0.beta2"), 0.999);
  EXPECT_EQ(s.scalars.at("state.0.step"), 1.0);
  EXPECT_EQ(s.tensors.count("state.0.exp_avg"), 1u);
  EXPECT_EQ(s.tensors.count("state.0.exp_avg_sq"), 1u);
  EXPECT_EQ(s.tensors.count("state.1.exp_avg"), 0u);  // q never had a grad
  EXPECT_EQ(s.tensors.at("state.0.exp_avg").sizes(), (Shape{2, 3}));
  // A snapshot is a copy.
  EXPECT_FALSE(s.tensors.at("state.0.exp_avg").shares_storage_with(opt.state(p).tensors.at("exp_avg")));
  // Loaded options replace the group's (a scheduler's lr changes travel with the optimizer).
  s.scalars["param_groups.1.lr"] = 0.5;
  opt.load_state_dict(s);
  EXPECT_EQ(opt.param_groups()[1].lr(), 0.5);
}

TEST(StateDict, BadSnapshotsAreRefused) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(tensor(fixed_grad(1), {2, 3}));
  opt.step();
  const optim::OptimizerState good = opt.state_dict();

  optim::SGD two({make_param(initial_values())}, {.lr = 0.1, .momentum = 0.9});
  two.add_param_group({make_param(initial_values())}, optim::SGDOptions{.lr = 0.1});
  expect_error([&] { two.load_state_dict(good); }, {"SGD.load_state_dict", "1 parameter groups", "has 2"});

  optim::SGD other_shape({make_param({1, 2, 3, 4, 5, 6}, {3, 2})}, {.lr = 0.1, .momentum = 0.9});
  expect_error([&] { other_shape.load_state_dict(good); },
               {"state.0.momentum_buffer", "shape (2, 3)", "parameter 0 has shape (3, 2)"});

  optim::SGD two_params({make_param(initial_values()), make_param(initial_values())}, {.lr = 0.1});
  expect_error([&] { two_params.load_state_dict(good); }, {"parameter group 0 has 1 parameters in the state, 2"});

  auto bad = good;
  bad.scalars.erase("param_groups.0.momentum");
  expect_error([&] { opt.load_state_dict(bad); }, {"param_groups.0.momentum is missing"});
  bad = good;
  bad.scalars["param_groups.0.lr"] = -1;
  expect_error([&] { opt.load_state_dict(bad); }, {"SGD", "lr", "-1"});
  bad = good;
  bad.tensors["bogus"] = zeros({2});
  expect_error([&] { opt.load_state_dict(bad); }, {"unexpected tensor key 'bogus'"});
  bad = good;
  bad.scalars["state.x.step"] = 1;
  expect_error([&] { opt.load_state_dict(bad); }, {"unexpected key 'state.x.step'"});
  bad = good;
  bad.tensors["state.5.momentum_buffer"] = zeros({2, 3}, kFloat64);
  expect_error([&] { opt.load_state_dict(bad); }, {"state for parameter 5", "has 1 parameters"});

  // A refused snapshot changed nothing.
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(opt.state(p).tensors.count("momentum_buffer"), 1u);
}

TEST(StateDict, LoadConvertsStateToTheParamDtype) {
  Tensor p = make_param(initial_values());
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  optim::OptimizerState s;
  s.scalars = {{"param_groups.0.lr", 0.1}, {"param_groups.0.momentum", 0.9}, {"param_groups.0.dampening", 0},
               {"param_groups.0.weight_decay", 0}, {"param_groups.0.nesterov", 0}, {"param_groups.0.maximize", 0},
               {"param_groups.0.num_params", 1}};
  s.tensors["state.0.momentum_buffer"] = ones({2, 3}, kFloat32);
  opt.load_state_dict(s);
  EXPECT_EQ(opt.state(p).tensors.at("momentum_buffer").dtype(), kFloat64);
  p.set_grad(zeros({2, 3}, kFloat64));
  opt.step();  // buf = 0.9 * 1 + 0, p -= 0.1 * 0.9
  std::vector<double> want = initial_values();
  for (auto& v : want) v -= 0.1 * 0.9;
  expect_tensor_near(p, want, {2, 3});
}

}  // namespace
}  // namespace kiln::test

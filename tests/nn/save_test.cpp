// Modules and optimizers saved to safetensors files and loaded back: a model resumes exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "kiln/kiln.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("kiln_save_test_") + name)).string();
}

nn::Sequential make_model() {
  return nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::BatchNorm1d(8), nn::Linear(8, 3));
}

Tensor step(nn::Sequential& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = nn::F::cross_entropy(model(x), y);
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}

TEST(Save, ModuleFileUsesPyTorchKeysAndLoadsBack) {
  auto a = make_model(), b = make_model();
  std::string path = temp_path("module.safetensors");
  nn::save(*a, path);
  serialize::Loaded file = serialize::load_safetensors(path);
  EXPECT_EQ(file.metadata.at("format"), "pt");
  for (const char* key : {"0.weight", "0.bias", "2.weight", "2.running_mean", "2.num_batches_tracked", "3.weight"})
    EXPECT_TRUE(file.tensors.count(key)) << key;
  nn::load(*b, path);
  for (auto& [name, t] : a->state_dict())
    EXPECT_EQ(t.to(kFloat64).to_vector<double>(), b->state_dict().at(name).to(kFloat64).to_vector<double>()) << name;
  auto other = nn::Sequential(nn::Linear(4, 8));
  expect_error([&] { nn::load(*other, path); }, {"load_state_dict", "unexpected keys"});
  std::remove(path.c_str());
}

TEST(Save, ModelAndOptimizerResumeExactly) {
  Generator g(7);
  Tensor x = randn({16, 4}, {}, &g), y = randint(0, 3, {16}, kInt64, &g);
  // Run A: 6 steps straight.
  auto a = make_model();
  optim::Adam opt_a(a->parameters(), {.lr = 1e-2});
  // Run B: the same start, 3 steps, saved, loaded into fresh objects, 3 more steps.
  auto b = make_model();
  b->load_state_dict(a->state_dict());
  optim::Adam opt_b(b->parameters(), {.lr = 1e-2});
  for (int i = 0; i < 6; ++i) step(a, opt_a, x, y);
  for (int i = 0; i < 3; ++i) step(b, opt_b, x, y);
  std::string mpath = temp_path("resume_model.safetensors"), opath = temp_path("resume_opt.safetensors");
  nn::save(*b, mpath);
  optim::save(opt_b, opath);
  auto c = make_model();
  optim::Adam opt_c(c->parameters(), {.lr = 1e-2});
  nn::load(*c, mpath);
  optim::load(opt_c, opath);
  for (int i = 0; i < 3; ++i) step(c, opt_c, x, y);
  for (auto& [name, t] : a->state_dict())  // bit for bit
    EXPECT_EQ(t.to(kFloat64).to_vector<double>(), c->state_dict().at(name).to(kFloat64).to_vector<double>()) << name;
  optim::SGD sgd(c->parameters(), {.lr = 0.1});
  expect_error([&] { optim::load(sgd, opath); }, {"optim::load", "Adam", "not of SGD"});
  std::remove(mpath.c_str());
  std::remove(opath.c_str());
}

}  // namespace
}  // namespace kiln

// Models and datasets a program registers for `kiln train` (kiln/tools/registry.h): their arguments read from
// model.args / data.args with types, defaults and errors that say where a value was written; --set reaching
// into those mappings; the names checked; and a whole run (train, eval, predict, export) of a registered model
// on a registered dataset through run_cli, its reported accuracy checked against a forward pass made here.
// The dataset is XOR-style: four Gaussian blobs at (+-1, +-1), the class the sign of x * y, which no linear
// model can fit (it stays near 50%) and a hidden layer can: so the trained accuracy shows the registered model,
// with the width its argument asked for, was the one trained.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/tools/classifier.h"
#include "kiln/tools/registry.h"
#include "kiln/trainer/checkpoint.h"
#include "tools/tools_test_util.h"
#include "error_of.h"
#include "trainer/tfevents_reader.h"

namespace kiln::tools {
namespace registry_test {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_kiln;
using testing::TempDir;

using test::error_of;

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in:\n" << text;
}

// Every test starts and ends with nothing registered: the registry is the process's.
class Registry : public ::testing::Test {
 protected:
  void SetUp() override { clear_registry(); }
  void TearDown() override { clear_registry(); }
};

// What the blob dataset and the model saw when they were last built.
struct Seen {
  int64_t width = 0;
  int64_t samples = 0;
};
Seen g_seen;

// One hidden layer of args.width (default 32), activation args.activation (relu or tanh).
ModelSpec hidden_layer_model() {
  return {.build =
              [](const Args& args, const DataInfo& data) -> std::shared_ptr<nn::Module> {
                g_seen.width = args.get<int64_t>("width", 32);
                const std::string activation = args.get<std::string>("activation", "relu");
                KILN_CHECK(activation == "relu" || activation == "tanh", "model.args.activation: relu or tanh");
                nn::Sequential net;
                net->push_back(nn::Linear(data.input_shape[0], g_seen.width));
                if (activation == "relu") {
                  net->push_back(nn::ReLU());
                } else {
                  net->push_back(nn::Tanh());
                }
                net->push_back(nn::Linear(g_seen.width, data.num_classes));
                return net.ptr();
              },
          .doc = "one hidden layer of model.args.width"};
}

// args.samples points (default 800) in four blobs of std args.noise (default 0.25) at (+-1, +-1), labelled 1
// where x * y > 0; data.val_size of them validate, the rest train; no test split. Seeded by data.seed.
DatasetSpec xor_blobs() {
  return {.build =
              [](const Args& args, const RunConfig::Data& config) {
                const int64_t n = args.required<int64_t>("samples");
                const double noise = args.get<double>("noise", 0.25);
                g_seen.samples = n;
                Generator gen(static_cast<uint64_t>(config.seed) + 1);
                const Tensor corners = randint(0, 2, {n, 2}, kInt64, &gen);
                const Tensor x = corners.to(kFloat32) * 2.0 - 1.0 + randn({n, 2}, {}, &gen) * noise;
                const Tensor y = (corners.select(1, 0) == corners.select(1, 1)).to(kInt64);
                const int64_t val = config.val_size;
                DataSplits out;
                out.train = std::make_shared<data::TensorDataset>(
                    std::vector<Tensor>{x.narrow(0, 0, n - val).contiguous(), y.narrow(0, 0, n - val).contiguous()});
                if (val > 0) {
                  out.val = std::make_shared<data::TensorDataset>(
                      std::vector<Tensor>{x.narrow(0, n - val, val).contiguous(), y.narrow(0, n - val, val).contiguous()});
                }
                out.info = DataInfo{.input_shape = {2}, .num_classes = 2};
                return out;
              },
          .doc = "four Gaussian blobs, XOR-labelled"};
}

RunConfig load(const std::string& text, const std::vector<std::string>& sets = {}) {
  return load_run_config_text(text, "run.yaml", sets);
}

// ---- Args ----

TEST_F(Registry, ArgsReadTypedValuesAndDefaults) {
  register_model("m", hidden_layer_model());
  const RunConfig c = load(
      "model:\n"
      "  name: m\n"
      "  args:\n"
      "    width: 64\n"
      "    scale: 0.5\n"
      "    widths: [8, 16]\n"
      "    name: deep\n"
      "    flag: true\n"
      "    maybe: null\n");
  const Args args("model.args", c.model.args);
  EXPECT_EQ(args.get<int64_t>("width", 1), 64);
  EXPECT_EQ(args.get<int>("width", 1), 64);
  EXPECT_EQ(args.get<double>("scale", 1.0), 0.5);
  EXPECT_EQ(args.get<double>("width", 1.0), 64.0);  // an integer is a number
  EXPECT_EQ(args.get<std::vector<int64_t>>("widths", {}), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(args.get<std::string>("name", ""), "deep");
  EXPECT_TRUE(args.get<bool>("flag", false));
  EXPECT_EQ(args.get<std::optional<int64_t>>("maybe", 3), std::nullopt);  // written null: null, not the default
  EXPECT_EQ(args.get<int64_t>("absent", 7), 7);
  EXPECT_EQ(args.required<int64_t>("width"), 64);
  EXPECT_TRUE(args.contains("scale"));
  EXPECT_FALSE(args.contains("absent"));
  EXPECT_EQ(args.keys(), (std::vector<std::string>{"width", "scale", "widths", "name", "flag", "maybe"}));
  EXPECT_NO_THROW(args.check_all_used("model 'm'"));
}

TEST_F(Registry, ArgsErrorsNameTheKeyTheValueAndWhereItWasWritten) {
  register_model("m", hidden_layer_model());
  register_dataset("d", xor_blobs());
  const RunConfig c = load("model:\n  name: m\n  args:\n    width: wide\n    depth: 2\n");
  const Args args("model.args", c.model.args);
  EXPECT_EQ(error_of([&] { args.get<int64_t>("width", 1); }),
            "model.args.width: expected an integer, found 'wide' (run.yaml line 4)");
  EXPECT_TRUE(contains(error_of([&] { args.required<double>("lr"); }), "model.args.lr: required, and not given"));
  // depth was never read: a misspelt or stale argument is an error, not a silent default.
  EXPECT_EQ(error_of([&] { args.check_all_used("model 'm'"); }),
            "model.args.depth (run.yaml line 5): model 'm' has no argument 'depth' (it read lr, width)");
  const Args none("data.args", trainer::yaml::Node::mapping());
  EXPECT_NO_THROW(none.check_all_used("dataset 'd'"));
  const RunConfig one = load("data:\n  name: d\n  args: {n: 1}\n");
  EXPECT_TRUE(contains(error_of([&] { Args("data.args", one.data.args).check_all_used("dataset 'd'"); }),
                       "dataset 'd' has no argument 'n' (it takes none)"));
}

TEST_F(Registry, SetReachesIntoTheArgsAndTheDumpReadsBack) {
  register_model("m", hidden_layer_model());
  const RunConfig c = load("model:\n  name: m\n  args:\n    width: 8\n    act: relu\n",
                           {"model.args.width=16", "model.args.block.depth=3", "model.args.block.kind=pre",
                            "model.args.block.depth=4"});
  // Replaced in place, then a nested mapping added and an entry of it replaced.
  EXPECT_EQ(trainer::yaml::emit_inline(c.model.args), "{width: 16, act: relu, block: {depth: 4, kind: pre}}");
  EXPECT_EQ(load(dump(c)), c);
  // A whole mapping at once, and null as an empty one.
  EXPECT_EQ(trainer::yaml::emit_inline(load("", {"model.name=m", "model.args={a: 1, b: [2, 3]}"}).model.args),
            "{a: 1, b: [2, 3]}");
  EXPECT_EQ(load("model:\n  name: m\n  args:\n").model.args.size(), 0u);
  EXPECT_TRUE(contains(error_of([&] { load("model:\n  args: [1]\n"); }), "model.args: expected a mapping, found a list"));
  EXPECT_TRUE(contains(error_of([&] { load("", {"model.args.a..b=1"}); }), "has an empty key"));
  // Into a scalar entry: that entry is not a mapping, and the message says which --set tried.
  EXPECT_EQ(error_of([&] { load("", {"model.name=m", "model.args.w=1", "model.args.w.x=2"}); }),
            "--set model.args.w.x=2: model.args.w is '1' (--set model.args.w=1), not a mapping to set 'x' in (set "
            "model.args.w itself to replace it: --set model.args.w={...})");
  // A dot inside a key could never be reached by --set: refused in the file.
  EXPECT_EQ(error_of([&] { load("model:\n  name: m\n  args:\n    inner: {a.b: 1}\n"); }),
            "model.args.inner: key 'a.b' (run.yaml line 4) is empty or holds a dot; nest mappings instead "
            "(model.args.inner.a.b is `a: {b: ...}`)");
  // Strings that read as other types survive the dump, quoted.
  const RunConfig tricky = load("model:\n  name: m\n  args:\n    code: \"007\"\n    answer: 'yes'\n"
                                "    one: \"1\"\n    colon: \"a: b\"\n    \"3\": three\n");
  EXPECT_EQ(load(dump(tricky)), tricky);
  EXPECT_EQ(Args("model.args", tricky.model.args).get<std::string>("code", ""), "007");
}

TEST_F(Registry, SubArgumentsAreCheckedLikeTheTopLevel) {
  register_model("m", hidden_layer_model());
  const RunConfig c = load("model:\n  name: m\n  args:\n    block: {depth: 2, widht: 3}\n    layers: [1, 2]\n");
  const Args args("model.args", c.model.args);
  const Args& block = args.sub("block");
  EXPECT_EQ(block.name(), "model.args.block");
  EXPECT_EQ(block.get<int64_t>("depth", 0), 2);
  EXPECT_EQ(&args.sub("block"), &block);  // the same object each time
  EXPECT_EQ(args.sub("absent").get<int64_t>("x", 5), 5);  // a missing mapping reads as empty
  // The value as written, whatever its kind.
  EXPECT_EQ(trainer::yaml::emit_inline(args.get<trainer::yaml::Node>("layers", {})), "[1, 2]");
  EXPECT_EQ(error_of([&] { args.check_all_used("model 'm'"); }),
            "model.args.block.widht (run.yaml line 4): model 'm' has no argument 'widht' (it read depth)");
  EXPECT_TRUE(contains(error_of([&] { args.sub("layers"); }), "model.args.layers: expected a mapping, found a list"));
}

TEST_F(Registry, TheBuiltInsKeysAreRefusedForRegisteredOnes) {
  register_model("m", hidden_layer_model());
  register_dataset("d", xor_blobs());
  EXPECT_EQ(error_of([] { load("model:\n  name: m\n  hidden: [3]\n"); }),
            "model.hidden: a key of the built-in models; model m takes its own arguments under model.args");
  EXPECT_EQ(error_of([] { load("model:\n  name: m\n  dropout: 0.5\n"); }),
            "model.dropout: a key of the built-in models; model m takes its own arguments under model.args");
  EXPECT_EQ(error_of([] { load("data:\n  name: d\n  horizontal_flip: true\n"); }),
            "data.horizontal_flip: a key of the built-in datasets; dataset d takes its own arguments under data.args");
  // The keys every dataset shares stay free: the loader's, the split's, the path.
  EXPECT_NO_THROW(load("data:\n  name: d\n  batch_size: 7\n  val_size: 3\n  seed: 4\n  path: x\n  normalize: false\n"));
  EXPECT_NO_THROW(load("model:\n  name: m\n  num_classes: 4\n"));
}

TEST_F(Registry, DatasetsAreCheckedWhenBuilt) {
  const auto make = [](std::function<DataSplits()> f) { return DatasetSpec{.build = [f](const Args&, const RunConfig::Data&) { return f(); }}; };
  const Tensor x = zeros({4, 2}), y = zeros({4}, kInt64);
  register_dataset("none", make([] { return DataSplits{}; }));
  register_dataset("empty", make([] {
    DataSplits s;
    s.train = std::make_shared<data::TensorDataset>(std::vector<Tensor>{zeros({0, 2}), zeros({0}, kInt64)});
    s.info = DataInfo{.input_shape = {2}, .num_classes = 2};
    return s;
  }));
  register_dataset("one-class", make([x, y] {
    DataSplits s;
    s.train = std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
    s.info = DataInfo{.input_shape = {2}, .num_classes = 1};
    return s;
  }));
  RunConfig::Data c;
  c.name = "none";
  EXPECT_EQ(error_of([&] { make_data(c); }), "dataset 'none': its build function gave no training set");
  c.name = "empty";
  EXPECT_EQ(error_of([&] { make_data(c); }), "dataset 'empty': its training set is empty");
  c.name = "one-class";
  EXPECT_TRUE(contains(error_of([&] { make_data(c); }), "dataset 'one-class': info.num_classes is 1"));
}

// ---- names ----

TEST_F(Registry, NamesAreCheckedWhenRegistered) {
  EXPECT_EQ(error_of([] { register_model("mlp", hidden_layer_model()); }),
            "register_model: 'mlp' is a built-in model's name");
  EXPECT_EQ(error_of([] { register_dataset("csv", xor_blobs()); }),
            "register_dataset: 'csv' is a built-in dataset's name");
  EXPECT_EQ(error_of([] { register_model("a b", hidden_layer_model()); }),
            "register_model: 'a b' is not a valid name (letters, digits, '-' and '_')");
  EXPECT_EQ(error_of([] { register_model("", hidden_layer_model()); }),
            "register_model: '' is not a valid name (letters, digits, '-' and '_')");
  EXPECT_EQ(error_of([] { register_model("empty", ModelSpec{}); }), "register_model: 'empty' has no build function");
  register_model("wide_mlp-2", hidden_layer_model());
  EXPECT_EQ(error_of([] { register_model("wide_mlp-2", hidden_layer_model()); }),
            "register_model: 'wide_mlp-2' is registered already");
  register_dataset("blobs", xor_blobs());
  register_model("a", hidden_layer_model());
  EXPECT_EQ(registered_models(), (std::vector<std::string>{"a", "wide_mlp-2"}));
  EXPECT_EQ(registered_datasets(), (std::vector<std::string>{"blobs"}));
  EXPECT_TRUE(find_registered_model("a") != nullptr);
  EXPECT_TRUE(find_registered_model("mlp") == nullptr);
}

TEST_F(Registry, ConfigsTakeRegisteredNamesAndListThemWhenWrong) {
  EXPECT_EQ(error_of([] { load("model:\n  name: tiny\n"); }),
            "model.name: expected one of mlp, cnn, resnet-small, gpt-mini, lstm-lm (or a registered model: none in "
            "this program); found 'tiny' (run.yaml line 2)");
  register_model("tiny", hidden_layer_model());
  register_model("other", hidden_layer_model());
  EXPECT_EQ(load("model:\n  name: tiny\n").model.name, "tiny");
  EXPECT_TRUE(contains(error_of([] { load("model:\n  name: tinny\n"); }), "(or a registered model: other, tiny)"));
  EXPECT_TRUE(contains(error_of([] { load("data:\n  name: blobs\n"); }), "(or a registered dataset: none in this program)"));
  // The built-ins keep their own keys; args are for registered ones.
  EXPECT_TRUE(contains(error_of([] { load("model:\n  name: mlp\n  args: {width: 3}\n"); }),
                       "model.args: model.name mlp is built in and takes no arguments there"));
  EXPECT_TRUE(contains(error_of([] { load("data:\n  args: {n: 3}\n"); }),
                       "data.args: data.name fashion-mnist is built in and takes no arguments there"));
  // A registered classifier is no model for text; text needs one registered as a language model.
  EXPECT_TRUE(contains(error_of([] { load("model:\n  name: tiny\ndata:\n  name: text\n  path: x\n"); }),
                       "(or a model registered with language_model = true)"));
}

TEST_F(Registry, BuildChecksWhatTheSpecPromised) {
  register_model("mlp2", hidden_layer_model());
  register_model("not-an-lm", {.build = [](const Args&, const DataInfo&) -> std::shared_ptr<nn::Module> {
                                 return nn::Linear(2, 2).ptr();
                               },
                               .language_model = true});
  register_model("nothing", {.build = [](const Args&, const DataInfo&) { return std::shared_ptr<nn::Module>(); }});
  RunConfig::Model m;
  m.name = "mlp2";
  const DataInfo features{.input_shape = {2}, .num_classes = 3};
  const DataInfo tokens{.input_shape = {8}, .num_classes = 256, .tokens = true};
  const std::shared_ptr<nn::Module> model = make_model(m, features);
  EXPECT_EQ(model->forward(zeros({5, 2})).sizes(), (Shape{5, 3}));
  EXPECT_EQ(g_seen.width, 32);  // the default
  EXPECT_TRUE(contains(error_of([&] { make_model(m, tokens); }),
                       "model 'mlp2' was registered as a classifier (features or images in), but the data gives "
                       "token sequences"));
  m.name = "not-an-lm";
  EXPECT_TRUE(contains(error_of([&] { make_model(m, tokens); }), "does not derive from kiln::tools::LanguageModel"));
  m.name = "nothing";
  EXPECT_EQ(error_of([&] { make_model(m, features); }), "model 'nothing': its build function returned no module");
  // An activation the model refuses, and an argument it never reads.
  m.name = "mlp2";
  m.args = load("model:\n  name: mlp2\n  args: {activation: gelu}\n").model.args;
  EXPECT_TRUE(contains(error_of([&] { make_model(m, features); }), "model.args.activation: relu or tanh"));
  m.args = load("model:\n  name: mlp2\n  args: {widht: 8}\n").model.args;
  EXPECT_TRUE(contains(error_of([&] { make_model(m, features); }),
                       "model 'mlp2' has no argument 'widht' (it read activation, width)"));
}

// ---- a whole run through the command line ----

class RegisteredRun : public Registry {
 protected:
  void SetUp() override {
    Registry::SetUp();
    register_model("hidden", hidden_layer_model());
    register_dataset("xor-blobs", xor_blobs());
    config_ = dir_ / "run.yaml";
    std::ofstream(config_) << "trainer:\n"
                              "  max_epochs: 12\n"
                              "  seed: 0\n"
                              "  accelerator: cpu\n"
                              "  default_root_dir: \"" << (dir_ / "runs") << "\"\n"
                              "  enable_progress_bar: false\n"
                              "  enable_model_summary: false\n"
                              "model:\n"
                              "  name: hidden\n"
                              "  args:\n"
                              "    width: 24\n"
                              "    activation: tanh\n"
                              "data:\n"
                              "  name: xor-blobs\n"
                              "  val_size: 200\n"
                              "  batch_size: 32\n"
                              "  args:\n"
                              "    samples: 1000\n"
                              "optimizer:\n"
                              "  lr: 0.03\n";
  }
  std::string last_ckpt() const { return (dir_.path() / "runs" / "kiln" / "version_0" / "checkpoints" / "last.ckpt").string(); }

  TempDir dir_;
  std::string config_;
};

// The accuracy of a checkpoint's weights on the dataset's validation split, by one forward pass.
double val_accuracy_by_hand(const std::string& ckpt_path) {
  const testing::CheckpointRun run = testing::rebuild_from_checkpoint(ckpt_path);
  NoGradGuard no_grad;
  const auto& val = std::dynamic_pointer_cast<data::TensorDataset>(run.data.val)->tensors();
  const Tensor predicted = argmax(run.module->forward(val[0]), 1);
  return (predicted == val[1]).to(kFloat64).mean().item<double>();
}

TEST_F(RegisteredRun, TrainsEvaluatesAndExportsThroughTheCommandLine) {
  const CliResult r = run_kiln({"train", "--config", config_});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(g_seen.width, 24);
  EXPECT_EQ(g_seen.samples, 1000);
  EXPECT_TRUE(contains(r.out, "no test: data.name xor-blobs has no test split"));
  // The config the checkpoint carries holds the arguments, so eval rebuilds the same model on the same data.
  const trainer::Checkpoint c = trainer::load_checkpoint(last_ckpt());
  EXPECT_TRUE(contains(c.get("hparams.config"), "    width: 24\n"));
  const double by_hand = val_accuracy_by_hand(last_ckpt());
  EXPECT_GT(by_hand, 0.9);  // a linear model cannot pass 0.75 on XOR blobs

  const CliResult eval = run_kiln({"eval", "--ckpt", last_ckpt(), "--split", "val"});
  ASSERT_EQ(eval.status, 0) << eval.err;
  const size_t at = eval.out.find("val/acc ");
  ASSERT_NE(at, std::string::npos) << eval.out;
  EXPECT_NEAR(std::stod(eval.out.substr(at + 8)), by_hand, 1e-4);
  const CliResult test = run_kiln({"eval", "--ckpt", last_ckpt()});
  EXPECT_EQ(test.status, 1);
  EXPECT_TRUE(contains(test.err, "--split test: the run's data (data.name xor-blobs) has no test split (the dataset "
                                 "gave none)"));

  const CliResult predict = run_kiln({"predict", "--ckpt", last_ckpt(), "--split", "val", "--output", dir_ / "p.csv"});
  EXPECT_EQ(predict.status, 0) << predict.err;
  const CliResult exported = run_kiln({"export", "--ckpt", last_ckpt(), "--output", dir_ / "m.safetensors"});
  EXPECT_EQ(exported.status, 0) << exported.err;
  EXPECT_TRUE(fs::exists(dir_ / "m.safetensors"));

  // A program that did not register the model (the stock `kiln`) says which name it does not know.
  clear_registry();
  const CliResult stock = run_kiln({"eval", "--ckpt", last_ckpt(), "--split", "val"});
  EXPECT_EQ(stock.status, 1);
  EXPECT_TRUE(contains(stock.err, "(or a registered model: none in this program); found 'hidden'"));
}

TEST_F(RegisteredRun, HistogramsOfTheWeightsGoToTensorBoard) {
  // 800 training examples in batches of 32: 25 steps an epoch; 2 epochs; every 10 steps: 0, 10, 20, 30, 40.
  const CliResult r = run_kiln({"train", "--config", config_, "--set", "trainer.max_epochs=2", "--set",
                                "logger.histogram_every_n_steps=10", "--set", "trainer.accumulate_grad_batches=1"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<std::string, std::vector<int64_t>> steps;
  std::map<std::string, test::TfHistogram> first;
  for (const auto& e : fs::directory_iterator(dir_.path() / "runs" / "kiln" / "version_0")) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    for (const test::TfEvent& event : test::read_tfevents(e.path().string())) {
      for (const test::TfValue& v : event.values) {
        if (!v.histo) continue;
        steps[v.tag].push_back(event.step);
        if (!first.count(v.tag)) first[v.tag] = *v.histo;
      }
    }
  }
  const std::vector<int64_t> expected{0, 10, 20, 30, 40};
  // The hidden model's parameters under the network's names: two linear layers, weight and bias each.
  ASSERT_EQ(steps.size(), 4u);
  for (const char* tag : {"weights/0.weight", "weights/0.bias", "weights/2.weight", "weights/2.bias"}) {
    EXPECT_EQ(steps[tag], expected) << tag;
  }
  EXPECT_EQ(first["weights/0.weight"].num, 2 * 24);  // (24, 2)
  EXPECT_EQ(first["weights/2.bias"].num, 2);
  // Histograms need TensorBoard.
  const CliResult no_tb = run_kiln({"train", "--config", config_, "--set", "logger.tensorboard=false", "--set",
                                    "logger.histogram_every_n_steps=10"});
  EXPECT_EQ(no_tb.status, 1);
  EXPECT_TRUE(contains(no_tb.err, "logger.histogram_every_n_steps (10) needs logger.tensorboard"));
}

TEST_F(RegisteredRun, ALinearModelCannotFitTheData) {
  // The control for the test above: width 0 is refused by nn::Linear, so register a linear model instead.
  register_model("linear", {.build = [](const Args&, const DataInfo& data) -> std::shared_ptr<nn::Module> {
                              return nn::Linear(data.input_shape[0], data.num_classes).ptr();
                            }});
  const CliResult r = run_kiln({"train", "--config", config_, "--set", "model.name=linear", "--set", "model.args={}"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_LT(val_accuracy_by_hand(last_ckpt()), 0.75);
}

TEST_F(RegisteredRun, ArgumentMistakesStopTheRunBeforeTraining) {
  CliResult r = run_kiln({"train", "--config", config_, "--set", "model.args.widht=8"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "model.args.widht (--set model.args.widht=8): model 'hidden' has no argument 'widht' "
                              "(it read activation, width)"));
  r = run_kiln({"train", "--config", config_, "--set", "data.args.samples=many"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "data.args.samples: expected an integer, found 'many' (--set data.args.samples=many)"));
  r = run_kiln({"train", "--config", config_, "--set", "data.args={}"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "data.args.samples: required, and not given"));
  EXPECT_FALSE(fs::exists(dir_.path() / "runs" / "kiln" / "version_0" / "checkpoints"));
  // --help lists what the program registered.
  r = run_kiln({"train", "--help"});
  EXPECT_TRUE(contains(r.out, "registered models (this program's own):\n  hidden: one hidden layer of model.args.width\n"));
  EXPECT_TRUE(contains(r.out, "registered datasets (this program's own):\n  xor-blobs: four Gaussian blobs, XOR-labelled\n"));
}

}  // namespace registry_test
}  // namespace kiln::tools

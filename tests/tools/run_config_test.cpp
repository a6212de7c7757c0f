// Tests of `kiln train`'s config: the shipped configs/fashion_mnist_cnn.yaml loads to the main job, `--set`
// overrides apply, the dump reads back to an equal config, and the checks across keys catch what they should.
// KILN_CONFIGS_DIR (a compile definition) names the repository's configs/ folder; without it the test looks
// for configs/ under the working directory.
#include <gtest/gtest.h>

#include "kiln/optim/optim.h"
#include "kiln/tensor/error.h"
#include "kiln/tools/classifier.h"
#include "kiln/tools/run_config.h"

#ifndef KILN_CONFIGS_DIR
#define KILN_CONFIGS_DIR "configs"
#endif

using kiln::tools::RunConfig;
using kiln::trainer::BatchLimit;

namespace {

const std::string kShipped = std::string(KILN_CONFIGS_DIR) + "/fashion_mnist_cnn.yaml";

std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    kiln::tools::load_run_config_text(text, "run.yaml", overrides);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(RunConfig, ShippedConfigIsTheMainJob) {
  RunConfig c = kiln::tools::load_run_config(kShipped);
  // What the file says, on top of the defaults; everything else stays as RunConfig{} has it.
  RunConfig expected;
  expected.trainer.max_epochs = 3;
  expected.model.name = "cnn";
  expected.model.channels = {32, 64};
  expected.model.fc = 128;
  expected.data.name = "fashion-mnist";
  expected.data.path = "/usr/share/datasets/fashion-mnist";
  expected.data.batch_size = 64;
  expected.optimizer.name = "adam";
  expected.optimizer.lr = 1e-3;
  expected.scheduler.name = "cosine";
  expected.scheduler.interval = "step";
  expected.callbacks.checkpoint.monitor = "val/acc";
  expected.callbacks.checkpoint.mode = "max";
  expected.logger.name = "fashion_mnist_cnn";
  EXPECT_EQ(c, expected) << kiln::tools::dump(c);
  EXPECT_TRUE(c.logger.csv && c.logger.tensorboard);
  EXPECT_EQ(kiln::tools::data_path(c.data), "/usr/share/datasets/fashion-mnist");
}

// What the two shipped language-model configs share: the text and its split, ten epochs, the schedule and the
// checkpoint kept by validation loss.
RunConfig shipped_language_model_run(const std::string& model, const std::string& logger_name) {
  RunConfig c;
  c.trainer.max_epochs = 10;
  c.trainer.seed = 0;
  c.trainer.log_every_n_steps = 10;
  c.model.name = model;
  c.model.layers = 2;
  c.data.name = "text";
  c.data.path = "/usr/share/common-licenses";
  c.data.block_size = 64;
  c.data.batch_size = 32;
  c.data.val_size = 200;
  c.optimizer.name = "adamw";
  c.scheduler.name = "warmup_cosine";
  c.scheduler.interval = "step";
  c.scheduler.warmup = 100;
  c.callbacks.checkpoint.monitor = "val/loss";
  c.callbacks.checkpoint.mode = "min";
  c.logger.name = logger_name;
  return c;
}

TEST(RunConfig, ShippedGptMiniConfigIsALanguageModelOnDebiansLicenses) {
  RunConfig c = kiln::tools::load_run_config(std::string(KILN_CONFIGS_DIR) + "/gpt_mini.yaml");
  RunConfig expected = shipped_language_model_run("gpt-mini", "gpt_mini");
  expected.model.heads = 4;
  expected.model.embed_dim = 128;
  expected.optimizer.lr = 3e-3;
  expected.optimizer.weight_decay = 0.1;
  expected.optimizer.betas = {0.9, 0.95};
  EXPECT_EQ(c, expected) << kiln::tools::dump(c);
}

TEST(RunConfig, ShippedLstmLmConfigIsGptMinisRunWithAnLstm) {
  RunConfig c = kiln::tools::load_run_config(std::string(KILN_CONFIGS_DIR) + "/lstm_lm.yaml");
  RunConfig expected = shipped_language_model_run("lstm-lm", "lstm_lm");
  expected.trainer.gradient_clip_val = 1.0;
  expected.model.embed_dim = 160;
  expected.optimizer.lr = 1e-2;
  expected.optimizer.weight_decay = 0.01;
  EXPECT_EQ(c, expected) << kiln::tools::dump(c);
}

TEST(RunConfig, Defaults) {
  RunConfig c = kiln::tools::load_run_config_text("", "empty.yaml");
  EXPECT_EQ(c, RunConfig{});
  EXPECT_EQ(c.trainer.precision, "32");
  EXPECT_EQ(c.trainer.limit_train_batches, BatchLimit::of_fraction(1.0));
  EXPECT_DOUBLE_EQ(c.scheduler.start_factor, 1.0 / 3.0);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(kiln::tools::data_path(c.data), "/usr/share/datasets/fashion-mnist");
}

TEST(RunConfig, Overrides) {
  RunConfig c = kiln::tools::load_run_config(
      kShipped, {"trainer.max_epochs=5", "model.hidden=[256,128]", "trainer.max_time=00:01:00:00", "trainer.fast_dev_run=true",
                 "trainer.limit_train_batches=10", "trainer.val_check_interval=0.5", "trainer.seed=42", "trainer.precision=16-mixed",
                 "callbacks.early_stopping.enabled=true", "callbacks.timer.duration=90", "trainer.ckpt_path=last",
                 "data.path=null", "trainer.strategy=ddp", "trainer.ddp_backend=gloo",
                 "trainer.ddp_find_unused_parameters=true", "trainer.sync_batchnorm=true",
                 "trainer.detect_anomaly=true",
                 "trainer.overfit_batches=3"});
  EXPECT_EQ(c.trainer.max_epochs, 5);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(c.trainer.max_time, 3600.0);
  EXPECT_EQ(c.trainer.fast_dev_run, 1);
  EXPECT_EQ(c.trainer.limit_train_batches, BatchLimit::of_count(10));
  EXPECT_EQ(c.trainer.val_check_interval, BatchLimit::of_fraction(0.5));
  EXPECT_EQ(c.trainer.seed, 42);
  EXPECT_EQ(c.trainer.precision, "16-mixed");
  EXPECT_TRUE(c.callbacks.early_stopping.enabled);
  EXPECT_EQ(c.callbacks.timer.duration, 90.0);
  EXPECT_EQ(c.trainer.ckpt_path, "last");
  EXPECT_EQ(c.data.path, std::nullopt);
  EXPECT_EQ(c.trainer.strategy, "ddp");
  EXPECT_EQ(c.trainer.ddp_backend, "gloo");
  EXPECT_TRUE(c.trainer.ddp_find_unused_parameters);
  EXPECT_TRUE(c.trainer.sync_batchnorm);
  EXPECT_TRUE(c.trainer.detect_anomaly);
  EXPECT_EQ(c.trainer.overfit_batches, BatchLimit::of_count(3));
  EXPECT_EQ(c.callbacks.checkpoint.monitor, "val/acc");  // untouched keys keep the file's values
}

TEST(RunConfig, DumpLoadsBackToTheSameConfig) {
  RunConfig shipped = kiln::tools::load_run_config(kShipped);
  RunConfig changed = shipped;
  changed.trainer.max_time = 12.5;
  changed.trainer.seed = 7;
  changed.trainer.limit_val_batches = BatchLimit::of_count(3);
  changed.trainer.default_root_dir = "runs: today";
  changed.model.num_classes = 10;
  changed.scheduler.name = "multistep";
  changed.scheduler.milestones = {2, 5};
  changed.scheduler.max_lr = 0.1;
  changed.callbacks.checkpoint.filename = "{epoch}-{val/acc:.3f}";
  changed.callbacks.early_stopping.stopping_threshold = 0.95;
  changed.logger.version = 3;
  for (const RunConfig& c : {RunConfig{}, shipped, changed}) {
    std::string text = kiln::tools::dump(c);
    RunConfig back = kiln::tools::load_run_config_text(text, "config.yaml");
    EXPECT_EQ(back, c) << text;
    EXPECT_EQ(kiln::tools::dump(back), text);
  }
}

TEST(RunConfig, DumpListsEveryKeyInSchemaOrder) {
  std::string text = kiln::tools::dump(RunConfig{});
  EXPECT_EQ(text.substr(0, 48), "trainer:\n  max_epochs: 3\n  min_epochs: 0\n  max_s");
  size_t last = 0;
  for (const char* section : {"trainer:\n", "model:\n", "data:\n", "optimizer:\n", "scheduler:\n", "callbacks:\n",
                              "  checkpoint:\n", "  early_stopping:\n", "  lr_monitor: false\n", "  timer:\n", "  weight_averaging:\n",
                              "logger:\n"}) {
    size_t at = text.find(section);
    ASSERT_NE(at, std::string::npos) << section;
    EXPECT_GE(at, last) << section;
    last = at;
  }
  EXPECT_NE(text.find("  precision: \"32\"\n"), std::string::npos) << text;  // a string, so it reads back as one
  EXPECT_NE(text.find("    filename: \"epoch={epoch}-step={step}\"\n"), std::string::npos) << text;
  for (const auto& key : kiln::tools::run_config_schema().keys()) {
    std::string leaf = key->path.substr(key->path.rfind('.') + 1);
    EXPECT_NE(text.find(" " + leaf + ":"), std::string::npos) << key->path;
  }
}

TEST(RunConfig, HelpListsEveryKey) {
  std::string help = kiln::tools::run_config_help();
  const auto& keys = kiln::tools::run_config_schema().keys();
  EXPECT_GE(keys.size(), 90u);
  for (const auto& key : keys) {
    std::string leaf = key->path.substr(key->path.rfind('.') + 1);
    EXPECT_NE(help.find(" " + leaf + ": "), std::string::npos) << key->path;
    EXPECT_NE(help.find("# " + key->type + ": " + key->doc + "\n"), std::string::npos) << key->path;
  }
  for (const char* header : {"trainer:", "model:", "data:", "optimizer:", "scheduler:", "callbacks:", "  checkpoint:",
                             "  early_stopping:", "  timer:", "logger:"}) {
    EXPECT_NE(("\n" + help).find(std::string("\n") + header + " "), std::string::npos) << header;
  }
  EXPECT_NE(help.find("  accelerator: auto                       # one of auto|cpu|cuda: where to train"), std::string::npos) << help;
  // The help is a config of the defaults, ready to copy.
  EXPECT_EQ(kiln::tools::load_run_config_text(help, "help"), RunConfig{});
}

TEST(RunConfig, ErrorsNameKeyFileAndLine) {
  EXPECT_EQ(load_error("trainer:\n  max_epoch: 3\n"), "unknown key 'trainer.max_epoch' (run.yaml line 2); did you mean 'trainer.max_epochs'?");
  EXPECT_EQ(load_error("trainer:\n  max_epochs: three\n"), "trainer.max_epochs: expected an integer, found 'three' (run.yaml line 2)");
  EXPECT_EQ(load_error("trainer:\n  lr: 0.1\n"), "unknown key 'trainer.lr' (run.yaml line 2); did you mean 'optimizer.lr'?");
  EXPECT_EQ(load_error("optimiser:\n  lr: 0.1\n"), "unknown key 'optimiser' (run.yaml line 1); did you mean 'optimizer'?");
  EXPECT_EQ(load_error("callbacks:\n  checkpoint:\n    save_topk: 2\n"),
            "unknown key 'callbacks.checkpoint.save_topk' (run.yaml line 3); did you mean 'callbacks.checkpoint.save_top_k'?");
  EXPECT_EQ(load_error("trainer:\n  accelerator: gpu\n"), "trainer.accelerator: expected one of auto, cpu, cuda; found 'gpu' (run.yaml line 2)");
  EXPECT_EQ(load_error("trainer:\n  precision: 16\n"), "trainer.precision: expected one of 32, 16-mixed, bf16-mixed; found '16' (run.yaml line 2)");
  EXPECT_EQ(load_error("", {"trainer.max_epochs"}), "--set expects key=value (like trainer.max_epochs=5), got 'trainer.max_epochs'");
}

TEST(RunConfig, SingleKeyChecks) {
  EXPECT_EQ(load_error("data:\n  batch_size: 0\n"), "data.batch_size: expected a value >= 1, found '0' (run.yaml line 2)");
  EXPECT_EQ(load_error("trainer:\n  max_epochs: -2\n"), "trainer.max_epochs: expected a value >= -1, found '-2' (run.yaml line 2)");
  EXPECT_EQ(load_error("", {"model.hidden=[256, 0]"}), "model.hidden[1]: expected a value >= 1, found '0' (--set model.hidden=[256, 0])");
  EXPECT_EQ(load_error("trainer:\n  limit_train_batches: 2.0\n"),
            "trainer.limit_train_batches: expected a number of batches (an integer >= 0) or a fraction (a float in [0.0, 1.0]), "
            "found '2.0' (run.yaml line 2)");
}

TEST(RunConfig, CrossKeyChecks) {
  EXPECT_EQ(load_error("optimizer:\n  lr: 0\n"), "optimizer.lr must be > 0, found 0");
  EXPECT_EQ(load_error("optimizer:\n  betas: [0.9, 1.0]\n"), "optimizer.betas[1] must be in [0, 1), found 1");
  EXPECT_EQ(load_error("optimizer:\n  betas: [0.9]\n"), "optimizer.betas: expected two numbers, found 1");
  EXPECT_EQ(load_error("trainer:\n  accelerator: cuda\n  devices: 2\n"),
            "trainer.devices: 2 devices need trainer.strategy ddp or parameter_server, found 'auto'");
  EXPECT_EQ(load_error("", {"trainer.accelerator=cuda", "trainer.devices=2", "trainer.strategy=ddp"}), "(no error)");
  EXPECT_EQ(load_error("trainer:\n  min_epochs: 5\n  max_epochs: 2\n"), "trainer.min_epochs (5) must not exceed trainer.max_epochs (2)");
  EXPECT_EQ(load_error("trainer:\n  min_epochs: 5\n  max_epochs: -1\n"), "(no error)");
  EXPECT_EQ(load_error("scheduler:\n  name: multistep\n"), "scheduler.name multistep needs scheduler.milestones, found []");
  EXPECT_EQ(load_error("scheduler:\n  milestones: [5, 3]\n"), "scheduler.milestones must increase, found 5 then 3");
  EXPECT_EQ(load_error("callbacks:\n  checkpoint:\n    save_top_k: 3\n"),
            "callbacks.checkpoint.save_top_k 3 needs callbacks.checkpoint.monitor: without a metric only the latest checkpoint can be kept");
  EXPECT_EQ(load_error("data:\n  name: idx\n"), "data.name idx needs data.path (a folder)");
  EXPECT_EQ(load_error("optimizer:\n  nesterov: true\n"), "optimizer.nesterov needs optimizer.name sgd with momentum > 0, found adam with momentum 0");
  EXPECT_EQ(load_error("model:\n  dropout: 1.0\n"), "model.dropout must be in [0, 1), found 1");
  EXPECT_EQ(load_error("trainer:\n  val_check_interval: 0\n"), "trainer.val_check_interval: a number of batches must be >= 1, found 0");
  EXPECT_EQ(load_error("", {"callbacks.weight_averaging.decay=1.5"}), "callbacks.weight_averaging.decay must be in [0, 1], got 1.5");
  EXPECT_EQ(load_error("", {"callbacks.weight_averaging.enabled=true", "callbacks.weight_averaging.decay=0.999",
                            "callbacks.weight_averaging.start_epoch=2"}),
            "(no error)");
}

TEST(RunConfig, MissingFile) {
  try {
    kiln::tools::load_run_config("no/such/run.yaml");
    FAIL() << "expected an error";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open config file 'no/such/run.yaml'");
  }
}

TEST(RunConfig, DataPath) {
  RunConfig::Data d;
  d.name = "mnist";
  EXPECT_THROW(kiln::tools::data_path(d), kiln::Error);
  d.path = "/data/mnist";
  EXPECT_EQ(kiln::tools::data_path(d), "/data/mnist");
  d = {};
  d.name = "synthetic";
  EXPECT_EQ(kiln::tools::data_path(d), "");
}

// Each optimizer name makes its optimizer with the keys that apply to it, and an unset eps or alpha is the
// optimizer's own default (as torch.optim's), not one number for all.
TEST(RunConfig, EveryOptimizerNameMakesItsOptimizerWithItsOwnDefaults) {
  struct Case {
    std::string name, type, keys;
    std::map<std::string, double> want;  // group options
  };
  const std::vector<Case> cases = {
      {"sgd", "SGD", "  momentum: 0.5\n", {{"momentum", 0.5}}},
      {"adam", "Adam", "", {{"eps", 1e-8}, {"beta1", 0.9}}},
      {"adamw", "AdamW", "  eps: 1.0e-6\n", {{"eps", 1e-6}}},
      {"rmsprop", "RMSprop", "", {{"eps", 1e-8}, {"alpha", 0.99}}},
      {"rmsprop", "RMSprop", "  alpha: 0.9\n", {{"alpha", 0.9}}},
      {"adagrad", "Adagrad", "", {{"eps", 1e-10}}},
      {"adamax", "Adamax", "", {{"eps", 1e-8}}},
      {"nadam", "NAdam", "", {{"eps", 1e-8}}},
      {"radam", "RAdam", "", {{"eps", 1e-8}}},
      {"adadelta", "Adadelta", "  rho: 0.95\n", {{"eps", 1e-6}, {"rho", 0.95}}},
      {"rprop", "Rprop", "  etas: [0.4, 1.3]\n  step_sizes: [1.0e-5, 10]\n",
       {{"etaminus", 0.4}, {"etaplus", 1.3}, {"step_size_min", 1e-5}, {"step_size_max", 10}}},
      {"asgd", "ASGD", "  lambd: 0.001\n  t0: 100\n", {{"lambd", 1e-3}, {"alpha", 0.75}, {"t0", 100}}},
  };
  for (const Case& c : cases) {
    RunConfig rc = kiln::tools::load_run_config_text("optimizer:\n  name: " + c.name + "\n  lr: 0.1\n" + c.keys,
                                                     "run.yaml");
    kiln::Tensor p = kiln::zeros({2});
    p.requires_grad_();
    auto opt = kiln::tools::make_optimizer(rc.optimizer, {p});
    EXPECT_EQ(std::string(opt->name()), c.type);
    EXPECT_EQ(opt->param_groups()[0].lr(), 0.1) << c.name;
    for (const auto& [key, value] : c.want) EXPECT_EQ(opt->param_groups()[0].get(key), value) << c.name << " " << key;
  }
  EXPECT_EQ(load_error("optimizer:\n  name: rprop\n  etas: [1.2, 0.5]\n"),
            "optimizer.etas: expected [down, up] with 0 < down < 1 < up, found [1.2, 0.5]");
  EXPECT_EQ(load_error("optimizer:\n  name: rprop\n  step_sizes: [1, 0.5]\n"),
            "optimizer.step_sizes: expected [min, max] with 0 <= min <= max, found [1, 0.5]");
  EXPECT_EQ(load_error("optimizer:\n  name: rprop\n  weight_decay: 0.1\n"),
            "optimizer.weight_decay: rprop takes none (as torch.optim.Rprop), found 0.1");
  EXPECT_EQ(load_error("optimizer:\n  rho: 1.5\n"), "optimizer.rho must be in [0, 1], found 1.5");
  EXPECT_EQ(load_error("optimizer:\n  eps: 0\n"), "optimizer.eps must be > 0, found 0");
}

// Every schedule the config can name becomes its scheduler, over a run of 3 epochs of 10 steps, with the
// lengths the config leaves open filled from the run.
TEST(RunConfig, EveryScheduleNameMakesItsScheduler) {
  const std::vector<std::pair<std::string, std::string>> names = {
      {"step", "StepLR"}, {"multistep", "MultiStepLR"}, {"exponential", "ExponentialLR"},
      {"cosine", "CosineAnnealingLR"}, {"linear", "LinearLR"}, {"onecycle", "OneCycleLR"},
      {"warmup_cosine", "SequentialLR"}, {"cosine_restarts", "CosineAnnealingWarmRestarts"},
      {"polynomial", "PolynomialLR"}, {"cyclic", "CyclicLR"}, {"plateau", ""}};
  for (const auto& [name, type] : names) {
    const std::string extra = name == "multistep"       ? "  milestones: [1, 2]\n"
                              : name == "warmup_cosine" ? "  warmup: 1\n"
                                                        : "";
    RunConfig c = kiln::tools::load_run_config_text("optimizer:\n  name: sgd\n  lr: 0.1\n  momentum: 0.9\n"
                                                    "scheduler:\n  name: " + name + "\n" + extra, "run.yaml");
    kiln::Tensor p = kiln::zeros({2});
    p.requires_grad_();
    auto opt = kiln::tools::make_optimizer(c.optimizer, {p});
    auto s = kiln::tools::make_scheduler(c.scheduler, *opt, 3, 10);
    ASSERT_TRUE(s.has_value()) << name;
    if (type.empty()) {
      EXPECT_NE(s->plateau, nullptr) << name;
      continue;
    }
    ASSERT_NE(s->scheduler, nullptr) << name;
    EXPECT_EQ(std::string(s->scheduler->name()), type);
    if (name == "polynomial") {  // t_max: the run's 3 epochs
      for (int e = 0; e < 3; ++e) s->scheduler->step();
      EXPECT_EQ(opt->param_groups()[0].lr(), 0.0);
    }
    if (name == "cyclic") {  // from optimizer.lr up to 10 x over two epochs of steps, momentum against it
      EXPECT_EQ(s->interval, "step");
      EXPECT_DOUBLE_EQ(opt->param_groups()[0].lr(), 0.1);
      for (int t = 0; t < 20; ++t) s->scheduler->step();
      EXPECT_DOUBLE_EQ(opt->param_groups()[0].lr(), 1.0);
      EXPECT_DOUBLE_EQ(opt->param_groups()[0].get("momentum"), 0.8);
    }
  }
  EXPECT_NE(load_error("scheduler:\n  cycle_mode: sawtooth\n").find("triangular, triangular2, exp_range"),
            std::string::npos);
}

// Tests of the typed config schema on a small schema of its own: defaults, file values, `--set` overrides,
// one test per kind of error (with the exact message a user sees), the dump/load round trip and the help
// text. The concrete schema of `kiln train` is tested in tests/tools/run_config_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/tensor/error.h"
#include "kiln/trainer/config.h"

using kiln::trainer::BatchLimit;
using kiln::trainer::Schema;

namespace {

struct Loop {
  int max_epochs = 3;
  std::optional<int64_t> seed;
  std::string accelerator = "auto";
  BatchLimit limit = BatchLimit::of_fraction(1.0);
  std::optional<double> max_time;
  int fast_dev_run = 0;
  bool deterministic = false;
  double lr = 1e-3;
  bool operator==(const Loop&) const = default;
};

struct Early {
  int patience = 3;
  std::vector<double> betas{0.9, 0.999};
  std::optional<std::string> monitor;
  bool operator==(const Early&) const = default;
};

struct Hooks {
  Early early;
  bool lr_monitor = false;
  bool operator==(const Hooks&) const = default;
};

struct Model {
  std::vector<int> hidden{512, 256};
  std::vector<std::string> tags;
  std::string name = "cnn";
  bool operator==(const Model&) const = default;
};

struct TestConfig {
  std::string comment = "hello";
  Loop loop;
  Model model;
  Hooks hooks;
  bool operator==(const TestConfig&) const = default;
};

const Schema<TestConfig>& schema() {
  static const Schema<TestConfig> s = [] {
    Schema<TestConfig> built;
    built.add("comment", &TestConfig::comment, "a free-form note");
    auto loop = built.section("loop", &TestConfig::loop, "the loop");
    loop.add("max_epochs", &Loop::max_epochs, "epochs to run").at_least(-1);
    loop.add("seed", &Loop::seed, "the seed");
    loop.add_enum("accelerator", &Loop::accelerator, {"auto", "cpu", "cuda"}, "where to run");
    loop.add("limit", &Loop::limit, "batches per epoch");
    loop.add_duration("max_time", &Loop::max_time, "time budget");
    loop.add("fast_dev_run", &Loop::fast_dev_run, "a quick check").accept_bool().at_least(0);
    loop.add("deterministic", &Loop::deterministic, "deterministic kernels");
    loop.add("lr", &Loop::lr, "learning rate");
    auto model = built.section("model", &TestConfig::model);
    model.add("hidden", &Model::hidden, "hidden widths");
    model.add("tags", &Model::tags, "labels");
    model.add("name", &Model::name, "the name");
    auto hooks = built.section("hooks", &TestConfig::hooks, "callbacks");
    auto early = hooks.section("early", &Hooks::early, "early stopping");
    early.add("patience", &Early::patience, "checks without improvement");
    early.add("betas", &Early::betas, "two numbers");
    early.add("monitor", &Early::monitor, "the metric");
    hooks.add("lr_monitor", &Hooks::lr_monitor, "log the learning rate");
    built.add_check([](const TestConfig& c) {
      KILN_CHECK(c.loop.accelerator != "cuda" || c.loop.max_epochs != 0, "loop.accelerator cuda needs loop.max_epochs != 0");
    });
    return built;
  }();
  return s;
}

TestConfig load(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return schema().load_text(text, "run.yaml", overrides);
}

std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    load(text, overrides);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Config, DefaultsComeFromTheStruct) {
  EXPECT_EQ(load(""), TestConfig{});
  EXPECT_EQ(load("# nothing\nloop:\nhooks:\n  early:\n"), TestConfig{});
}

TEST(Config, FileValues) {
  TestConfig c = load(
      "comment: 'it''s mine'\n"
      "loop:\n"
      "  max_epochs: 10\n"
      "  seed: 42\n"
      "  accelerator: cuda\n"
      "  limit: 0.25\n"
      "  max_time: 00:01:30:00\n"
      "  fast_dev_run: true\n"
      "  deterministic: true\n"
      "  lr: 3e-4\n"
      "model:\n"
      "  hidden:\n"
      "    - 64\n"
      "    - 32\n"
      "  tags: [a, 'b c']\n"
      "hooks:\n"
      "  early: {patience: 5, betas: [0.5, 1], monitor: val/acc}\n");
  EXPECT_EQ(c.comment, "it's mine");
  EXPECT_EQ(c.loop.max_epochs, 10);
  EXPECT_EQ(c.loop.seed, 42);
  EXPECT_EQ(c.loop.accelerator, "cuda");
  EXPECT_EQ(c.loop.limit, BatchLimit::of_fraction(0.25));
  EXPECT_EQ(c.loop.max_time, 5400.0);
  EXPECT_EQ(c.loop.fast_dev_run, 1);
  EXPECT_TRUE(c.loop.deterministic);
  EXPECT_DOUBLE_EQ(c.loop.lr, 3e-4);
  EXPECT_EQ(c.model.hidden, (std::vector<int>{64, 32}));
  EXPECT_EQ(c.model.tags, (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(c.model.name, "cnn");
  EXPECT_EQ(c.hooks.early.patience, 5);
  EXPECT_EQ(c.hooks.early.betas, (std::vector<double>{0.5, 1.0}));
  EXPECT_EQ(c.hooks.early.monitor, "val/acc");
}

TEST(Config, Overrides) {
  TestConfig c = load("loop:\n  max_epochs: 10\n  seed: 1\n",
                      {"loop.max_epochs=5", "model.hidden=[256,128]", "hooks.early.patience=7", "loop.seed=null",
                       "model.name=resnet", "model.name= 'x: y' ", "loop.max_time=90", "loop.limit=20"});
  EXPECT_EQ(c.loop.max_epochs, 5);
  EXPECT_EQ(c.model.hidden, (std::vector<int>{256, 128}));
  EXPECT_EQ(c.hooks.early.patience, 7);
  EXPECT_EQ(c.loop.seed, std::nullopt);
  EXPECT_EQ(c.model.name, "x: y");  // the later of two overrides wins
  EXPECT_EQ(c.loop.max_time, 90.0);
  EXPECT_EQ(c.loop.limit, BatchLimit::of_count(20));
}

TEST(Config, UnknownKeySuggestsTheNearest) {
  EXPECT_EQ(load_error("loop:\n  max_epoch: 3\n"), "unknown key 'loop.max_epoch' (run.yaml line 2); did you mean 'loop.max_epochs'?");
  EXPECT_EQ(load_error("hooks:\n  early:\n    patienc: 1\n"),
            "unknown key 'hooks.early.patienc' (run.yaml line 3); did you mean 'hooks.early.patience'?");
  // The right key in the wrong section.
  EXPECT_EQ(load_error("model:\n  lr: 0.1\n"), "unknown key 'model.lr' (run.yaml line 2); did you mean 'loop.lr'?");
  EXPECT_EQ(load_error("zzzzzzzz: 1\n"), "unknown key 'zzzzzzzz' (run.yaml line 1)");
}

TEST(Config, UnknownSection) {
  EXPECT_EQ(load_error("lop:\n  max_epochs: 3\n"), "unknown key 'lop' (run.yaml line 1); did you mean 'loop'?");
  EXPECT_EQ(load_error("hooks:\n  erly:\n    patience: 1\n"), "unknown key 'hooks.erly' (run.yaml line 2); did you mean 'hooks.early'?");
  EXPECT_EQ(load_error("loop: 5\n"), "loop: expected a section (a mapping of keys), found '5' (run.yaml line 1)");
  EXPECT_EQ(load_error("- a\n"), "config: expected a mapping of sections and keys, found a list (run.yaml line 1)");
  EXPECT_EQ(load_error("loop.max_epochs: 3\n"),
            "key 'loop.max_epochs' (run.yaml line 1): write dotted keys as nested sections in a config file");
}

TEST(Config, WrongType) {
  EXPECT_EQ(load_error("loop:\n  max_epochs: three\n"), "loop.max_epochs: expected an integer, found 'three' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  max_epochs: '3'\n"), "loop.max_epochs: expected an integer, found \"3\" (quoted) (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  max_epochs:\n"), "loop.max_epochs: expected an integer, found null (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  max_epochs: 1.5\n"), "loop.max_epochs: expected an integer, found '1.5' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  max_epochs: 3000000000\n"),
            "loop.max_epochs: expected an integer between -2147483648 and 2147483647, found '3000000000' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  max_epochs: -2\n"), "loop.max_epochs: expected a value >= -1, found '-2' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  deterministic: 1\n"), "loop.deterministic: expected true or false, found '1' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  lr: fast\n"), "loop.lr: expected a number, found 'fast' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  fast_dev_run: yes\n"),
            "loop.fast_dev_run: expected an integer or a boolean, found 'yes' (run.yaml line 2)");
  EXPECT_EQ(load_error("model:\n  hidden: 256\n"), "model.hidden: expected a list of int, found '256' (run.yaml line 2)");
  EXPECT_EQ(load_error("model:\n  hidden: [1, x]\n"), "model.hidden[1]: expected an integer, found 'x' (run.yaml line 2)");
  EXPECT_EQ(load_error("model:\n  name: [a]\n"), "model.name: expected a string, found a list (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  seed: {a: 1}\n"), "loop.seed: expected an integer, found a mapping (run.yaml line 2)");
}

TEST(Config, BatchLimit) {
  EXPECT_EQ(load("loop:\n  limit: 10\n").loop.limit, BatchLimit::of_count(10));
  EXPECT_EQ(load("loop:\n  limit: 1.0\n").loop.limit, BatchLimit::of_fraction(1.0));
  EXPECT_EQ(load("loop:\n  limit: 1\n").loop.limit, BatchLimit::of_count(1));
  const char* expected = "a number of batches (an integer >= 0) or a fraction (a float in [0.0, 1.0])";
  EXPECT_EQ(load_error("loop:\n  limit: 1.5\n"), std::string("loop.limit: expected ") + expected + ", found '1.5' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  limit: -1\n"), std::string("loop.limit: expected ") + expected + ", found '-1' (run.yaml line 2)");
  EXPECT_EQ(BatchLimit::of_count(10).resolve(100), 10);
  EXPECT_EQ(BatchLimit::of_count(1000).resolve(100), 100);
  EXPECT_EQ(BatchLimit::of_fraction(0.25).resolve(10), 2);
  EXPECT_EQ(BatchLimit::of_fraction(1.0).resolve(937), 937);
}

TEST(Config, Duration) {
  EXPECT_EQ(load("loop:\n  max_time: 01:00:00:01\n").loop.max_time, 86401.0);
  EXPECT_EQ(load("loop:\n  max_time: \"00:00:02:00\"\n").loop.max_time, 120.0);
  EXPECT_EQ(load("loop:\n  max_time: 2.5\n").loop.max_time, 2.5);
  EXPECT_EQ(load("loop:\n  max_time: null\n").loop.max_time, std::nullopt);
  for (const char* bad : {"1:2:3", "00:25:00:00", "00:00:60:00", "a:b:c:d", "-5", "00:00:00:-1", "true"}) {
    EXPECT_EQ(load_error(std::string("loop:\n  max_time: ") + bad + "\n"),
              std::string("loop.max_time: expected a duration: a number of seconds or \"DD:HH:MM:SS\", found '") + bad +
                  "' (run.yaml line 2)");
  }
}

TEST(Config, EnumValueNotInTheSet) {
  EXPECT_EQ(load_error("loop:\n  accelerator: gpu\n"), "loop.accelerator: expected one of auto, cpu, cuda; found 'gpu' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  accelerator: cudaa\n"),
            "loop.accelerator: expected one of auto, cpu, cuda; found 'cudaa' (run.yaml line 2)");
  EXPECT_EQ(load_error("loop:\n  accelerator: [cuda]\n"), "loop.accelerator: expected one of auto|cpu|cuda, found a list (run.yaml line 2)");
}

TEST(Config, BadSetSyntax) {
  EXPECT_EQ(load_error("", {"loop.max_epochs"}), "--set expects key=value (like trainer.max_epochs=5), got 'loop.max_epochs'");
  EXPECT_EQ(load_error("", {"=5"}), "--set expects key=value (like trainer.max_epochs=5), got '=5'");
  EXPECT_EQ(load_error("", {"loop.max_epoch=5"}), "unknown key 'loop.max_epoch' (--set loop.max_epoch=5); did you mean 'loop.max_epochs'?");
  EXPECT_EQ(load_error("", {"loop=5"}), "'loop' is a section (--set loop=5); set its keys one by one (--set loop.<key>=<value>)");
  EXPECT_EQ(load_error("", {"loop.max_epochs=three"}), "loop.max_epochs: expected an integer, found 'three' (--set loop.max_epochs=three)");
  EXPECT_EQ(load_error("", {"model.hidden=[1,"}),
            "--set model.hidden=[1,: line 1, column 1: '[' not closed on this line (kiln's config reader needs a flow list on one line)");
  EXPECT_EQ(load_error("", {"model.name=a: b"}).find("--set model.name=a: b: line 1, column 2: ': ' inside a plain value"), 0u);
}

TEST(Config, RepeatedKey) {
  EXPECT_EQ(load_error("loop:\n  max_epochs: 1\n  max_epochs: 2\n"), "run.yaml: line 3, column 3: repeated key 'max_epochs' (first at line 2)");
  EXPECT_EQ(load_error("loop:\n  seed: 1\nmodel:\n  name: a\nloop:\n  lr: 1\n"), "run.yaml: line 5, column 1: repeated key 'loop' (first at line 1)");
}

TEST(Config, CrossKeyChecksRunAfterOverrides) {
  EXPECT_EQ(load_error("loop:\n  accelerator: cuda\n", {"loop.max_epochs=0"}), "loop.accelerator cuda needs loop.max_epochs != 0");
}

TEST(Config, DumpOfDefaults) {
  EXPECT_EQ(schema().dump(TestConfig{}),
            "comment: hello\n"
            "loop:\n"
            "  max_epochs: 3\n"
            "  seed: null\n"
            "  accelerator: auto\n"
            "  limit: 1.0\n"
            "  max_time: null\n"
            "  fast_dev_run: 0\n"
            "  deterministic: false\n"
            "  lr: 0.001\n"
            "model:\n"
            "  hidden: [512, 256]\n"
            "  tags: []\n"
            "  name: cnn\n"
            "hooks:\n"
            "  early:\n"
            "    patience: 3\n"
            "    betas: [0.9, 0.999]\n"
            "    monitor: null\n"
            "  lr_monitor: false\n");
}

TEST(Config, DumpLoadRoundTrip) {
  TestConfig c;
  c.comment = "true";  // a string that reads as a bool unless quoted
  c.loop.max_epochs = -1;
  c.loop.seed = -7;
  c.loop.accelerator = "cuda";
  c.loop.limit = BatchLimit::of_count(1);
  c.loop.max_time = 0.1 + 0.2;
  c.loop.fast_dev_run = 2;
  c.loop.lr = 1.0 / 3.0;
  c.model.hidden = {};
  c.model.tags = {"a, b", "null", "x: y", "#", "", "3"};
  c.model.name = "line\nbreak";
  c.hooks.early.betas = {1e-300, -0.0, 1e20};
  c.hooks.early.monitor = "val/acc";
  c.hooks.lr_monitor = true;
  std::string text = schema().dump(c);
  TestConfig back = schema().load_text(text, "dump.yaml");
  EXPECT_EQ(back, c) << text;
  EXPECT_EQ(schema().dump(back), text);
  EXPECT_TRUE(std::signbit(back.hooks.early.betas[1]));
}

TEST(Config, HelpListsEveryKey) {
  std::string help = schema().help();
  for (const auto& key : schema().keys()) {
    std::string leaf = key->path.substr(key->path.rfind('.') + 1);
    EXPECT_NE(("\n" + help).find(leaf + ": "), std::string::npos) << leaf << "\n" << help;
    EXPECT_NE(help.find("# " + key->type + ": " + key->doc + "\n"), std::string::npos) << key->path << "\n" << help;
  }
  // Keys nested under their sections in declaration order, each with its default, type and doc.
  EXPECT_EQ(help,
            "comment: hello           # string: a free-form note\n"
            "\n"
            "loop:                    # the loop\n"
            "  max_epochs: 3          # int: epochs to run\n"
            "  seed: null             # int or null: the seed\n"
            "  accelerator: auto      # one of auto|cpu|cuda: where to run\n"
            "  limit: 1.0             # int (batches) or float (fraction): batches per epoch\n"
            "  max_time: null         # duration (seconds or DD:HH:MM:SS) or null: time budget\n"
            "  fast_dev_run: 0        # int or bool: a quick check\n"
            "  deterministic: false   # bool: deterministic kernels\n"
            "  lr: 0.001              # float: learning rate\n"
            "\n"
            "model:\n"
            "  hidden: [512, 256]     # list of int: hidden widths\n"
            "  tags: []               # list of string: labels\n"
            "  name: cnn              # string: the name\n"
            "\n"
            "hooks:                   # callbacks\n"
            "  early:                 # early stopping\n"
            "    patience: 3          # int: checks without improvement\n"
            "    betas: [0.9, 0.999]  # list of float: two numbers\n"
            "    monitor: null        # string or null: the metric\n"
            "  lr_monitor: false      # bool: log the learning rate\n");
}

TEST(Config, HelpIsAConfigOfTheDefaults) {
  EXPECT_EQ(schema().load_text(schema().help(), "help"), TestConfig{});
}

TEST(Config, SchemaRefusesDuplicateDeclarations) {
  Schema<TestConfig> s;
  auto loop = s.section("loop", &TestConfig::loop);
  loop.add("max_epochs", &Loop::max_epochs, "x");
  EXPECT_THROW(loop.add("max_epochs", &Loop::max_epochs, "x"), kiln::Error);
  EXPECT_THROW(s.section("loop", &TestConfig::loop), kiln::Error);
}

TEST(Config, EditDistance) {
  EXPECT_EQ(kiln::trainer::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(kiln::trainer::edit_distance("", "abc"), 3u);
  EXPECT_EQ(kiln::trainer::edit_distance("same", "same"), 0u);
}

// ---- open mappings and choices that grow after the schema was built ----

namespace open_mapping {

namespace yaml = kiln::trainer::yaml;

struct Part {
  std::string kind = "a";
  yaml::Node args = yaml::Node::mapping();
  bool operator==(const Part&) const = default;
};
struct Open {
  Part part;
  bool operator==(const Open&) const = default;
};

std::vector<std::string>& later_kinds() {
  static std::vector<std::string> kinds;
  return kinds;
}

const Schema<Open>& open_schema() {
  static const Schema<Open> s = [] {
    Schema<Open> built;
    auto part = built.section("part", &Open::part, "a part");
    part.add_enum("kind", &Part::kind, {"a", "b"}, "which").allow_more([] { return later_kinds(); }, "a later kind");
    part.add_mapping("args", &Part::args, "its arguments");
    return built;
  }();
  return s;
}

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    open_schema().load_text(text, "open.yaml", overrides);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ConfigOpenMapping, KeepsAnyKeysAndSetReachesIntoThem) {
  const Open c = open_schema().load_text("part:\n  args:\n    depth: 3\n    sizes: [1, 2]\n    inner: {x: v}\n",
                                         "open.yaml", {"part.args.depth=4", "part.args.inner.z=w", "part.args.new=1"});
  EXPECT_EQ(yaml::emit_inline(c.part.args), "{depth: 4, sizes: [1, 2], inner: {x: v, z: w}, new: 1}");
  // The file's marks survive an override of another entry: errors can still name the line.
  EXPECT_EQ(c.part.args.find("sizes")->mark().line, 4);
  EXPECT_EQ(open_schema().load_text(open_schema().dump(c), "dump.yaml"), c);
  EXPECT_EQ(open_schema().load_text("", "open.yaml", {"part.args={p: [1]}"}).part.args.size(), 1u);
  EXPECT_EQ(open_schema().load_text("part:\n  args:\n", "open.yaml").part.args, yaml::Node::mapping());
  EXPECT_EQ(error_of("part:\n  args: 3\n"), "part.args: expected a mapping, found '3' (open.yaml line 2)");
  EXPECT_EQ(error_of("", {"part.args=[1]"}), "part.args: expected a mapping, found a list (--set part.args=[1])");
  // Not an open mapping: an unknown key as before.
  EXPECT_EQ(error_of("", {"part.kind.x=1"}).rfind("unknown key 'part.kind.x'", 0), 0u);
  const std::string help = open_schema().help();
  EXPECT_NE(help.find("  args: {}"), std::string::npos) << help;
  EXPECT_NE(help.find("# mapping: its arguments"), std::string::npos) << help;
}

TEST(ConfigOpenMapping, ChoicesCanGrowAfterTheSchemaWasBuilt) {
  later_kinds().clear();
  EXPECT_EQ(error_of("part:\n  kind: c\n"),
            "part.kind: expected one of a, b (or a later kind: none in this program); found 'c' (open.yaml line 2)");
  later_kinds() = {"c", "d"};
  EXPECT_EQ(open_schema().load_text("part:\n  kind: c\n", "open.yaml").part.kind, "c");
  EXPECT_EQ(error_of("part:\n  kind: e\n"), "part.kind: expected one of a, b (or a later kind: c, d); found 'e' (open.yaml line 2)");
  EXPECT_NE(open_schema().help().find("one of a|b or a later kind: which"), std::string::npos);
  later_kinds().clear();
}

}  // namespace open_mapping

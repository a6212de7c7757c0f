// gpt-mini, the text data it trains on, and text generation. Each is checked against something it does not
// compute itself: the parameter count written out by hand from the architecture, causality as a property (a
// token changed at position j changes no output before j), the dataset's windows against the file's bytes,
// the sampler's frequencies against the probabilities it was given, greedy and top-k generation against a
// plain loop over forward passes written here, and, end to end, a text whose every next byte is known (a
// repeated 10-letter cycle): after kiln train the model must predict it and kiln generate must continue it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/tools/datasets.h"
#include "kiln/tools/generate.h"
#include "kiln/tools/models.h"
#include "kiln/tools/run_config.h"
#include "tensor/test_util.h"
#include "tools/tools_test_util.h"

namespace kiln::tools {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using testing::read_csv_table;
using testing::run_kiln;
using testing::TempDir;

constexpr int64_t kVocab = 256, kBlock = 16;

std::shared_ptr<GptMini> small_gpt(int64_t layers = 2, int64_t heads = 2, int64_t embed = 32) {
  manual_seed(7);
  return std::make_shared<GptMini>(kVocab, kBlock, layers, heads, embed, /*dropout=*/0.0);
}

Tensor random_tokens(int64_t n, int64_t s, uint64_t seed) {
  Generator gen(seed);
  return randint(0, kVocab, {n, s}, kInt64, &gen);
}

// Bit for bit (float32 values widen to double exactly).
bool same(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && test::values(a) == test::values(b); }

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = test::values(a), y = test::values(b);
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// ---- the model ----

TEST(GptMini, ParameterCountByHand) {
  // E = 32, V = 256, T = 16. Embeddings: 256 * 32 = 8,192 and 16 * 32 = 512. Per block: in_proj 3E*E + 3E =
  // 3,168; out_proj E*E + E = 1,056; linear1 E*4E + 4E = 4,224; linear2 4E*E + E = 4,128; two LayerNorms 2 * 2E
  // = 128: 12,704, twice. Final LayerNorm 64; head E*V without bias, 8,192.
  auto net = small_gpt();
  EXPECT_EQ(net->num_parameters(), 8'192 + 512 + 2 * 12'704 + 64 + 8'192);
  // The config's route builds the same network.
  RunConfig::Model c;
  c.name = "gpt-mini", c.layers = 2, c.heads = 2, c.embed_dim = 32;
  EXPECT_EQ(make_model(c, {.input_shape = {kBlock}, .num_classes = kVocab, .tokens = true})->num_parameters(),
            net->num_parameters());
}

TEST(GptMini, StateDictUsesTheSubmoduleNames) {
  const auto sd = small_gpt()->state_dict();
  for (const char* key : {"tok_emb.weight", "pos_emb.weight", "blocks.0.self_attn.in_proj_weight",
                          "blocks.1.self_attn.out_proj.weight", "blocks.1.linear1.weight", "blocks.0.norm2.bias",
                          "norm.weight", "head.weight"}) {
    EXPECT_TRUE(sd.count(key)) << key;
  }
  EXPECT_FALSE(sd.count("head.bias"));
}

TEST(GptMini, APositionSeesOnlyTheTokensUpToIt) {
  auto net = small_gpt();
  net->eval();
  NoGradGuard no_grad;
  const Tensor a = random_tokens(2, kBlock, 1);
  Tensor b = a.clone();
  constexpr int64_t j = 9;
  b[0][j].fill_((a[0][j].item<int64_t>() + 1) % kVocab);
  const Tensor ya = net->forward(a), yb = net->forward(b);
  ASSERT_EQ(ya.shape(), (Shape{2, kBlock, kVocab}));
  // Before j, example 0 is unchanged bit for bit; from j on it changes at every position; example 1 not at all.
  EXPECT_TRUE(same(ya.narrow(1, 0, j)[0], yb.narrow(1, 0, j)[0]));
  for (int64_t t = j; t < kBlock; ++t) EXPECT_FALSE(same(ya[0][t], yb[0][t])) << "position " << t;
  EXPECT_TRUE(same(ya[1], yb[1]));
}

TEST(GptMini, APrefixGivesThePrefixOfTheOutputs) {
  auto net = small_gpt();
  net->eval();
  NoGradGuard no_grad;
  const Tensor x = random_tokens(3, kBlock, 2);
  const Tensor full = net->forward(x);
  for (int64_t s : {int64_t{1}, int64_t{5}, kBlock - 1}) {
    EXPECT_LT(max_diff(net->forward(x.narrow(1, 0, s).contiguous()), full.narrow(1, 0, s)), 1e-5) << s;
  }
}

TEST(GptMini, GradientsReachEveryParameter) {
  auto net = small_gpt(1);
  const Tensor x = random_tokens(2, kBlock, 3);
  nn::F::cross_entropy(net->forward(x).reshape({-1, kVocab}), random_tokens(2, kBlock, 4).reshape({-1})).backward();
  for (const auto& [name, p] : net->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0) << name;
  }
}

TEST(GptMini, CheckpointedBlocksGiveTheSameGradientsBitForBit) {
  // model.checkpoint_activations from a config, with dropout in the blocks: the recomputed blocks draw the same
  // masks, so the loss and every gradient are the plain model's bits.
  const RunConfig run = load_run_config_text(
      "model: {name: gpt-mini, layers: 2, heads: 2, embed_dim: 32, dropout: 0.2, checkpoint_activations: true}\n"
      "data: {name: text, path: x.txt}\n",
      "run.yaml");
  EXPECT_TRUE(run.model.checkpoint_activations);
  const DataInfo info{.input_shape = {kBlock}, .num_classes = kVocab, .tokens = true};
  const Tensor x = random_tokens(2, kBlock, 3), y = random_tokens(2, kBlock, 4).reshape({-1});
  std::vector<std::vector<Tensor>> grads;
  for (bool checkpointed : {false, true}) {
    RunConfig::Model c = run.model;
    c.checkpoint_activations = checkpointed;
    manual_seed(9);
    auto net = std::dynamic_pointer_cast<GptMini>(make_model(c, info));
    ASSERT_NE(net, nullptr);
    EXPECT_EQ(net->checkpoint_activations, checkpointed);
    const Tensor loss = nn::F::cross_entropy(net->forward(x).reshape({-1, kVocab}), y);
    loss.backward();
    std::vector<Tensor> g{loss.detach()};
    for (const Tensor& p : net->parameters()) g.push_back(p.grad());
    grads.push_back(g);
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(same(grads[0][i], grads[1][i])) << "tensor " << i;
}

TEST(GptMini, BadInputsAreClearErrors) {
  auto net = small_gpt(1);
  expect_error([&] { net->forward(random_tokens(1, kBlock + 1, 5)); }, {"17 tokens", "1 to 16", "block size"});
  expect_error([&] { net->forward(randn({1, 4})); }, {"GptMini", "int64", "float32"});
  expect_error([&] { net->forward(zeros({4}, kInt64)); }, {"(N, S)"});
  expect_error([&] { GptMini(kVocab, kBlock, 1, 3, 32, 0.0); }, {"multiple of heads"});
  RunConfig::Model c;
  c.name = "mlp";
  expect_error([&] { make_model(c, {.input_shape = {kBlock}, .num_classes = kVocab, .tokens = true}); },
               {"token sequences", "gpt-mini"});
  c.name = "gpt-mini";
  expect_error([&] { make_model(c, {.input_shape = {1, 28, 28}, .num_classes = 10}); }, {"gpt-mini", "text"});
}

// ---- the text dataset ----

TEST(TextData, WindowsAreTheFilesBytesAndTheTargetsOneFurther) {
  TempDir dir;
  std::mt19937 rng(11);
  std::string bytes(1000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() % 256);
  write_file(dir / "t.bin", bytes);
  RunConfig::Data c;
  c.name = "text", c.path = dir / "t.bin", c.block_size = 16, c.val_size = 5;
  const DataSplits d = make_data(c);
  // (1000 - 1) / 16 = 62 windows: the last 5 are the test set, the 5 before validation, 52 for training.
  EXPECT_TRUE(d.info.tokens);
  EXPECT_EQ(d.info.input_shape, (Shape{16}));
  EXPECT_EQ(d.info.num_classes, 256);
  ASSERT_TRUE(d.val);
  ASSERT_EQ(d.train->size(), 52);
  ASSERT_EQ(d.val->size(), 5);
  ASSERT_EQ(d.test->size(), 5);
  auto check = [&](const data::Dataset& ds, int64_t first_window) {
    for (int64_t i = 0; i < ds.size(); ++i) {
      const data::Batch ex = ds.get(i);
      ASSERT_EQ(ex[0].shape(), (Shape{16}));
      for (int64_t t = 0; t < 16; ++t) {
        const size_t at = static_cast<size_t>((first_window + i) * 16 + t);
        ASSERT_EQ(ex[0][t].item<int64_t>(), static_cast<unsigned char>(bytes[at])) << i << ", " << t;
        ASSERT_EQ(ex[1][t].item<int64_t>(), static_cast<unsigned char>(bytes[at + 1])) << i << ", " << t;
      }
    }
  };
  check(*d.train, 0);
  check(*d.val, 52);
  check(*d.test, 57);
}

TEST(TextData, AFolderIsItsRegularFilesInNameOrder) {
  TempDir dir;
  fs::create_directories(dir.path() / "corpus" / "sub");
  write_file(dir.path() / "corpus" / "b.txt", std::string(40, 'b'));
  write_file(dir.path() / "corpus" / "a.txt", std::string(40, 'a'));
  write_file(dir.path() / "corpus" / "sub" / "c.txt", std::string(40, 'c'));  // subfolders are not read
  fs::create_symlink(dir.path() / "corpus" / "a.txt", dir.path() / "corpus" / "z-link");  // nor links
  RunConfig::Data c;
  c.name = "text", c.path = dir / "corpus", c.block_size = 8, c.val_size = 1;
  const DataSplits d = make_data(c);
  // 80 bytes "a" * 40 + "b" * 40: 79 / 8 = 9 windows, 7 to train.
  ASSERT_EQ(d.train->size(), 7);
  EXPECT_EQ(d.train->get(0)[0][0].item<int64_t>(), 'a');
  EXPECT_EQ(d.train->get(4)[0][7].item<int64_t>(), 'a');  // byte 39
  EXPECT_EQ(d.train->get(4)[1][7].item<int64_t>(), 'b');  // byte 40, its target
  EXPECT_EQ(d.test->get(0)[1][7].item<int64_t>(), 'b');
}

TEST(TextData, TooLittleTextOrAMissingFileAreClearErrors) {
  TempDir dir;
  write_file(dir / "short.txt", std::string(100, 'x'));
  write_file(dir / "empty.txt", "");
  fs::create_directories(dir.path() / "none");
  RunConfig::Data c;
  c.name = "text", c.path = dir / "short.txt", c.block_size = 16, c.val_size = 3;
  // 99 / 16 = 6 windows; 3 for validation and 3 for the test leave none to train.
  expect_error([&] { make_data(c); }, {"short.txt", "100 bytes", "6 windows", "data.block_size = 16", "val_size = 3"});
  c.path = dir / "empty.txt";
  expect_error([&] { make_data(c); }, {"empty.txt", "0 windows"});
  c.path = dir / "missing.txt";
  expect_error([&] { make_data(c); }, {"cannot open", "missing.txt"});
  c.path = dir / "none";
  expect_error([&] { make_data(c); }, {"holds no regular files"});
  c.path = dir / "short.txt", c.val_size = 0, c.horizontal_flip = true;
  expect_error([&] { make_data(c); }, {"horizontal_flip", "no images"});
}

TEST(TextData, TheConfigPairsGptMiniWithText) {
  expect_error([] { load_run_config_text("data: {name: text, path: x.txt}\n", "run.yaml"); },
               {"model.name cnn and data.name text", "gpt-mini and lstm-lm are the models for text"});
  expect_error([] { load_run_config_text("model: {name: gpt-mini}\n", "run.yaml"); },
               {"data.name fashion-mnist", "text data needs one of them"});
  expect_error([] { load_run_config_text("model: {name: lstm-lm}\n", "run.yaml"); },
               {"model.name lstm-lm and data.name fashion-mnist"});
  expect_error([] { load_run_config_text("model: {name: gpt-mini}\ndata: {name: text}\n", "run.yaml"); },
               {"data.name text needs data.path"});
  expect_error(
      [] { load_run_config_text("model: {name: gpt-mini, heads: 3}\ndata: {name: text, path: x}\n", "run.yaml"); },
      {"model.embed_dim (128) must be a multiple of model.heads (3)"});
}

// ---- generation ----

TEST(Generate, SampleIndexIsTheInverseOfTheCumulativeDistribution) {
  const std::vector<double> p{0.1, 0.0, 0.6, 0.3};
  EXPECT_EQ(sample_index(p, 0.0), 0);
  EXPECT_EQ(sample_index(p, 0.05), 0);
  EXPECT_EQ(sample_index(p, 0.35), 2);
  EXPECT_EQ(sample_index(p, 0.75), 3);
  EXPECT_EQ(sample_index(p, 0.9999999), 3);
  EXPECT_EQ(sample_index({0.0, 2.0, 0.0}, 0.9999999), 1);  // unnormalized; a zero is never drawn
  // Frequencies over 40,000 uniform draws against the probabilities, within 5 standard deviations.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int64_t> count(4, 0);
  constexpr int kDraws = 40'000;
  for (int i = 0; i < kDraws; ++i) ++count[static_cast<size_t>(sample_index(p, u(rng)))];
  for (size_t i = 0; i < p.size(); ++i) {
    const double sd = std::sqrt(kDraws * p[i] * (1 - p[i]));
    EXPECT_NEAR(static_cast<double>(count[i]), kDraws * p[i], 5 * sd + 1e-9) << i;
  }
  expect_error([] { sample_index({0.0, 0.0}, 0.5); }, {"sum to 0"});
}

// The most likely next token after each prefix, by a plain loop of forward passes over the last kBlock tokens.
std::vector<int64_t> greedy_by_hand(GptMini& net, std::vector<int64_t> context, int64_t n) {
  net.eval();
  NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = std::min<int64_t>(static_cast<int64_t>(context.size()), kBlock);
    const std::vector<int64_t> window(context.end() - s, context.end());
    const Tensor scores = net.forward(tensor(window, {1, s}, kInt64))[0][s - 1];
    out.push_back(scores.argmax().item<int64_t>());
    context.push_back(out.back());
  }
  return out;
}

TEST(Generate, GreedyIsTheMostLikelyTokenEveryStepPastTheBlockSize) {
  auto net = small_gpt();
  const std::vector<int64_t> prompt = tokens_of("Hello");
  constexpr int64_t n = 3 * kBlock;  // the context is cropped to the last kBlock tokens after a few steps
  const std::vector<int64_t> expected = greedy_by_hand(*net, prompt, n);
  net->train();
  EXPECT_EQ(generate(*net, prompt, {.max_new_tokens = n, .temperature = 0}), expected);
  EXPECT_TRUE(net->is_training());  // its mode as it was
  EXPECT_EQ(generate(*net, prompt, {.max_new_tokens = n, .temperature = 1.0, .top_k = 1, .seed = 5}), expected);
}

TEST(Generate, TopKDrawsOnlyAmongTheKMostLikelyAndTheSeedFixesTheDraws) {
  auto net = small_gpt();
  const std::vector<int64_t> prompt = tokens_of("ab");
  const GenerateOptions o{.max_new_tokens = 40, .temperature = 2.0, .top_k = 3, .seed = 9};
  const std::vector<int64_t> out = generate(*net, prompt, o);
  ASSERT_EQ(out.size(), 40u);
  EXPECT_EQ(generate(*net, prompt, o), out);
  GenerateOptions other = o;
  other.seed = 10;
  EXPECT_NE(generate(*net, prompt, other), out);
  // Each token among its step's three highest scores, recomputed here.
  net->eval();
  NoGradGuard no_grad;
  std::vector<int64_t> context = prompt;
  for (int64_t tok : out) {
    const int64_t s = std::min<int64_t>(static_cast<int64_t>(context.size()), kBlock);
    const Tensor scores =
        net->forward(tensor(std::vector<int64_t>(context.end() - s, context.end()), {1, s}, kInt64))[0][s - 1];
    const double mine = scores[tok].item<double>();
    EXPECT_LT((scores > mine).to(kInt64).sum().item<int64_t>(), 3) << "token " << tok;
    context.push_back(tok);
  }
}

TEST(Generate, BadArgumentsAreClearErrors) {
  auto net = small_gpt(1);
  expect_error([&] { generate(*net, {}, {}); }, {"prompt is empty"});
  expect_error([&] { generate(*net, {300}, {}); }, {"prompt token 300", "0 .. 255"});
  expect_error([&] { generate(*net, {1}, {.temperature = -1}); }, {"temperature = -1"});
  expect_error([&] { text_of({256}); }, {"not a byte"});
  EXPECT_EQ(text_of(tokens_of("k\xffln")), "k\xffln");
}

// ---- end to end: kiln train, predict and generate on a text whose next byte is always known ----

TEST(GptMiniCli, LearnsACycleAndContinuesIt) {
  TempDir dir;
  const testing::CycleRun run = testing::train_on_cycle(
      dir, {"model.name=gpt-mini", "model.layers=1", "model.heads=2", "model.embed_dim=32", "optimizer.lr=0.01"});
  ASSERT_EQ(run.train.status, 0) << run.train.err;
  // Every next byte follows from the one before: after training, (almost) every position right.
  EXPECT_GT(run.test_accuracy, 0.97) << run.train.out;
  const std::string& ckpt = run.ckpt;
  const std::string& text = run.text;
  ASSERT_TRUE(fs::exists(ckpt));

  // generate continues the cycle, greedily and with low-temperature draws, past the block size.
  const auto g = run_kiln({"generate", "--ckpt", ckpt, "--prompt", "cde", "--tokens", "40", "--temperature", "0"});
  ASSERT_EQ(g.status, 0) << g.err;
  const std::string expected = testing::cycle_continued(run, "cde", 40);
  EXPECT_EQ(g.out, expected + "\n");
  const std::string out_file = dir / "gen.txt";
  const auto s = run_kiln({"generate", "--ckpt", ckpt, "--prompt", "cde", "--tokens", "40", "--temperature", "0.1",
                           "--top-k", "2", "--seed", "3", "--output", out_file});
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(testing::read_file(out_file), expected);

  // predict writes a row per position of each test window: (4000 - 1) / 16 = 249 windows, the last 10 tested.
  const std::string csv = dir / "p.csv";
  ASSERT_EQ(run_kiln({"predict", "--ckpt", ckpt, "--output", csv}).status, 0);
  const testing::CsvTable t = read_csv_table(csv);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"index", "position", "prediction", "label", "probability"}));
  ASSERT_EQ(t.rows.size(), 10u * 16u);
  for (const auto& row : t.rows) {
    const int64_t window = 239 + std::stoll(row.at("index")), pos = std::stoll(row.at("position"));
    EXPECT_EQ(std::stoll(row.at("label")), text[static_cast<size_t>(window * 16 + pos + 1)]) << row.at("index");
  }
}

TEST(GptMiniCli, GenerateRefusesAnythingButAGptMiniCheckpoint) {
  TempDir dir;
  const std::string root = dir / "runs";
  ASSERT_EQ(run_kiln({"train", "--set", "data.name=synthetic", "--set", "model.name=mlp", "--set", "model.hidden=[8]",
                      "--set", "data.num_samples=60", "--set", "data.val_size=10", "--set", "trainer.max_epochs=1",
                      "--set", "trainer.default_root_dir=" + root, "--set", "trainer.enable_progress_bar=false",
                      "--set", "logger.tensorboard=false"})
                .status,
            0);
  const std::string ckpt = (fs::path(root) / "kiln" / "version_0" / "checkpoints" / "last.ckpt").string();
  const auto r = run_kiln({"generate", "--ckpt", ckpt});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("checkpoint of model mlp"), std::string::npos) << r.err;
  const auto u = run_kiln({"generate", "--ckpt", ckpt, "--temperature", "hot"});
  EXPECT_EQ(u.status, 2);
  EXPECT_NE(u.err.find("--temperature 'hot'"), std::string::npos) << u.err;
}

}  // namespace
}  // namespace kiln::tools

// lstm-lm, the recurrent language model of kiln train: its parameter count written out by hand, PyTorch's
// names inside, causality as a property (a token changed at position j changes no output before j),
// generation against a plain loop over forward passes, and, end to end, a repeated 10-letter cycle that
// kiln train must learn and kiln generate continue. (The text data and the sampler are gpt_mini_test.cpp's.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/tools/generate.h"
#include "kiln/tools/models.h"
#include "kiln/tools/run_config.h"
#include "tensor/test_util.h"
#include "tools/tools_test_util.h"

// A namespace of its own: the tools tests compile as one unity build, and gpt_mini_test.cpp has helpers of the
// same shape.
namespace kiln::tools::lstm_lm_tests {
namespace {

using test::expect_error;
using testing::run_kiln;
using testing::TempDir;

constexpr int64_t kVocab = 256, kContext = 16;

std::shared_ptr<LstmLm> small_lstm_lm(int64_t layers = 2, int64_t embed = 32) {
  manual_seed(8);
  return std::make_shared<LstmLm>(kVocab, kContext, layers, embed, /*dropout=*/0.0);
}

TEST(LstmLm, ParameterCountByHand) {
  // E = 32, V = 256. Embedding 256 * 32 = 8,192. Per LSTM layer (input and hidden both E): weight_ih and
  // weight_hh 4E * E each, two biases 4E each: 2 * 4,096 + 2 * 128 = 8,448, twice. Head E * V + V = 8,448.
  auto net = small_lstm_lm();
  EXPECT_EQ(net->num_parameters(), 8'192 + 2 * 8'448 + 8'448);
  RunConfig::Model c;
  c.name = "lstm-lm", c.layers = 2, c.embed_dim = 32;
  EXPECT_EQ(make_model(c, {.input_shape = {kContext}, .num_classes = kVocab, .tokens = true})->num_parameters(),
            net->num_parameters());
  const auto sd = net->state_dict();
  for (const char* key : {"tok_emb.weight", "lstm.weight_ih_l0", "lstm.weight_hh_l1", "lstm.bias_ih_l1", "head.weight",
                          "head.bias"}) {
    EXPECT_TRUE(sd.count(key)) << key;
  }
}

TEST(LstmLm, APositionSeesOnlyTheTokensUpToIt) {
  auto net = small_lstm_lm();
  net->eval();
  NoGradGuard no_grad;
  Generator gen(1);
  const Tensor a = randint(0, kVocab, {2, kContext}, kInt64, &gen);
  Tensor b = a.clone();
  constexpr int64_t j = 9;
  b[0][j].fill_((a[0][j].item<int64_t>() + 1) % kVocab);
  const Tensor ya = net->forward(a), yb = net->forward(b);
  ASSERT_EQ(ya.shape(), (Shape{2, kContext, kVocab}));
  const auto values = [](const Tensor& t) { return test::values(t); };
  EXPECT_EQ(values(ya.narrow(1, 0, j)[0]), values(yb.narrow(1, 0, j)[0]));
  for (int64_t t = j; t < kContext; ++t) EXPECT_NE(values(ya[0][t]), values(yb[0][t])) << "position " << t;
  EXPECT_EQ(values(ya[1]), values(yb[1]));
  expect_error([&] { net->forward(randint(0, kVocab, {1, kContext + 1}, kInt64, &gen)); },
               {"LstmLm", "17 tokens", "1 to 16"});
}

TEST(LstmLm, GenerateIsTheMostLikelyTokenEveryStepPastTheContext) {
  auto net = small_lstm_lm(1);
  const std::vector<int64_t> prompt = tokens_of("Hi");
  constexpr int64_t n = 2 * kContext;
  std::vector<int64_t> context = prompt, expected;
  {
    net->eval();
    NoGradGuard no_grad;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = std::min<int64_t>(static_cast<int64_t>(context.size()), kContext);
      const std::vector<int64_t> window(context.end() - s, context.end());
      expected.push_back(net->forward(tensor(window, {1, s}, kInt64))[0][s - 1].argmax().item<int64_t>());
      context.push_back(expected.back());
    }
  }
  EXPECT_EQ(generate(*net, prompt, {.max_new_tokens = n, .temperature = 0}), expected);
}

TEST(LstmLmCli, LearnsACycleAndContinuesIt) {
  TempDir dir;
  const testing::CycleRun run =
      testing::train_on_cycle(dir, {"model.name=lstm-lm", "model.layers=1", "model.embed_dim=32", "optimizer.lr=0.03"});
  ASSERT_EQ(run.train.status, 0) << run.train.err;
  // Every next byte follows from the one before: after training, (almost) every position right.
  EXPECT_GT(run.test_accuracy, 0.97) << run.train.out;
  const auto g = run_kiln({"generate", "--ckpt", run.ckpt, "--prompt", "cde", "--tokens", "40", "--temperature", "0"});
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(g.out, testing::cycle_continued(run, "cde", 40) + "\n");
}

}  // namespace
}  // namespace kiln::tools::lstm_lm_tests

#include "kiln/tools/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln::tools {

int64_t sample_index(const std::vector<double>& probs, double u) {
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  KILN_CHECK(total > 0 && std::isfinite(total), "generate: the next token's probabilities sum to ", total);
  const double target = u * total;
  double running = 0;
  int64_t last_nonzero = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    running += probs[i];
    last_nonzero = static_cast<int64_t>(i);
    if (running > target) return last_nonzero;
  }
  return last_nonzero;  // u * total rounded up to the sum itself
}

namespace {

// The next token from one position's scores (K), as the options say.
int64_t next_token(const std::vector<double>& scores, const GenerateOptions& o, Generator& gen) {
  const int64_t K = static_cast<int64_t>(scores.size());
  std::vector<int64_t> order(static_cast<size_t>(K));
  std::iota(order.begin(), order.end(), 0);
  // Highest score first, ties to the smaller id.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  if (o.temperature == 0) return order[0];
  const int64_t keep = o.top_k > 0 ? std::min(o.top_k, K) : K;
  const double top = scores[static_cast<size_t>(order[0])];
  std::vector<double> probs(static_cast<size_t>(K), 0.0);
  for (int64_t r = 0; r < keep; ++r) {
    const int64_t i = order[static_cast<size_t>(r)];
    probs[static_cast<size_t>(i)] = std::exp((scores[static_cast<size_t>(i)] - top) / o.temperature);
  }
  return sample_index(probs, rand({}, kFloat64, &gen).item<double>());
}

}  // namespace

std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const GenerateOptions& o) {
  KILN_CHECK(!prompt.empty(), "generate: the prompt is empty; give at least one token");
  KILN_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens = ", o.max_new_tokens, "; expected >= 0");
  KILN_CHECK(o.temperature >= 0 && std::isfinite(o.temperature), "generate: temperature = ", o.temperature,
             "; expected a finite number >= 0");
  KILN_CHECK(o.top_k >= 0, "generate: top_k = ", o.top_k, "; expected >= 0 (0: every token)");
  for (int64_t t : prompt) {
    KILN_CHECK(t >= 0 && t < model.vocab_size(), "generate: prompt token ", t, " is outside the model's vocabulary 0 .. ",
               model.vocab_size() - 1);
  }
  struct RestoreMode {  // the caller's mode back, also when a step throws
    LanguageModel& m;
    bool training;
    ~RestoreMode() { m.train(training); }
  } restore{model, model.is_training()};
  model.eval();
  NoGradGuard no_grad;
  Generator gen(o.seed);
  const std::vector<Tensor> params = model.parameters();
  KILN_CHECK(!params.empty(), "generate: the model has no parameters");
  const Device device = params[0].device();
  std::vector<int64_t> context = prompt, out;
  out.reserve(static_cast<size_t>(o.max_new_tokens));
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t S = std::min<int64_t>(static_cast<int64_t>(context.size()), model.context_size());
    const std::vector<int64_t> window(context.end() - S, context.end());
    const Tensor tokens = tensor(window, {1, S}, kInt64).to(device);
    // The last position's scores, as float64 on the CPU.
    const Tensor last = model.forward(tokens).select(1, S - 1).select(0, 0).to(kCPU).to(kFloat64).contiguous();
    const double* p = last.data_ptr<double>();
    const int64_t token = next_token(std::vector<double>(p, p + last.numel()), o, gen);
    context.push_back(token);
    out.push_back(token);
  }
  return out;
}

std::vector<int64_t> tokens_of(const std::string& text) {
  std::vector<int64_t> t(text.size());
  for (size_t i = 0; i < text.size(); ++i) t[i] = static_cast<unsigned char>(text[i]);
  return t;
}

std::string text_of(const std::vector<int64_t>& tokens) {
  std::string s(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    KILN_CHECK(tokens[i] >= 0 && tokens[i] < 256, "text_of: token ", tokens[i], " is not a byte");
    s[i] = static_cast<char>(tokens[i]);
  }
  return s;
}

}  // namespace kiln::tools

// Text generation with a language model (GptMini, LstmLm): the prompt's tokens, then one token at a time drawn
// from the model's distribution for the next position, each step seeing the last context_size tokens. What
// `kiln generate` runs, usable from C++ with any trained LanguageModel.
//
//   std::vector<int64_t> out = generate(model, tokens_of("ROMEO:"), {.max_new_tokens = 200, .temperature = 0.8});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tools/models.h"

namespace kiln::tools {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  // The scores are divided by this before the softmax: below 1 sharper, above 1 flatter. 0: greedy (the most
  // likely token every step, ties to the smallest id), which draws nothing.
  double temperature = 1.0;
  int64_t top_k = 0;  // > 0: draw only among the k most likely tokens (ties to the smaller id)
  uint64_t seed = 0;  // the draws' generator; the same seed, model and prompt give the same tokens
};

// The max_new_tokens tokens that follow `prompt` (not empty; ids below the model's vocabulary). Runs in eval
// mode without autograd, on the model's device, and leaves the model's mode as it found it.
std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options = {});

// The byte-level tokens of text data (data.name text): one token per byte, and back.
std::vector<int64_t> tokens_of(const std::string& text);
std::string text_of(const std::vector<int64_t>& tokens);

// The index an inverse-CDF draw picks from `probs` (non-negative, not all zero) for a uniform u in [0, 1):
// the first i whose running sum exceeds u times the total. Exposed for its tests.
int64_t sample_index(const std::vector<double>& probs, double u);

}  // namespace kiln::tools

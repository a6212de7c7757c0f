// multinomial: draws category indices from rows of non-negative weights, as torch.multinomial, composed of the
// tensor layer's ops (rand, cumsum, comparisons, topk), so it runs on every device and draws the same numbers
// there as on the CPU for the same generator state.
//
// With replacement each draw is inverse-CDF sampling: the row's cumulative sums divided by their own last
// element (so the last is exactly 1 and a zero weight's step is exactly flat), and the index chosen for a
// uniform u is the number of cumulative values <= u: the first category whose interval holds u, never one of
// weight 0. Without replacement it is a race: category i finishes at E_i / w_i with E_i exponential (a
// weight-0 category never does), and the first k to finish, in finishing order, are a draw of k without
// replacement whose successive picks have PyTorch's probabilities (each the next category in proportion to
// the weights left).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/along_dim.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/ops/indexing.h"
#include "kiln/tensor/ops/reduce.h"
#include "kiln/tensor/ops/unary.h"
#include "kiln/tensor/views.h"

namespace kiln {

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  KILN_CHECK(probs.defined() && (probs.dim() == 1 || probs.dim() == 2), "multinomial: probs must be 1-D (n) or ",
             "2-D (rows, n) category weights, got ",
             probs.defined() ? "shape " + shape_str(probs.sizes()) : std::string("an undefined tensor"));
  KILN_CHECK(is_floating(probs.dtype()), "multinomial: probs must be floating point, got ", probs.dtype());
  const int64_t n = probs.size(-1), rows = probs.dim() == 2 ? probs.size(0) : 1;
  KILN_CHECK(n > 0, "multinomial: probs has no categories (its last dim is 0)");
  KILN_CHECK(num_samples > 0, "multinomial: num_samples = ", num_samples, ": expected > 0");
  KILN_CHECK(replacement || num_samples <= n, "multinomial: ", num_samples, " samples without replacement from ", n,
             " categories");
  const TensorOptions f64 = TensorOptions(kFloat64).device(probs.device());
  const Tensor w = ops::to(probs.dim() == 1 ? ops::unsqueeze(probs, 0) : probs, kFloat64);
  Tensor out;
  if (rows == 0) {
    out = empty({0, num_samples}, TensorOptions(kInt64).device(probs.device()));
  } else {
    KILN_CHECK(ops::all(ops::logical_and(ops::isfinite(w), ops::ge(w, 0.0))).item<bool>(),
               "multinomial: probs has a negative, infinite or NaN weight");
    const Tensor running = ops::cumsum(w, 1);
    const Tensor totals = ops::narrow(running, 1, n - 1, 1);  // (rows, 1)
    KILN_CHECK(ops::all(ops::gt(totals, 0.0)).item<bool>(), "multinomial: a row of probs has no positive weight");
    KILN_CHECK(ops::all(ops::isfinite(totals)).item<bool>(), "multinomial: a row of probs sums past float64's range");
    if (replacement) {
      const Tensor cdf = ops::unsqueeze(ops::div(running, totals), 1);  // (rows, 1, n), last exactly 1
      const Tensor u = rand({rows, num_samples, 1}, f64, gen);          // [0, 1), drawn at once
      // The comparison is (rows, draws, n): draws go in slices of at most 2^24 comparisons (a slice at least 1).
      const int64_t per_slice = std::max<int64_t>(1, (int64_t{1} << 24) / std::max<int64_t>(1, rows * n));
      std::vector<Tensor> parts;
      for (int64_t s = 0; s < num_samples; s += per_slice) {
        const Tensor slice = ops::narrow(u, 1, s, std::min(per_slice, num_samples - s));
        parts.push_back(ops::sum(ops::le(cdf, slice), {2}, false, kInt64));
      }
      out = parts.size() == 1 ? parts[0] : ops::cat(parts, 1);
    } else {
      // -log(1 - u) is exponential; 1 - u is in (0, 1], so it is finite.
      const Tensor e = ops::neg(ops::log1p(ops::neg(rand({rows, n}, f64, gen))));
      const Tensor finish = ops::where(ops::gt(w, 0.0), ops::div(e, w), std::numeric_limits<double>::infinity());
      auto [times, picked] = ops::topk(finish, num_samples, 1, /*largest=*/false);
      KILN_CHECK(ops::all(ops::isfinite(times)).item<bool>(), "multinomial: ", num_samples, " samples without ",
                 "replacement, but a row of probs has fewer categories of positive weight");
      out = picked;
    }
  }
  return probs.dim() == 1 ? ops::squeeze(out, 0) : out;
}

}  // namespace kiln

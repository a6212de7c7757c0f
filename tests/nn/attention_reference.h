// float64 loop references for the attention and Transformer tests (tests/nn/attention_test.cpp,
// tests/nn/transformer_test.cpp): multi-head attention per head as softmax(q k^T / sqrt(d) + mask) v then
// out_proj, linear layers and layer norms over rows. Sequences are flat, time-first (L, N, E).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "tensor/test_util.h"

namespace kiln::test {

struct MhaWeights {
  int64_t kdim, vdim;
  // (E, E), (E, kdim), (E, vdim); (3E) with q, k, v in turn; (E, E), (E). Absent biases are zeros.
  std::vector<double> w_q, w_k, w_v, b_in, w_out, b_out;
};

inline MhaWeights weights_of(nn::MultiheadAttentionImpl& m) {
  int64_t E = m.embed_dim();
  MhaWeights w;
  w.kdim = m.options().kdim;
  w.vdim = m.options().vdim;
  if (m.in_proj_weight.defined()) {
    std::vector<double> packed = values(m.in_proj_weight);
    w.w_q.assign(packed.begin(), packed.begin() + E * E);
    w.w_k.assign(packed.begin() + E * E, packed.begin() + 2 * E * E);
    w.w_v.assign(packed.begin() + 2 * E * E, packed.end());
  } else {
    w.w_q = values(m.q_proj_weight);
    w.w_k = values(m.k_proj_weight);
    w.w_v = values(m.v_proj_weight);
  }
  w.b_in = m.in_proj_bias.defined() ? values(m.in_proj_bias) : std::vector<double>(3 * E, 0.0);
  w.w_out = values(m.out_proj->weight);
  w.b_out = m.out_proj->bias.defined() ? values(m.out_proj->bias) : std::vector<double>(E, 0.0);
  return w;
}

// Additive mask entry for batch n, head h, query i, key j (-inf: masked).
using MaskFn = std::function<double(int64_t n, int64_t h, int64_t i, int64_t j)>;
inline const MaskFn kNoMask = [](int64_t, int64_t, int64_t, int64_t) { return 0.0; };

struct MhaResult {
  std::vector<double> out;      // (L, N, E)
  std::vector<double> weights;  // (N, H, L, S)
  std::vector<double> averaged(int64_t N, int64_t H, int64_t L, int64_t S) const {
    std::vector<double> a(static_cast<size_t>(N * L * S), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L * S; ++i) a[n * L * S + i] += weights[(n * H + h) * L * S + i] / H;
    return a;
  }
};

// q: (L, N, E), k: (S, N, kdim), v: (S, N, vdim), time-first and flat.
inline MhaResult mha_reference(const std::vector<double>& q, const std::vector<double>& k,
                               const std::vector<double>& v, int64_t L, int64_t S, int64_t N, int64_t E, int64_t H,
                               const MhaWeights& w, const MaskFn& mask) {
  int64_t d = E / H;
  MhaResult r;
  r.weights.assign(static_cast<size_t>(N * H * L * S), 0.0);
  std::vector<double> joined(static_cast<size_t>(L * N * E), 0.0);
  // feature f of the projection `which` (0: q, 1: k, 2: v) of token t of x
  auto project = [&](const std::vector<double>& x, int64_t t, int64_t n, int which, int64_t f) {
    const std::vector<double>& wt = which == 0 ? w.w_q : which == 1 ? w.w_k : w.w_v;
    int64_t in = which == 0 ? E : which == 1 ? w.kdim : w.vdim;
    double s = w.b_in[which * E + f];
    for (int64_t e = 0; e < in; ++e) s += x[(t * N + n) * in + e] * wt[f * in + e];
    return s;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> score(static_cast<size_t>(S));
        double top = -kInf;
        for (int64_t j = 0; j < S; ++j) {
          double s = 0;
          for (int64_t c = 0; c < d; ++c) s += project(q, i, n, 0, h * d + c) * project(k, j, n, 1, h * d + c);
          score[j] = s / std::sqrt(static_cast<double>(d)) + mask(n, h, i, j);
          top = std::max(top, score[j]);
        }
        if (top == -kInf) continue;  // every key masked: zero weights, kiln's documented choice
        double total = 0;
        for (double& s : score) total += (s = std::exp(s - top));
        for (int64_t j = 0; j < S; ++j) {
          double p = score[j] / total;
          r.weights[((n * H + h) * L + i) * S + j] = p;
          for (int64_t c = 0; c < d; ++c)
            joined[(i * N + n) * E + h * d + c] += p * project(v, j, n, 2, h * d + c);
        }
      }
  r.out.assign(static_cast<size_t>(L * N * E), 0.0);
  for (int64_t t = 0; t < L * N; ++t)
    for (int64_t o = 0; o < E; ++o) {
      double s = w.b_out[o];
      for (int64_t e = 0; e < E; ++e) s += joined[t * E + e] * w.w_out[o * E + e];
      r.out[t * E + o] = s;
    }
  return r;
}

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " at " << i;
}

// (N, L, E) flat -> (L, N, E) flat
inline std::vector<double> to_time_first(const std::vector<double>& x, int64_t N, int64_t L, int64_t E) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t e = 0; e < E; ++e) y[(i * N + n) * E + e] = x[(n * L + i) * E + e];
  return y;
}

inline std::vector<double> linear_rows(const std::vector<double>& x, int64_t rows, int64_t in, int64_t out,
                                       const std::vector<double>& w, const std::vector<double>& b) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

inline std::vector<double> layer_norm_rows(const std::vector<double>& x, int64_t rows, int64_t E,
                                           const std::vector<double>& w, const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t e = 0; e < E; ++e) mean += x[r * E + e] / E;
    for (int64_t e = 0; e < E; ++e) var += (x[r * E + e] - mean) * (x[r * E + e] - mean) / E;
    for (int64_t e = 0; e < E; ++e) y[r * E + e] = (x[r * E + e] - mean) / std::sqrt(var + eps) * w[e] + b[e];
  }
  return y;
}

inline std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

}  // namespace kiln::test

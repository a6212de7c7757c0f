// L-BFGS; see lbfgs.h. The iteration, its stopping rules and the strong Wolfe line search follow
// torch.optim.LBFGS step for step (so that a float64 run matches LibTorch's: tests/parity), with the scalars
// (dot products, step lengths, losses) carried in double.
#include "kiln/optim/lbfgs.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "kiln/optim/option_util.h"

namespace kiln::optim {

std::map<std::string, double> LBFGS::to_map(const LBFGSOptions& o) {
  KILN_CHECK(o.line_search_fn.empty() || o.line_search_fn == "strong_wolfe", "LBFGS: line_search_fn '",
             o.line_search_fn, "': expected \"\" (none) or \"strong_wolfe\"");
  return {{"lr", o.lr},
          {"max_iter", static_cast<double>(o.max_iter)},
          {"max_eval", static_cast<double>(o.max_eval > 0 ? o.max_eval : o.max_iter * 5 / 4)},
          {"tolerance_grad", o.tolerance_grad},
          {"tolerance_change", o.tolerance_change},
          {"history_size", static_cast<double>(o.history_size)},
          {"strong_wolfe", o.line_search_fn == "strong_wolfe" ? 1.0 : 0.0}};
}

LBFGSOptions LBFGS::from_map(const std::map<std::string, double>& m) {
  LBFGSOptions o;
  o.lr = option(m, "LBFGS", "lr");
  o.max_iter = static_cast<int64_t>(option(m, "LBFGS", "max_iter"));
  o.max_eval = static_cast<int64_t>(option(m, "LBFGS", "max_eval"));
  o.tolerance_grad = option(m, "LBFGS", "tolerance_grad");
  o.tolerance_change = option(m, "LBFGS", "tolerance_change");
  o.history_size = static_cast<int64_t>(option(m, "LBFGS", "history_size"));
  o.line_search_fn = option(m, "LBFGS", "strong_wolfe") != 0.0 ? "strong_wolfe" : "";
  return o;
}

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions options) {
  add_param_group(std::move(params), to_map(options));
  const auto& ps = groups_[0].params;
  for (const Tensor& p : ps) {
    KILN_CHECK(p.dtype() == ps[0].dtype() && p.device() == ps[0].device(), "LBFGS: every parameter must have ",
               "one dtype and device (its state is one flat vector over all of them); parameter 0 is ",
               dtype_name(ps[0].dtype()), " on ", ps[0].device().str(), ", another is ", dtype_name(p.dtype()),
               " on ", p.device().str());
    numel_ += p.numel();
  }
}

void LBFGS::validate_options(const std::map<std::string, double>& m) const {
  const LBFGSOptions o = from_map(m);
  check_non_negative("LBFGS", "lr", o.lr);
  KILN_CHECK(o.max_iter >= 1, "LBFGS: invalid max_iter ", o.max_iter, " (must be >= 1)");
  KILN_CHECK(o.max_eval >= 1, "LBFGS: invalid max_eval ", o.max_eval, " (must be >= 1)");
  KILN_CHECK(o.history_size >= 1, "LBFGS: invalid history_size ", o.history_size, " (must be >= 1)");
  check_non_negative("LBFGS", "tolerance_grad", o.tolerance_grad);
  check_non_negative("LBFGS", "tolerance_change", o.tolerance_change);
}

Shape LBFGS::state_shape(const std::string& key, const Tensor& param) const { return {numel_}; }

void LBFGS::step() {
  KILN_CHECK(false, "LBFGS: step() needs a closure that zeroes the gradients, computes the loss, runs backward ",
             "and returns the loss: opt.step([&] { ... })");
}

namespace {

double dot_value(const Tensor& a, const Tensor& b) { return dot(a, b).item<double>(); }
double abs_max(const Tensor& a) { return abs(a).max().item<double>(); }

// The minimizer of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, clamped to the bounds (the
// interval between x1 and x2 by default); their midpoint when the cubic has no minimum.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2, double lo, double hi) {
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square < 0) return (lo + hi) / 2;
  const double d2 = std::sqrt(d2_square);
  const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                  : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(min_pos, lo), hi);
}
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2) {
  return cubic_interpolate(x1, f1, g1, x2, f2, g2, std::min(x1, x2), std::max(x1, x2));
}

// The loss and flat gradient at x + t d (the parameters are put back to x afterwards).
struct Evaluation {
  double loss;
  Tensor grad;
};

struct LineSearchResult {
  double loss;
  Tensor grad;
  double t;
  int64_t evals;
};

// Finds t satisfying the strong Wolfe conditions along d from the point where the loss is f, the gradient g
// and the directional derivative gtd: bracketing, then zoom by cubic interpolation (torch's _strong_wolfe).
template <class Eval>
LineSearchResult strong_wolfe(const Eval& eval, double t, const Tensor& d, double f, const Tensor& g, double gtd,
                              double tolerance_change) {
  constexpr double c1 = 1e-4, c2 = 0.9;
  constexpr int max_ls = 25;
  const double d_norm = abs_max(d);
  Evaluation e = eval(t);
  int64_t evals = 1;
  double gtd_new = dot_value(e.grad, d);
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g.clone();
  bool done = false;
  int ls_iter = 0;
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Tensor> bracket_g;
  while (ls_iter < max_ls) {
    // The minimum is bracketed by [t_prev, t] when t is no longer sufficiently lower, or the slope turned up
    // there; t itself is the answer when its slope is flat enough (checked between those two, as torch does).
    const bool too_high = e.loss > f + c1 * t * gtd || (ls_iter > 1 && e.loss >= f_prev);
    const bool wolfe = !too_high && std::abs(gtd_new) <= -c2 * gtd;
    if (wolfe) {
      bracket = {t}, bracket_f = {e.loss}, bracket_gtd = {gtd_new}, bracket_g = {e.grad};
      done = true;
      break;
    }
    if (too_high || gtd_new >= 0) {
      bracket = {t_prev, t}, bracket_f = {f_prev, e.loss}, bracket_gtd = {gtd_prev, gtd_new};
      bracket_g = {g_prev, e.grad.clone()};
      break;
    }
    // Extrapolate: the cubic's minimum between a little past t and 10 t.
    const double previous = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, e.loss, gtd_new, t + 0.01 * (t - t_prev), t * 10);
    t_prev = previous, f_prev = e.loss, g_prev = e.grad.clone(), gtd_prev = gtd_new;
    e = eval(t);
    ++evals;
    gtd_new = dot_value(e.grad, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) {
    bracket = {0, t}, bracket_f = {f, e.loss}, bracket_g = {g, e.grad};
    bracket_gtd = {gtd, gtd_new};  // unused: the zoom below needs evaluations left
  }

  // Zoom: shrink the bracket [low, high] (low has the smaller loss) until a point satisfies both conditions.
  bool insufficient_progress = false;
  auto order = [&] { return bracket_f[0] <= bracket_f.back() ? std::pair{0, 1} : std::pair{1, 0}; };
  auto [low, high] = order();
  while (!done && ls_iter < max_ls) {
    if (std::abs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]);
    // Keep t away from the bracket's ends: within 10% of one, move it there, unless the last step was not
    // already too close (then give it one chance).
    const double b_max = std::max(bracket[0], bracket[1]), b_min = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (b_max - b_min);
    if (std::min(b_max - t, t - b_min) < eps) {
      if (insufficient_progress || t >= b_max || t <= b_min) {
        t = std::abs(t - b_max) < std::abs(t - b_min) ? b_max - eps : b_min + eps;
        insufficient_progress = false;
      } else {
        insufficient_progress = true;
      }
    } else {
      insufficient_progress = false;
    }
    e = eval(t);
    ++evals;
    gtd_new = dot_value(e.grad, d);
    ++ls_iter;
    if (e.loss > f + c1 * t * gtd || e.loss >= bracket_f[low]) {
      bracket[high] = t, bracket_f[high] = e.loss, bracket_g[high] = e.grad.clone(), bracket_gtd[high] = gtd_new;
      std::tie(low, high) = order();
    } else {
      if (std::abs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        bracket[high] = bracket[low], bracket_f[high] = bracket_f[low], bracket_g[high] = bracket_g[low];
        bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t, bracket_f[low] = e.loss, bracket_g[low] = e.grad.clone(), bracket_gtd[low] = gtd_new;
    }
  }
  return {bracket_f[low], bracket_g[low], bracket[low], evals};
}

}  // namespace

Tensor LBFGS::step(const Closure& closure) {
  KILN_CHECK(closure != nullptr, "LBFGS: step(closure): the closure is empty");
  KILN_CHECK(groups_.size() == 1, "LBFGS: supports one parameter group only (its state is one vector over all the ",
             "parameters), but has ", groups_.size());
  NoGradGuard no_grad;
  const LBFGSOptions o = from_map(groups_[0].options);
  const std::vector<Tensor>& params = groups_[0].params;

  auto evaluate = [&] {
    EnableGradGuard grad;
    Tensor loss = closure();
    KILN_CHECK(loss.defined() && loss.numel() == 1, "LBFGS: the closure must return the loss, a single value; got ",
               loss.defined() ? "shape " + shape_str(loss.shape()) : std::string("an undefined tensor"));
    return loss;
  };
  auto flat_grad = [&] {
    std::vector<Tensor> parts;
    for (const Tensor& p : params) {
      parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : zeros_like(p).reshape({-1}));  // no grad: zeros
    }
    return cat(parts);
  };
  auto add_to_params = [&](double t, const Tensor& d) {
    int64_t offset = 0;
    for (const Tensor& p : params) {
      p.add_(d.narrow(0, offset, p.numel()).reshape(p.sizes()), t);
      offset += p.numel();
    }
  };

  // The state carried from one step() to the next, all under the first parameter.
  ParamState& st = mutable_state(params[0]);
  auto& sc = st.scalars;
  auto& ts = st.tensors;
  sc.emplace("func_evals", 0), sc.emplace("n_iter", 0);

  const Tensor orig_loss = evaluate();
  double loss = orig_loss.item<double>();
  int64_t current_evals = 1;
  sc["func_evals"] += 1;
  Tensor g = flat_grad();
  if (abs_max(g) <= o.tolerance_grad) return orig_loss;

  // The history: (y, s) pairs and 1 / y.s, oldest first.
  std::deque<Tensor> old_dirs, old_stps;
  std::deque<double> ro;
  const auto history = static_cast<int64_t>(sc.count("history") ? sc["history"] : 0);
  for (int64_t i = 0; i < history; ++i) {
    old_dirs.push_back(ts.at("old_dirs." + std::to_string(i)));
    old_stps.push_back(ts.at("old_stps." + std::to_string(i)));
    ro.push_back(sc.at("ro." + std::to_string(i)));
  }
  Tensor d = ts.count("d") ? ts["d"] : Tensor();
  Tensor prev_flat_grad = ts.count("prev_flat_grad") ? ts["prev_flat_grad"] : Tensor();
  double t = sc.count("t") ? sc["t"] : 0, h_diag = sc.count("H_diag") ? sc["H_diag"] : 1;
  double prev_loss = sc.count("prev_loss") ? sc["prev_loss"] : 0;

  for (int64_t n_iter = 1; n_iter <= o.max_iter; ++n_iter) {
    sc["n_iter"] += 1;
    if (sc["n_iter"] == 1) {
      d = neg(g);
      old_dirs.clear(), old_stps.clear(), ro.clear();
      h_diag = 1;
    } else {
      // The newest pair, kept when the curvature y.s is positive enough.
      Tensor y = sub(g, prev_flat_grad);
      Tensor s = mul(d, t);
      const double ys = dot_value(y, s);
      if (ys > 1e-10) {
        if (static_cast<int64_t>(old_dirs.size()) == o.history_size) {
          old_dirs.pop_front(), old_stps.pop_front(), ro.pop_front();
        }
        old_dirs.push_back(y), old_stps.push_back(s), ro.push_back(1.0 / ys);
        h_diag = ys / dot_value(y, y);
      }
      // The two-loop recursion: d = -H g.
      std::vector<double> al(old_dirs.size());
      Tensor q = neg(g);
      for (size_t i = old_dirs.size(); i-- > 0;) {
        al[i] = dot_value(old_stps[i], q) * ro[i];
        q.add_(old_dirs[i], -al[i]);
      }
      d = mul(q, h_diag);
      for (size_t i = 0; i < old_dirs.size(); ++i) {
        const double be_i = dot_value(old_dirs[i], d) * ro[i];
        d.add_(old_stps[i], al[i] - be_i);
      }
    }
    prev_flat_grad = g.clone();
    prev_loss = loss;

    // The step length: lr, the first time scaled down to a step no longer than 1 in the 1-norm of g.
    t = sc["n_iter"] == 1 ? std::min(1.0, 1.0 / abs(g).sum().item<double>()) * o.lr : o.lr;
    const double gtd = dot_value(g, d);
    if (gtd > -o.tolerance_change) break;  // not a descent direction (to within tolerance)

    int64_t ls_evals = 0;
    bool opt_cond = false;
    if (o.line_search_fn == "strong_wolfe") {
      std::vector<Tensor> x0;
      for (const Tensor& p : params) x0.push_back(p.clone());
      auto eval_at = [&](double step) {
        add_to_params(step, d);
        Evaluation e{evaluate().item<double>(), flat_grad()};
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(x0[i]);
        return e;
      };
      LineSearchResult r = strong_wolfe(eval_at, t, d, loss, g, gtd, o.tolerance_change);
      loss = r.loss, g = r.grad, t = r.t, ls_evals = r.evals;
      add_to_params(t, d);
      opt_cond = abs_max(g) <= o.tolerance_grad;
    } else {
      add_to_params(t, d);
      if (n_iter != o.max_iter) {
        // The loss and gradient at the new point, for the next iteration (the last one needs none).
        loss = evaluate().item<double>();
        g = flat_grad();
        opt_cond = abs_max(g) <= o.tolerance_grad;
        ls_evals = 1;
      }
    }
    current_evals += ls_evals;
    sc["func_evals"] += static_cast<double>(ls_evals);

    if (n_iter == o.max_iter || current_evals >= o.max_eval || opt_cond) break;
    if (abs_max(mul(d, t)) <= o.tolerance_change) break;  // the step is negligible
    if (std::abs(loss - prev_loss) < o.tolerance_change) break;  // so is the change of the loss
  }

  ts["d"] = d;
  ts["prev_flat_grad"] = prev_flat_grad;
  sc["t"] = t, sc["H_diag"] = h_diag, sc["prev_loss"] = prev_loss;
  for (int64_t i = 0; i < history; ++i) {
    ts.erase("old_dirs." + std::to_string(i)), ts.erase("old_stps." + std::to_string(i));
    sc.erase("ro." + std::to_string(i));
  }
  sc["history"] = static_cast<double>(old_dirs.size());
  for (size_t i = 0; i < old_dirs.size(); ++i) {
    ts["old_dirs." + std::to_string(i)] = old_dirs[i];
    ts["old_stps." + std::to_string(i)] = old_stps[i];
    sc["ro." + std::to_string(i)] = ro[i];
  }
  return orig_loss;
}

}  // namespace kiln::optim

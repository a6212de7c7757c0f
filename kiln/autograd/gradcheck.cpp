// gradcheck, in the order it works: the inputs to differentiate, one forward with grad to get the analytic
// Jacobian a row at a time (backward from a one-hot gradient per output element), then the numerical Jacobian
// a column at a time (fn at x +- eps, under NoGradGuard, on contiguous copies of the inputs), then the entries
// compared and the worst one reported.
//
// Jacobians are kept per (input, output) pair as dense row-major blocks, [input element][output element].
#include "kiln/autograd/gradcheck.h"

#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/meta.h"
#include "kiln/tensor/ops.h"

namespace kiln::autograd {

namespace {

// The row-major multi-index of element `flat` of a tensor of `shape`.
Shape unravel(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// A tensor's values in row-major order (t is float64; the copy keeps aliasing outputs from changing later).
std::vector<double> to_doubles(const Tensor& t) {
  Tensor c = ops::contiguous(ops::to(t, kCPU, kFloat64));
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// The outputs whose Jacobian is checked: the floating ones (indices and masks are not differentiable).
bool is_checked(const Tensor& out) { return out.defined() && out.is_floating_point(); }

void check_outputs(const std::vector<Tensor>& outputs, const std::vector<Shape>* expected) {
  if (expected)
    KILN_CHECK(outputs.size() == expected->size(), "gradcheck: fn returned ", outputs.size(),
               " outputs for perturbed inputs but ", expected->size(), " the first time; fn must be a function of "
               "its inputs");
  for (size_t j = 0; j < outputs.size(); ++j) {
    KILN_CHECK(outputs[j].defined(), "gradcheck: output ", j, " of fn is undefined");
    if (!is_checked(outputs[j])) continue;
    KILN_CHECK(outputs[j].dtype() == kFloat64, "gradcheck: output ", j, " has dtype ", outputs[j].dtype(),
               "; floating outputs must be float64 for central differences to be accurate (convert inside fn "
               "with .to(kFloat64) if the op computes in another dtype)");
    if (expected)
      KILN_CHECK(outputs[j].sizes() == (*expected)[j], "gradcheck: output ", j, " has shape ",
                 shape_str(outputs[j].sizes()), " for perturbed inputs but ", shape_str((*expected)[j]),
                 " the first time");
  }
}

struct Block {  // d(output j) / d(input i), [input element][output element]
  int64_t rows = 0, cols = 0;
  std::vector<double> analytic, numeric;
};

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  KILN_CHECK(opts.eps > 0, "gradcheck: eps must be positive, got ", opts.eps);
  // ---- the inputs to differentiate ----
  std::vector<size_t> diff;  // positions in `inputs`
  std::vector<Tensor> diff_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!requires_grad(inputs[i])) continue;
    KILN_CHECK(inputs[i].dtype() == kFloat64, "gradcheck: input ", i, " (shape ", shape_str(inputs[i].sizes()),
               ") requires grad but has dtype ", inputs[i].dtype(),
               "; gradcheck needs float64 inputs: in float32 rounding swamps the central differences. Use "
               ".to(kFloat64) before requires_grad_()");
    KILN_CHECK(inputs[i].device().is_cpu(), "gradcheck: input ", i, " is on ", inputs[i].device(),
               "; gradcheck perturbs inputs on the CPU (move them with .cpu(); fn may move them back)");
    diff.push_back(i);
    diff_inputs.push_back(inputs[i]);
  }
  KILN_CHECK(!diff.empty(), "gradcheck: none of the ", inputs.size(),
             " inputs requires grad; call requires_grad_() on those to check");

  // ---- analytic Jacobian: one backward per output element ----
  std::vector<Tensor> outputs;
  {
    EnableGradGuard grad_on;
    outputs = fn(inputs);
  }
  check_outputs(outputs, nullptr);
  std::vector<Shape> out_shapes;
  for (const Tensor& o : outputs) out_shapes.push_back(o.sizes());

  // blocks[d * outputs.size() + j]
  std::vector<Block> blocks(diff.size() * outputs.size());
  for (size_t d = 0; d < diff.size(); ++d)
    for (size_t j = 0; j < outputs.size(); ++j) {
      Block& b = blocks[d * outputs.size() + j];
      b.rows = diff_inputs[d].numel();
      b.cols = is_checked(outputs[j]) ? outputs[j].numel() : 0;
      b.analytic.assign(static_cast<size_t>(b.rows * b.cols), 0.0);
      b.numeric.assign(static_cast<size_t>(b.rows * b.cols), 0.0);
    }

  std::vector<bool> disconnected(outputs.size(), false);  // floating outputs with no history: zero rows
  for (size_t j = 0; j < outputs.size(); ++j) {
    if (!is_checked(outputs[j])) continue;
    if (!requires_grad(outputs[j])) {
      disconnected[j] = true;
      continue;
    }
    for (int64_t k = 0; k < outputs[j].numel(); ++k) {
      Tensor one_hot = zeros(outputs[j].sizes(), kFloat64);
      one_hot.data_ptr<double>()[k] = 1.0;
      one_hot = ops::to(one_hot, outputs[j].device());  // fn may compute on a GPU
      std::vector<Tensor> grads = grad({outputs[j]}, diff_inputs, {one_hot}, /*retain_graph=*/true,
                                       /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t d = 0; d < diff.size(); ++d) {
        if (!grads[d].defined()) continue;  // unused: zero
        KILN_CHECK(grads[d].sizes() == diff_inputs[d].sizes(), "gradcheck: the gradient of input ", diff[d],
                   " has shape ", shape_str(grads[d].sizes()), ", the input has shape ",
                   shape_str(diff_inputs[d].sizes()));
        std::vector<double> g;
        {
          NoGradGuard no_grad;
          g = to_doubles(grads[d]);
        }
        Block& b = blocks[d * outputs.size() + j];
        for (int64_t e = 0; e < b.rows; ++e) b.analytic[e * b.cols + k] = g[e];
      }
    }
  }
  outputs.clear();  // frees the graph

  // ---- numerical Jacobian: fn at x + eps and x - eps per input element ----
  {
    NoGradGuard no_grad;
    std::vector<Tensor> probe = inputs;
    for (size_t d = 0; d < diff.size(); ++d) probe[diff[d]] = ops::clone(inputs[diff[d]]);  // contiguous, no history

    auto evaluate = [&](size_t changed) {
      uint64_t version = probe[changed].version();
      std::vector<Tensor> outs = fn(probe);
      KILN_CHECK(probe[changed].version() == version, "gradcheck: fn wrote into input ", changed,
                 " in place; fn must leave its inputs unchanged (clone first)");
      check_outputs(outs, &out_shapes);
      std::vector<std::vector<double>> values(outs.size());
      for (size_t j = 0; j < outs.size(); ++j)
        if (is_checked(outs[j])) values[j] = to_doubles(outs[j]);
      return values;
    };

    for (size_t d = 0; d < diff.size(); ++d) {
      size_t i = diff[d];
      double* x = probe[i].data_ptr<double>();
      for (int64_t e = 0; e < probe[i].numel(); ++e) {
        double saved = x[e];
        x[e] = saved + opts.eps;
        auto plus = evaluate(i);
        x[e] = saved - opts.eps;
        auto minus = evaluate(i);
        x[e] = saved;
        for (size_t j = 0; j < plus.size(); ++j) {
          Block& b = blocks[d * plus.size() + j];
          for (int64_t k = 0; k < b.cols; ++k) b.numeric[e * b.cols + k] = (plus[j][k] - minus[j][k]) / (2 * opts.eps);
        }
      }
    }
  }

  // ---- compare ----
  GradcheckResult r;
  double worst_score = -1.0;
  for (size_t d = 0; d < diff.size(); ++d)
    for (size_t j = 0; j < out_shapes.size(); ++j) {
      const Block& b = blocks[d * out_shapes.size() + j];
      for (int64_t e = 0; e < b.rows; ++e)
        for (int64_t k = 0; k < b.cols; ++k) {
          double a = b.analytic[e * b.cols + k], n = b.numeric[e * b.cols + k];
          double err = std::fabs(a - n), tol = opts.atol + opts.rtol * std::fabs(n);
          // NaN anywhere is a failure and the worst one.
          double score = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / tol;
          ++r.entries;
          if (!(err <= tol)) ++r.mismatches;
          if (score > worst_score) {
            worst_score = score;
            r.input = diff[d];
            r.input_index = unravel(e, inputs[diff[d]].sizes());
            r.output = j;
            r.output_index = unravel(k, out_shapes[j]);
            r.analytic = a;
            r.numeric = n;
            r.abs_err = err;
          }
        }
    }
  r.ok = r.mismatches == 0;

  std::ostringstream out;
  out << std::setprecision(8);
  auto describe_worst = [&] {
    double rel = r.numeric != 0 ? r.abs_err / std::fabs(r.numeric) : std::numeric_limits<double>::infinity();
    out << "  d(output " << r.output << " element " << shape_str(r.output_index) << ") / d(input " << r.input
        << " element " << shape_str(r.input_index) << "):\n"
        << "    analytic " << r.analytic << "\n    numeric  " << r.numeric << "\n    abs err  " << r.abs_err
        << ", rel err " << rel << "\n";
  };
  if (r.ok) {
    out << "gradcheck: ok, " << r.entries << " Jacobian entries agree (" << diff.size() << " inputs, "
        << out_shapes.size() << " outputs)\n";
    if (r.entries > 0) {
      out << "  largest error compared with its tolerance:\n";
      describe_worst();
    }
  } else {
    out << "gradcheck: the analytic and numerical Jacobians differ in " << r.mismatches << " of " << r.entries
        << " entries (atol " << opts.atol << ", rtol " << opts.rtol << ", eps " << opts.eps << ")\n"
        << "  worst entry:\n";
    describe_worst();
    if (disconnected[r.output])
      out << "  output " << r.output << " has no grad_fn: fn computed it without recording (a detach, a raw "
          << "kiln::ops call, or NoGradGuard), so backward sees zero gradient\n";
  }
  r.report = out.str();
  if (!r.ok && opts.raise) detail::throw_error(r.report);
  return r;
}

GradcheckResult gradcheck(const GradcheckSingleFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  return gradcheck(GradcheckFn([&fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in)}; }),
                   inputs, opts);
}

}  // namespace kiln::autograd

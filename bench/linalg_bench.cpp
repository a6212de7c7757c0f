// kiln::linalg's factorizations against torch.linalg's on the CPU, in one process, interleaved, medians: a single
// large matrix (where the solver's own speed counts: Eigen's blocked algorithms against LAPACK's) and a batch of
// small ones (where the cost per matrix counts). Forward alone, and forward + backward of a sum for the ones
// users differentiate. Each pair is checked to agree before it is timed. Without LibTorch
// (KILN_BENCH_WITH_TORCH unset) it times kiln alone.
//
//   linalg_bench [reps] [filter]     (filter: run only the rows whose op name contains it)
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#ifdef KILN_BENCH_WITH_TORCH
#include <torch/torch.h>
#endif

#include "bench_util.h"

namespace {

using kiln::Tensor;
namespace linalg = kiln::linalg;

#ifdef KILN_BENCH_WITH_TORCH
torch::Tensor to_torch(const Tensor& t) {
  const Tensor c = t.detach().contiguous().to(kiln::kFloat64);
  std::vector<int64_t> shape(c.sizes().begin(), c.sizes().end());
  return torch::from_blob(c.raw_data_ptr(), shape, torch::kFloat64).clone().to(torch::kFloat32);
}
#endif

struct Row {
  std::string op, shape;
  bool backward;
  std::function<Tensor()> ours;  // the value whose sum is checked (and backpropagated)
#ifdef KILN_BENCH_WITH_TORCH
  std::function<torch::Tensor()> theirs;
#endif
};

void run(const Row& row, int reps) {
  std::vector<std::function<void()>> variants = {[&] {
    const Tensor y = row.ours();
    if (row.backward) y.sum().backward();
    kiln::bench::do_not_optimize(y.impl());
  }};
#ifdef KILN_BENCH_WITH_TORCH
  const double ours = row.ours().sum().item<double>(), theirs = row.theirs().sum().item<double>();
  if (std::abs(ours - theirs) > 2e-3 * std::max(1.0, std::abs(theirs))) {
    std::fprintf(stderr, "linalg_bench: %s %s: %g against LibTorch's %g\n", row.op.c_str(), row.shape.c_str(), ours,
                 theirs);
    std::exit(1);
  }
  variants.push_back([&] {
    const torch::Tensor y = row.theirs();
    if (row.backward) y.sum().backward();
    kiln::bench::do_not_optimize(y.data_ptr());
  });
#endif
  const std::vector<double> t = kiln::bench::time_interleaved(variants, reps);
  std::printf("| %s%s | %s | %.1f |", row.op.c_str(), row.backward ? " (fwd + bwd)" : "", row.shape.c_str(),
              t[0] * 1e6);
  if (t.size() > 1) std::printf(" %.1f | %.2f |", t[1] * 1e6, t[0] / t[1]);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  const std::string filter = argc > 2 ? argv[2] : "";
  kiln::manual_seed(1);
  bool torch = false;
#ifdef KILN_BENCH_WITH_TORCH
  torch = true;
  torch::set_num_threads(kiln::get_num_threads());
#endif
  std::printf("linalg_bench on cpu, float32, %d threads, medians of %d interleaved runs, us per call\n\n",
              kiln::get_num_threads(), reps);
  std::printf("| op | shape | kiln |%s\n", torch ? " LibTorch | kiln / LibTorch |" : "");
  std::printf("|---|---|---|%s\n", torch ? "---|---|" : "");

  std::vector<Row> rows;
  // One large matrix and a batch of small ones, each symmetric positive-definite (x x^T / n + I), with a
  // right-hand side of 16 columns.
  for (auto [batch, n] : {std::pair<int64_t, int64_t>{1, 512}, {512, 8}}) {
    const std::string shape = (batch > 1 ? std::to_string(batch) + " x " : "") + std::to_string(n) + " x " +
                              std::to_string(n);
    const Tensor x = kiln::randn({batch, n, n});
    const Tensor spd = (kiln::matmul(x, x.mT()) / static_cast<double>(n) +
                        kiln::eye(n, n).expand({batch, n, n}))
                           .contiguous()
                           .requires_grad_();
    const Tensor rhs = kiln::randn({batch, n, 16}).requires_grad_();
    // Well conditioned (x / sqrt(n) has its eigenvalues in about the unit disc): x + 3 I at n = 512 had some near
    // zero, and float32 solves of it differed between LAPACK builds by more than the check below allows.
    const Tensor general = (x / std::sqrt(static_cast<double>(n)) + 3.0 * kiln::eye(n, n).expand({batch, n, n}))
                               .contiguous()
                               .requires_grad_();
#ifdef KILN_BENCH_WITH_TORCH
    const torch::Tensor tspd = to_torch(spd).requires_grad_(), trhs = to_torch(rhs).requires_grad_(),
                        tgeneral = to_torch(general).requires_grad_();
#define THEIRS(...) , [=] { return __VA_ARGS__; }
#else
#define THEIRS(...)
#endif
    rows.push_back({"cholesky", shape, false, [=] { kiln::NoGradGuard g; return linalg::cholesky(spd); }
                    THEIRS(torch::linalg_cholesky(tspd.detach()))});
    rows.push_back({"cholesky", shape, true, [=] { return linalg::cholesky(spd); }
                    THEIRS(torch::linalg_cholesky(tspd))});
    rows.push_back({"solve", shape, false, [=] { kiln::NoGradGuard g; return linalg::solve(general, rhs); }
                    THEIRS(torch::linalg_solve(tgeneral.detach(), trhs.detach()))});
    rows.push_back({"solve", shape, true, [=] { return linalg::solve(general, rhs); }
                    THEIRS(torch::linalg_solve(tgeneral, trhs))});
    rows.push_back({"inv", shape, false, [=] { kiln::NoGradGuard g; return linalg::inv(general); }
                    THEIRS(torch::linalg_inv(tgeneral.detach()))});
    rows.push_back({"slogdet", shape, true, [=] { return linalg::slogdet(general).logabsdet; }
                    THEIRS(std::get<1>(torch::linalg_slogdet(tgeneral)))});
    rows.push_back({"eigvalsh", shape, false, [=] { kiln::NoGradGuard g; return linalg::eigvalsh(spd); }
                    THEIRS(torch::linalg_eigvalsh(tspd.detach()))});
    rows.push_back({"eigvalsh", shape, true, [=] { return linalg::eigvalsh(spd); }
                    THEIRS(torch::linalg_eigvalsh(tspd))});
    rows.push_back({"qr (R)", shape, false, [=] { kiln::NoGradGuard g; return linalg::qr(general).R.abs(); }
                    THEIRS(std::get<1>(torch::linalg_qr(tgeneral.detach())).abs())});
    rows.push_back({"svdvals", shape, false, [=] { kiln::NoGradGuard g; return linalg::svdvals(general); }
                    THEIRS(torch::linalg_svdvals(tgeneral.detach()))});
    rows.push_back({"svd", shape, true, [=] { return linalg::svdvals(general); }
                    THEIRS(torch::linalg_svdvals(tgeneral))});
#undef THEIRS
  }
  for (const Row& row : rows)
    if (row.op.find(filter) != std::string::npos) run(row, reps);
  return 0;
}

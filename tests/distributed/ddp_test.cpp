// DistributedDataParallel across real processes (tests/distributed/multiprocess.h), over the "tcp" group
// (the equivalence tests over every forkable backend of the build: tcp, gloo), meeting through a FileStore. The oracle is one process training the same model on the whole batch, with no
// communication at all: N ranks, each on its shard of the batch (mean-reduced loss, equal shards), must match
// it. The bucket arithmetic (assign_buckets) is checked on its own, without processes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "distributed/multiprocess.h"
#include "kiln/autograd/grad_mode.h"
#include "kiln/distributed/ddp.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/sgd.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/rng.h"

namespace kiln::distributed {
namespace {

using kiln::test::expect_all_ok;
using kiln::test::rank_check;
using kiln::test::run_ranks;
namespace F = nn::functional;

constexpr int64_t kIn = 5, kHidden = 7, kOut = 3, kBatch = 12;  // kBatch: divisible by 2, 3 and 4

std::string store_path(const std::string& name) { return kiln::test::fresh_temp_path("ddp_" + name); }

std::shared_ptr<ProcessGroup> make_group(const std::string& path, int rank, int world,
                                         const std::string& backend = "tcp") {
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(20);
  return new_group(backend, store, rank, world, o);
}

// The backends of this build whose ranks can be forked processes (mpi's are mpirun's: mpi_process_group_test.cpp
// runs its DDP check).
std::vector<std::string> forkable_backends() {
  std::vector<std::string> names;
  for (const auto& name : backends())
    if (name != "mpi" && name != "nccl") names.push_back(name);
  return names;
}

class DDPOverBackend : public testing::TestWithParam<std::string> {};

// Linear-ReLU-Linear, with an optional layer forward never uses (for find_unused_parameters), and an optional
// different hidden size (for the construction check).
struct Mlp : nn::Module {
  nn::Linear fc1, fc2;
  std::shared_ptr<nn::LinearImpl> unused;
  explicit Mlp(bool with_unused = false, int64_t hidden = kHidden) : fc1(kIn, hidden), fc2(hidden, kOut) {
    register_module("fc1", fc1);
    if (with_unused) unused = register_module("unused", std::make_shared<nn::LinearImpl>(kIn, kOut));
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }
};

std::shared_ptr<Mlp> make_mlp(uint64_t seed, bool with_unused = false, int64_t hidden = kHidden) {
  manual_seed(seed);
  return std::make_shared<Mlp>(with_unused, hidden);
}

// The whole batch of step `step`: the same on every rank. x: (kBatch, kIn), y: (kBatch, kOut).
std::pair<Tensor, Tensor> batch(int step) {
  Generator gen(1000 + step);
  return {randn({kBatch, kIn}, {}, &gen), randn({kBatch, kOut}, {}, &gen)};
}
Tensor shard(const Tensor& t, int rank, int world) {
  const int64_t n = t.size(0) / world;
  return t.narrow(0, rank * n, n).contiguous();
}

// |got - want| <= 1e-6 * (1 + |want|) element by element: float32 rounding of sums taken in another order.
void check_close(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-6) {
  rank_check(got.defined() && want.defined(), what + ": a tensor is undefined");
  rank_check(got.sizes() == want.sizes(), what + ": shapes differ");
  const auto a = got.to_vector<double>(), b = want.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    rank_check(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i])),
               what + ": element " + std::to_string(i) + " is " + std::to_string(a[i]) + ", reference " +
                   std::to_string(b[i]));
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().raw_data_ptr(), b.contiguous().raw_data_ptr(), a.nbytes()) == 0;
}
void check_models_close(nn::Module& got, nn::Module& want, const std::string& what, bool grads) {
  const auto g = got.named_parameters(), w = want.named_parameters();
  rank_check(g.size() == w.size(), what + ": parameter counts differ");
  for (size_t i = 0; i < g.size(); ++i)
    check_close(grads ? g[i].second.grad() : g[i].second, grads ? w[i].second.grad() : w[i].second,
                what + " " + g[i].first + (grads ? " grad" : ""));
}

// Every rank holds the same bytes in t.
void check_same_across_ranks(ProcessGroup& pg, const Tensor& t, const std::string& what) {
  Tensor mine = t.contiguous();
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(empty(mine.sizes(), TensorOptions(mine.dtype())));
  pg.allgather(all, mine)->wait();
  for (int r = 0; r < pg.size(); ++r)
    rank_check(same_bits(all[r], mine), what + ": rank " + std::to_string(r) + " differs from rank " +
                                            std::to_string(pg.rank()));
}

// One process, the whole batch: the oracle. Leaves the model after `steps` SGD steps; grads of the last step.
void train_reference(nn::Module& model, int steps) {
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    auto [x, y] = batch(s);
    F::mse_loss(model(x), y).backward();
    opt.step();
  }
}

// `steps` DDP steps on this rank's shards. Checks the averaged grads of the first step against `reference_grads`
// when given.
void train_ddp(DistributedDataParallel& ddp, int steps, nn::Module* reference_grads = nullptr) {
  const int rank = ddp.process_group()->rank(), world = ddp.process_group()->size();
  optim::SGD opt(ddp.module()->parameters(), {.lr = 0.1});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    auto [x, y] = batch(s);
    F::mse_loss(ddp(shard(x, rank, world)), shard(y, rank, world)).backward();
    ddp.finalize();
    if (s == 0 && reference_grads) check_models_close(*ddp.module(), *reference_grads, "first step", true);
    opt.step();
  }
}

// ---------------------------------------------------------------------------------------------------------

TEST(DDPBuckets, ReverseOrderFirstBucketSmallDtypesApart) {
  // Registration order: a0..a5 float32 of 10 elements (40 bytes), d float64 of 10 (80 bytes) in the middle.
  std::vector<Tensor> params;
  for (int i = 0; i < 3; ++i) params.push_back(zeros({10}));
  params.push_back(zeros({10}, TensorOptions(kFloat64)));
  for (int i = 0; i < 3; ++i) params.push_back(zeros({2, 5}));
  // First bucket of each dtype closes at >= 100 bytes, later ones at >= 200.
  const auto buckets = assign_buckets(params, 100, 200);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].params, (std::vector<size_t>{6, 5, 4}));  // 120 bytes: closed
  EXPECT_EQ(buckets[0].offsets, (std::vector<int64_t>{0, 10, 20}));
  EXPECT_EQ(buckets[0].numel, 30);
  EXPECT_EQ(buckets[1].dtype, kFloat64);  // 80 bytes, left open, then emitted by its first parameter's place
  EXPECT_EQ(buckets[1].params, (std::vector<size_t>{3}));
  EXPECT_EQ(buckets[2].params, (std::vector<size_t>{2, 1, 0}));  // 120 bytes < 200: left open
  // A limit of 0: one parameter a bucket; a huge one: one bucket per dtype.
  EXPECT_EQ(assign_buckets(params, 0, 0).size(), params.size());
  EXPECT_EQ(assign_buckets(params, 1 << 30, 1 << 30).size(), 2u);
  // The first bucket's limit is capped by the later ones'.
  EXPECT_EQ(assign_buckets(params, 1 << 30, 0).size(), params.size());
}

// N ranks on shards == one process on the batch: the averaged gradients of the first step and the parameters
// after 5 SGD steps, on 2 and 3 ranks, overlap on and off.
TEST_P(DDPOverBackend, MatchesOneProcessOnTheWholeBatch) {
  for (int world : {2, 3}) {
    const std::string path = store_path("match" + std::to_string(world));
    auto results = run_ranks(world, [&](int rank) {
      auto pg = make_group(path, rank, world, GetParam());
      for (bool overlap : {true, false}) {
        auto model = make_mlp(7), grads_ref = make_mlp(7), ref = make_mlp(7);
        train_reference(*grads_ref, 1);  // (a fresh model whose .grad holds step 0's whole-batch gradients)
        train_reference(*ref, 5);
        DistributedDataParallel ddp(model, pg, {.overlap = overlap});
        train_ddp(ddp, 5, grads_ref.get());
        check_models_close(*model, *ref, "after 5 steps, overlap " + std::to_string(overlap), false);
      }
    });
    expect_all_ok(results);
  }
}

// Every parameter its own bucket, or all in one: the same training; the layout is the reverse of the
// registration order and the same on every rank.
TEST(DDP, BucketCapsGiveTheSameResultAndLayout) {
  const std::string path = store_path("caps");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2);
    auto tiny_model = make_mlp(7), huge_model = make_mlp(7), ref = make_mlp(7);
    DistributedDataParallel tiny(tiny_model, pg, {.bucket_cap_mb = 0});
    DistributedDataParallel huge(huge_model, pg, {.bucket_cap_mb = 1e6, .first_bucket_cap_mb = 1e6});
    using Layout = std::vector<std::vector<std::string>>;
    rank_check(tiny.bucket_layout() == Layout{{"fc2.bias"}, {"fc2.weight"}, {"fc1.bias"}, {"fc1.weight"}},
               "the tiny cap's layout");
    rank_check(huge.bucket_layout() == Layout{{"fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"}},
               "the huge cap's layout");
    for (auto* ddp : {&tiny, &huge}) {
      std::string text;
      for (const auto& b : ddp->bucket_layout())
        for (const auto& n : b) text += n + (&n == &b.back() ? "|" : ",");
      check_same_across_ranks(*pg, tensor(std::vector<uint8_t>(text.begin(), text.end()),
                                          {static_cast<int64_t>(text.size())}, TensorOptions(kUInt8)),
                              "bucket layout");
    }
    train_reference(*ref, 5);
    train_ddp(tiny, 5);
    train_ddp(huge, 5);
    check_models_close(*tiny_model, *ref, "tiny buckets", false);
    check_models_close(*huge_model, *ref, "one bucket", false);
  });
  expect_all_ok(results);
}

// A group that passes every call to another and logs the all-reduces (their element counts) next to the
// test's own events: DDP works on any ProcessGroup, and this one shows when it communicates.
class LoggingGroup : public ProcessGroup {
 public:
  LoggingGroup(std::shared_ptr<ProcessGroup> inner, std::vector<std::string>& log)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)), log_(log) {}
  std::string backend() const override { return "logging+" + inner_->backend(); }
  std::shared_ptr<Work> allreduce(Tensor t, ReduceOp op) override {
    log_.push_back("allreduce " + std::to_string(t.numel()));
    return inner_->allreduce(t, op);
  }
  std::shared_ptr<Work> broadcast(Tensor t, int root) override { return inner_->broadcast(t, root); }
  std::shared_ptr<Work> reduce(Tensor t, int root, ReduceOp op) override { return inner_->reduce(t, root, op); }
  std::shared_ptr<Work> allgather(std::vector<Tensor> outputs, Tensor input) override {
    return inner_->allgather(std::move(outputs), input);
  }
  std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) override {
    return inner_->reduce_scatter(output, std::move(inputs), op);
  }
  std::shared_ptr<Work> barrier() override { return inner_->barrier(); }
  std::shared_ptr<Work> send(Tensor t, int dst, int tag) override { return inner_->send(t, dst, tag); }
  std::shared_ptr<Work> recv(Tensor t, int src, int tag) override { return inner_->recv(t, src, tag); }

 private:
  std::shared_ptr<ProcessGroup> inner_;
  std::vector<std::string>& log_;
};

// One bucket per parameter: with overlap, the last layer's buckets are issued while backward has yet to reach
// fc1.weight; without, all of them after; in bucket order either way.
TEST(DDP, OverlapIssuesBucketsDuringBackwardInBucketOrder) {
  const std::string path = store_path("overlap");
  auto results = run_ranks(2, [&](int rank) {
    auto tcp = make_group(path, rank, 2);
    for (bool overlap : {true, false}) {
      std::vector<std::string> log;
      auto model = make_mlp(7);
      // Registered before DDP's own hook, so it runs first: the moment fc1.weight's gradient is done.
      model->fc1->weight.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("fc1.weight"); });
      DistributedDataParallel ddp(model, std::make_shared<LoggingGroup>(tcp, log), {.bucket_cap_mb = 0, .overlap = overlap});
      auto [x, y] = batch(0);
      log.clear();  // (construction's collectives are not all-reduces, but start clean anyway)
      F::mse_loss(ddp(shard(x, rank, 2)), shard(y, rank, 2)).backward();
      ddp.finalize();
      std::vector<std::string> sizes;
      for (const auto& e : log)
        if (e != "fc1.weight") sizes.push_back(e);
      const auto n = [](int64_t k) { return "allreduce " + std::to_string(k); };
      rank_check(sizes == std::vector<std::string>{n(kOut), n(kOut * kHidden), n(kHidden), n(kHidden * kIn)},
                 "buckets issued in bucket order");
      const bool some_before = log.front() != "fc1.weight";
      rank_check(some_before == overlap, overlap ? "with overlap, buckets go out during backward"
                                                 : "without overlap, nothing goes out during backward");
    }
  });
  expect_all_ok(results);
}

// Two branches whose backward order differs between the ranks (rank 0 builds branch a first, rank 1 branch b,
// and backward runs the later-built first): buckets become ready in different orders on the two ranks, and
// must still be issued in bucket order on both, or the reductions pair up wrong buckets.
struct TwoBranches : nn::Module {
  nn::Linear a{kIn, kOut}, b{kIn, kOut, false};
  bool a_first = true;
  TwoBranches() {
    register_module("a", a);
    register_module("b", b);
  }
  Tensor forward(const Tensor& x) override {
    if (a_first) {
      Tensor ya = a(x);
      return ya + relu(b(x));
    }
    Tensor yb = relu(b(x));
    return a(x) + yb;
  }
};

TEST(DDP, BucketsLaunchInOrderWhenReadyOutOfOrder) {
  const std::string path = store_path("order");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2);
    manual_seed(3);
    auto model = std::make_shared<TwoBranches>();
    manual_seed(3);
    auto ref = std::make_shared<TwoBranches>();
    model->a_first = rank == 0;
    DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0});
    train_reference(*ref, 3);
    train_ddp(ddp, 3);
    check_models_close(*model, *ref, "two branches", false);
  });
  expect_all_ok(results);
}

// Parameters of two dtypes: each dtype gets buckets of its own (one flat buffer, one collective each).
struct MixedDtypes : nn::Module {
  Tensor w32, w64;  // (kIn, kOut) each
  MixedDtypes() {
    w32 = register_parameter("w32", randn({kIn, kOut}));
    w64 = register_parameter("w64", randn({kIn, kOut}, TensorOptions(kFloat64)));
  }
  Tensor forward(const Tensor& x) override { return x.matmul(w32) + x.to(kFloat64).matmul(w64).to(kFloat32); }
};

TEST(DDP, MixedDtypesGoToSeparateBuckets) {
  const std::string path = store_path("mixed");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2);
    manual_seed(5);
    auto model = std::make_shared<MixedDtypes>();
    manual_seed(5);
    auto ref = std::make_shared<MixedDtypes>();
    DistributedDataParallel ddp(model, pg);
    using Layout = std::vector<std::vector<std::string>>;
    rank_check(ddp.bucket_layout() == Layout{{"w64"}, {"w32"}}, "one bucket per dtype, in reverse order");
    train_reference(*ref, 3);
    train_ddp(ddp, 3);
    check_models_close(*model, *ref, "mixed dtypes", false);
  });
  expect_all_ok(results);
}

// no_sync over micro-batch 1 (local only), then a synced backward over micro-batch 2 == one synced step on
// both micro-batches together. Each micro-batch's loss is halved, so the accumulated gradient is the mean.
TEST(DDP, NoSyncAccumulationEqualsOneStepOnTheConcatenatedBatch) {
  const std::string path = store_path("nosync");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2);
    auto [x, y] = batch(0);
    const Tensor xs = shard(x, rank, 2), ys = shard(y, rank, 2);  // this rank's 6 rows: micro-batches of 3
    auto model = make_mlp(7), whole = make_mlp(7), local = make_mlp(7);
    DistributedDataParallel ddp(model, pg), ddp_whole(whole, pg);

    {
      auto guard = ddp.no_sync();
      (F::mse_loss(ddp(xs.narrow(0, 0, 3)), ys.narrow(0, 0, 3)) * 0.5).backward();
    }
    // Inside no_sync nothing was averaged: the grads are this rank's own.
    (F::mse_loss((*local)(xs.narrow(0, 0, 3)), ys.narrow(0, 0, 3)) * 0.5).backward();
    check_models_close(*model, *local, "after the no_sync backward", true);

    (F::mse_loss(ddp(xs.narrow(0, 3, 3)), ys.narrow(0, 3, 3)) * 0.5).backward();
    ddp.finalize();
    F::mse_loss(ddp_whole(xs), ys).backward();
    ddp_whole.finalize();
    check_models_close(*model, *whole, "accumulated with no_sync", true);

    // A window that ends without a synced backward: both micro-batches inside no_sync, then the accumulated
    // gradients averaged through the buckets, equal the same synced step.
    auto cut = make_mlp(7);
    DistributedDataParallel ddp_cut(cut, pg);
    {
      auto guard = ddp_cut.no_sync();
      (F::mse_loss(ddp_cut(xs.narrow(0, 0, 3)), ys.narrow(0, 0, 3)) * 0.5).backward();
      (F::mse_loss(ddp_cut(xs.narrow(0, 3, 3)), ys.narrow(0, 3, 3)) * 0.5).backward();
    }
    ddp_cut.allreduce_accumulated_gradients();
    check_models_close(*cut, *whole, "accumulated, then averaged by hand", true);
  });
  expect_all_ok(results);
}

// A parameter forward never uses: an error naming it, unless find_unused_parameters, which trains the model
// as the oracle does and leaves the unused parameter's .grad undefined.
TEST(DDP, UnusedParameterIsAnErrorOrCountsAsZero) {
  const std::string path = store_path("unused");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2);
    auto [x, y] = batch(0);
    {
      auto model = make_mlp(7, true);
      DistributedDataParallel ddp(model, pg);
      F::mse_loss(ddp(shard(x, rank, 2)), shard(y, rank, 2)).backward();
      std::string message;
      try {
        ddp.finalize();
      } catch (const std::exception& e) {
        message = e.what();
      }
      rank_check(message.find("'unused.weight'") != std::string::npos &&
                     message.find("'unused.bias'") != std::string::npos &&
                     message.find("find_unused_parameters") != std::string::npos,
                 "the error names the unused parameters: " + message);
      // Without finalize, the next forward reports it.
      F::mse_loss(ddp(shard(x, rank, 2)), shard(y, rank, 2)).backward();
      message.clear();
      try {
        ddp(shard(x, rank, 2));
      } catch (const std::exception& e) {
        message = e.what();
      }
      rank_check(message.find("'unused.weight'") != std::string::npos, "the next forward names it: " + message);
      if (rank == 0) std::fprintf(stderr, "unused-parameter error: %s\n", message.c_str());
    }
    auto model = make_mlp(7, true), ref = make_mlp(7, true);
    DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0, .find_unused_parameters = true});
    train_reference(*ref, 3);
    train_ddp(ddp, 3);
    check_models_close(*model, *ref, "find_unused_parameters", false);
    rank_check(!model->unused->named_parameters()[0].second.grad().defined(), "the unused weight has no grad");

    // The hooks finish the reduction by themselves: finalize is not needed once backward is done.
    auto model2 = make_mlp(7, true), ref2 = make_mlp(7, true);
    DistributedDataParallel ddp2(model2, pg, {.find_unused_parameters = true});
    F::mse_loss(ddp2(shard(x, rank, 2)), shard(y, rank, 2)).backward();
    F::mse_loss((*ref2)(x), y).backward();
    check_close(model2->fc1->named_parameters()[0].second.grad(), ref2->fc1->named_parameters()[0].second.grad(),
                "averaged without finalize");
  });
  expect_all_ok(results);
}

// A parameter frozen after DDP was made (requires_grad_(false), as BackboneFinetuning does) is no missing
// gradient: it keeps no .grad, the others are averaged as on the whole batch, and unfrozen again it is averaged
// too. Without find_unused_parameters.
TEST(DDP, FrozenParametersSitOutTheRoundAndJoinAgainWhenUnfrozen) {
  const std::string path = store_path("frozen");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2);
    auto model = make_mlp(7), ref = make_mlp(7);
    DistributedDataParallel ddp(model, pg);
    for (auto* m : {model.get(), ref.get()}) {
      for (const Tensor& p : m->fc1->parameters()) p.requires_grad_(false);
    }
    const Tensor frozen_w = model->fc1->named_parameters()[0].second;
    frozen_w.set_grad(full(frozen_w.sizes(), 7.0));  // a frozen parameter's .grad is left as it was
    auto [x, y] = batch(0);
    F::mse_loss(ddp(shard(x, rank, 2)), shard(y, rank, 2)).backward();
    ddp.finalize();
    F::mse_loss((*ref)(x), y).backward();
    rank_check(frozen_w.grad().equal(full(frozen_w.sizes(), 7.0)), "the frozen weight's grad changed");
    rank_check(!model->fc1->named_parameters()[1].second.grad().defined(), "the frozen bias got a grad");
    check_close(model->fc2->named_parameters()[0].second.grad(), ref->fc2->named_parameters()[0].second.grad(),
                "fc2 with fc1 frozen");
    for (auto* m : {model.get(), ref.get()}) {
      for (const Tensor& p : m->parameters()) p.requires_grad_(true), p.set_grad(Tensor());
    }
    F::mse_loss(ddp(shard(x, rank, 2)), shard(y, rank, 2)).backward();
    ddp.finalize();
    F::mse_loss((*ref)(x), y).backward();
    check_models_close(*model, *ref, "unfrozen", true);

    // Frozen before DDP was made, it is in no bucket: made trainable later, the next backward refuses it.
    auto late = make_mlp(7);
    for (const Tensor& p : late->fc1->parameters()) p.requires_grad_(false);
    DistributedDataParallel late_ddp(late, pg);
    for (const Tensor& p : late->fc1->parameters()) p.requires_grad_(true);
    std::string message;
    try {
      F::mse_loss(late_ddp(shard(x, rank, 2)), shard(y, rank, 2)).backward();
    } catch (const std::exception& e) {
      message = e.what();
    }
    rank_check(message.find("'fc1.weight' did not require grad when DDP was made") != std::string::npos,
               "a parameter made trainable after DDP: " + message);
  });
  expect_all_ok(results);
}

// A parameter frozen on one rank only: that rank's finalize finds a nonzero average for it (the other rank's
// gradient) and raises an error naming it and the rank. (Rank 0 cannot tell; in a job it fails at its next
// collective once rank 1 stops.) The round's collectives all completed, so the next round, with the parameter
// unfrozen on both ranks, is averaged correctly.
// Both ways the check reads the buckets: the parameter sharing a bucket with others, and alone in its own
// (bucket_cap_mb 0), a bucket frozen whole.
TEST(DDP, AParameterFrozenOnOneRankOnlyIsAnError) {
  for (double cap : {25.0, 0.0}) {
    const std::string path = store_path(cap > 0 ? "frozen_one" : "frozen_one_alone");
    auto results = run_ranks(2, [&](int rank) {
      auto pg = make_group(path, rank, 2);
      auto model = make_mlp(7), ref = make_mlp(7);
      DistributedDataParallel ddp(model, pg, DDPOptions{.bucket_cap_mb = cap});
      if (rank == 1) model->fc1->named_parameters()[0].second.requires_grad_(false);
      auto [x, y] = batch(0);
      std::string message;
      try {
        F::mse_loss(ddp(shard(x, rank, 2)), shard(y, rank, 2)).backward();
        ddp.finalize();
      } catch (const std::exception& e) {
        message = e.what();
      }
      if (rank == 1) {
        rank_check(message.find("parameter 'fc1.weight' is frozen (requires_grad false) on rank 1, but another rank "
                                "sent a gradient for it") != std::string::npos,
                   "rank 1 froze fc1.weight alone: " + message);
      } else {
        rank_check(message.empty(), "rank 0, whose round completed: " + message);
      }
      model->fc1->named_parameters()[0].second.requires_grad_(true);
      for (const Tensor& p : model->parameters()) p.set_grad(Tensor());
      F::mse_loss(ddp(shard(x, rank, 2)), shard(y, rank, 2)).backward();
      ddp.finalize();
      F::mse_loss((*ref)(x), y).backward();
      check_models_close(*model, *ref, "the round after the error", true);
    });
    expect_all_ok(results);
  }
}

// Parameters of different shapes on different ranks: every rank fails at construction, naming the parameter
// and the ranks.
TEST(DDP, DifferentShapesFailAtConstruction) {
  const std::string path = store_path("shapes");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2);
    auto model = make_mlp(7, false, rank == 0 ? kHidden : kHidden + 1);
    std::string message;
    try {
      DistributedDataParallel ddp(model, pg);
    } catch (const std::exception& e) {
      message = e.what();
    }
    if (rank == 1) std::fprintf(stderr, "shape error: %s\n", message.c_str());
    rank_check(message.find("'fc1.weight'") != std::string::npos && message.find("rank 0") != std::string::npos &&
                   message.find("rank 1") != std::string::npos,
               "the error names fc1.weight and both ranks: " + message);
  });
  expect_all_ok(results);
}

// Ranks that start from different weights hold rank 0's after construction; buffers are rank 0's after each
// forward (broadcast_buffers), or stay each rank's own without it.
TEST(DDP, ConstructionAndForwardBroadcastFromRankZero) {
  const std::string path = store_path("bcast");
  auto results = run_ranks(3, [&](int rank) {
    auto pg = make_group(path, rank, 3);
    auto model = make_mlp(100 + rank), rank0 = make_mlp(100);
    DistributedDataParallel ddp(model, pg);
    for (size_t i = 0; i < model->parameters().size(); ++i)
      rank_check(same_bits(model->parameters()[i], rank0->parameters()[i]), "parameters are rank 0's");

    for (bool broadcast : {true, false}) {
      auto net = std::make_shared<nn::SequentialImpl>(nn::Linear(kIn, 4), nn::BatchNorm1d(4));
      DistributedDataParallel bn(net, pg, {.broadcast_buffers = broadcast});
      net->eval();  // eval: forward reads the running stats and leaves them
      const Tensor mean = net->named_buffers()[0].second;  // a handle on the module's own buffer
      rank_check(net->named_buffers()[0].first == "1.running_mean", "the first buffer is the running mean");
      {
        NoGradGuard g;
        mean.fill_(rank + 1.0);
      }
      Tensor out = bn(batch(0).first);
      const double want = broadcast ? 1.0 : rank + 1.0;
      check_close(mean, full({4}, want), std::string("running mean, broadcast_buffers ") + (broadcast ? "on" : "off"));
      if (broadcast) check_same_across_ranks(*pg, out, "outputs from the same buffers");
    }
  });
  expect_all_ok(results);
}

// The same inputs twice give the same bits, and overlap on and off give the same bits (the same buffers and the
// same collectives, only issued at other times), on every rank alike.
TEST_P(DDPOverBackend, DeterministicBitsOverlapOnAndOff) {
  const std::string path = store_path("bits");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = make_group(path, rank, 2, GetParam());
    std::vector<std::vector<Tensor>> finals;
    for (bool overlap : {true, true, false}) {
      auto model = make_mlp(11);
      DistributedDataParallel ddp(model, pg, {.first_bucket_cap_mb = 1e-4, .overlap = overlap});
      train_ddp(ddp, 4);
      finals.push_back(model->parameters());
    }
    for (size_t i = 0; i < finals[0].size(); ++i) {
      rank_check(same_bits(finals[0][i], finals[1][i]), "two runs differ in parameter " + std::to_string(i));
      rank_check(same_bits(finals[0][i], finals[2][i]), "overlap on and off differ in parameter " + std::to_string(i));
      check_same_across_ranks(*pg, finals[0][i], "parameter " + std::to_string(i));
    }
  });
  expect_all_ok(results);
}

INSTANTIATE_TEST_SUITE_P(Backends, DDPOverBackend, testing::ValuesIn(forkable_backends()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kiln::distributed

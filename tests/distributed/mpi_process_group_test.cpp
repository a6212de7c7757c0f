// The "mpi" process group, run as `mpirun -np N kiln_mpi_process_group_tests` (CTest runs N = 1..4): the
// checks every backend shares (collective_checks.h), the dtypes MPI cannot reduce, two groups at once, the same
// inputs through tcp (a group over a FileStore in the same mpirun job) and mpi giving the same results, and DDP
// over mpi against one process on the whole batch. Every rank runs every test; a failed check on any rank fails
// the job (mpirun exits non-zero). MPI itself is reached only through the backend, which initializes it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>

#include "distributed/collective_checks.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/env.h"
#include "kiln/distributed/process_group.h"
#include "kiln/kiln.h"
#include "kiln/trainer/trainer.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/sgd.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/rng.h"

namespace kiln::distributed {
namespace {

using kiln::test::rank_check;

RankInfo job() {
  const auto info = rank_info_from_env();
  return info.value_or(RankInfo{});  // no launcher at all: a world of one
}

ProcessGroupOptions named(const std::string& name) {
  ProcessGroupOptions o;
  o.name = name;
  o.timeout = std::chrono::seconds(60);
  return o;
}

// The mpi backend takes no store: new_group accepts none for it.
std::shared_ptr<ProcessGroup> mpi_group(const std::string& name = "default") {
  const RankInfo info = job();
  return new_group("mpi", nullptr, info.rank, info.world_size, named(name));
}

// A FileStore every rank of this mpirun job shares: rank 0 picks a fresh path, the mpi group broadcasts it.
std::shared_ptr<Store> shared_file_store(ProcessGroup& pg) {
  std::string path = testing::TempDir() + "kiln_mpi_store_" + std::to_string(getpid()) + "_" +
                     std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  Tensor length = full({1}, static_cast<double>(path.size()), kInt64);
  pg.broadcast(length, 0)->wait();
  Tensor bytes = zeros({length.to_vector<int64_t>()[0]}, kUInt8);
  if (pg.rank() == 0) std::memcpy(bytes.raw_data_ptr(), path.data(), path.size());
  pg.broadcast(bytes, 0)->wait();
  const auto* p = static_cast<const char*>(bytes.raw_data_ptr());
  return std::make_shared<FileStore>(std::string(p, p + bytes.numel()), -1, std::chrono::seconds(30));
}

// A failed check throws; as a test failure, on whichever rank it happened.
void run_checked(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << job().rank << ": " << e.what();
  }
}

TEST(ProcessGroupMPI, IsRegisteredAndMatchesTheWorld) {
  auto pg = mpi_group();
  EXPECT_EQ(pg->backend(), "mpi");
  EXPECT_EQ(pg->rank(), job().rank);
  EXPECT_EQ(pg->size(), job().world_size);
  // A size other than MPI_COMM_WORLD's is an error pointing at mpirun.
  try {
    new_group("mpi", nullptr, 0, job().world_size + 1, named("wrong"));
    ADD_FAILURE() << "no error for a size that is not the world's";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun"), std::string::npos) << e.what();
  }
}

TEST(ProcessGroupMPI, ArgumentChecksInAWorldOfOne) {
  if (job().world_size != 1) GTEST_SKIP() << "a world of one only";
  run_checked([] { kiln::test::check_world_of_one_and_argument_errors(*mpi_group()); });
}

TEST(ProcessGroupMPI, AllreduceMatchesReference) {
  run_checked([] {
    auto pg = mpi_group();
    kiln::test::check_allreduce_sweep(*pg);
    kiln::test::check_allreduce_narrow_dtypes(*pg, false);
    kiln::test::check_allreduce(*pg, kFloat32, (int64_t{1} << 18) + 3, ReduceOp::Sum);
  });
}

TEST(ProcessGroupMPI, SixteenBitReductionsAreAClearError) {
  run_checked([] {
    auto pg = mpi_group();
    kiln::test::expect_error([&] { pg->allreduce(zeros({4}, kFloat16)); },
                             "mpi backend: allreduce of float16 is not supported");
    kiln::test::expect_error([&] { pg->reduce(zeros({4}, kBFloat16), 0); },
                             "mpi backend: reduce of bfloat16 is not supported");
    // Ops that only move bytes take them.
    Tensor h = full({5}, 1.5, kFloat16);
    pg->broadcast(h, 0)->wait();
    rank_check(h.to_vector<double>() == std::vector<double>(5, 1.5), "broadcast of float16");
  });
}

TEST(ProcessGroupMPI, OtherCollectivesMatchReferences) {
  run_checked([] { kiln::test::check_other_collectives(*mpi_group()); });
}

// Two groups, ops issued back to back without waiting, interleaved: each communicator keeps its own order.
TEST(ProcessGroupMPI, TwoGroupsInterleaved) {
  run_checked([] {
    auto a = mpi_group("a"), b = mpi_group("b");
    kiln::test::check_two_groups_interleaved(*a, *b);
  });
}

// The same inputs through a tcp group (over a FileStore, in this mpirun job) and the mpi group.
TEST(ProcessGroupMPI, SameResultsAsTcp) {
  run_checked([] {
    auto pg = mpi_group();
    auto store = shared_file_store(*pg);
    ProcessGroupOptions o = named("tcp_beside_mpi");
    o.timeout = std::chrono::seconds(30);
    auto tcp = new_group("tcp", store, pg->rank(), pg->size(), o);
    kiln::test::compare_results(kiln::test::collective_results(*tcp), kiln::test::collective_results(*pg),
                                "tcp against mpi", pg->size());
    pg->barrier()->wait();  // no rank leaves (deleting its tcp group) while another still reads the store
  });
}

// DDP over mpi: 12 rows split over the ranks against one process on all of them (mean loss, equal shards),
// after 4 SGD steps. World sizes that do not divide 12 use the first multiple of the world size.
TEST(ProcessGroupMPI, DDPMatchesOneProcessOnTheWholeBatch) {
  run_checked([] {
    auto pg = mpi_group("ddp");
    const int rank = pg->rank(), world = pg->size();
    const int64_t rows = 12 / world * world, per = rows / world;
    const auto make_model = [] {
      manual_seed(7);
      return std::make_shared<nn::SequentialImpl>(nn::Linear(5, 7), nn::ReLU(), nn::Linear(7, 3));
    };
    auto model = make_model(), ref = make_model();
    DistributedDataParallel ddp(model, pg);
    optim::SGD opt(model->parameters(), {.lr = 0.1}), ref_opt(ref->parameters(), {.lr = 0.1});
    for (int step = 0; step < 4; ++step) {
      Generator gen(1000 + step);
      Tensor x = randn({rows, 5}, {}, &gen), y = randn({rows, 3}, {}, &gen);
      opt.zero_grad(), ref_opt.zero_grad();
      nn::functional::mse_loss(ddp(x.narrow(0, rank * per, per).contiguous()),
                               y.narrow(0, rank * per, per).contiguous())
          .backward();
      ddp.finalize();
      nn::functional::mse_loss((*ref)(x), y).backward();
      opt.step(), ref_opt.step();
    }
    const auto got = model->parameters(), want = ref->parameters();
    for (size_t k = 0; k < got.size(); ++k) {
      const auto a = got[k].to_vector<double>(), b = want[k].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i)
        rank_check(std::abs(a[i] - b[i]) <= 1e-6 * (1 + std::abs(b[i])),
                   "DDP over mpi, parameter " + std::to_string(k) + " element " + std::to_string(i) + ": " +
                       std::to_string(a[i]) + " against " + std::to_string(b[i]));
    }
  });
}

// The Trainer's strategy ddp over mpi (trainer.ddp_backend: mpi) takes its ranks from mpirun and needs no
// store: with MASTER_ADDR naming a host that does not exist (a store could not even start), every rank
// trains, and all of them end with the weights rank 0 ends with.
TEST(ProcessGroupMPI, TheTrainersDdpRunsWithoutAStore) {
  run_checked([] {
    const char* had = std::getenv("MASTER_ADDR");
    const std::string saved = had ? had : "";
    setenv("MASTER_ADDR", "no-such-host.invalid", 1);
    struct Restore {
      bool had;
      std::string value;
      ~Restore() { had ? setenv("MASTER_ADDR", value.c_str(), 1) : unsetenv("MASTER_ADDR"); }
    } restore{had != nullptr, saved};
    const std::string root = testing::TempDir() + "kiln_mpi_trainer_" + std::to_string(getpid());
    manual_seed(5 + static_cast<uint64_t>(job().rank));  // different starting weights: ddp copies rank 0's
    auto model = std::make_shared<nn::SequentialImpl>(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 1));
    struct Module : trainer::TrainModule {
      std::shared_ptr<nn::SequentialImpl> net;
      explicit Module(std::shared_ptr<nn::SequentialImpl> n) : TrainModule("Net"), net(std::move(n)) {
        register_module("net", net);
      }
      Tensor forward(const Tensor& x) override { return (*net)(x); }
      Tensor training_step(const data::Batch& b, int64_t) override {
        return nn::functional::mse_loss((*net)(b[0]), b[1]);
      }
      trainer::OptimizerSetup configure_optimizers() override {
        return {{std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = 0.05})}};
      }
    } m(model);
    Generator gen(3);
    Tensor x = randn({32, 4}, {}, &gen), y = x.sum({1}, true);
    data::DataLoader train(std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y}), {.batch_size = 4});
    trainer::TrainerOptions o;
    o.max_epochs = 2, o.strategy = "ddp", o.ddp_backend = "mpi", o.process_group_timeout = 60;
    o.logger = false, o.enable_checkpointing = false, o.enable_progress_bar = false,
    o.enable_model_summary = false, o.default_root_dir = root;
    trainer::Trainer t(o);
    t.fit(m, train);
    const int64_t per_rank = (32 + job().world_size - 1) / job().world_size;  // the sampler pads to equal shards
    rank_check(t.global_step() == 2 * ((per_rank + 3) / 4),
               "rank " + std::to_string(job().rank) + ": " + std::to_string(t.global_step()) + " steps");
    auto pg = mpi_group("trainer_check");
    for (const Tensor& p : m.parameters()) {
      Tensor mine = p.detach().contiguous().clone(), rank0 = mine.clone();
      pg->broadcast(rank0, 0)->wait();
      rank_check(mine.to_vector<double>() == rank0.to_vector<double>(),
                 "rank " + std::to_string(job().rank) + ": weights differ from rank 0's");
    }
  });
}

}  // namespace
}  // namespace kiln::distributed

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

#include "kiln/trainer/strategy.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "kiln/distributed/ddp.h"
#include "kiln/distributed/env.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

namespace {

class SingleStrategy : public Strategy {
 public:
  std::string name() const override { return "single"; }
};

// A loader like `user` (same dataset, batch size, workers, collate) over this rank's shard: the user's
// shuffle and seed move into a DistributedSampler, which reshuffles per epoch like the user's loader would.
std::unique_ptr<data::DataLoader> shard_of(const data::DataLoader& user, int rank, int world) {
  data::DataLoaderOptions o = user.options();
  auto sampler = std::make_shared<data::DistributedSampler>(user.dataset()->size(), world, rank, o.shuffle, o.seed,
                                                            o.drop_last);
  o.shuffle = false;
  return std::make_unique<data::DataLoader>(user.dataset(), o, std::move(sampler));
}

class DDPStrategy : public Strategy {
 public:
  explicit DDPStrategy(const TrainerOptions& options)
      : timeout_(static_cast<int64_t>(options.process_group_timeout * 1000)) {
    auto info = distributed::rank_info_from_env();
    KILN_CHECK(info.has_value(), "Trainer: strategy 'ddp' runs one process per rank, and this process has no "
               "rank: start the program with `kiln launch --nproc N -- PROGRAM ...` (or torchrun, mpirun, srun)");
    info_ = *info;
  }
  ~DDPStrategy() override {
    // Rank 0 serves the store: it must not go before the others are done with it.
    if (group_ != nullptr) {
      try {
        group_->barrier()->wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln: rank %d: the final barrier failed: %s\n", info_.rank, e.what());
      }
    }
  }

  std::string name() const override { return "ddp"; }
  int rank() const override { return info_.rank; }
  int world_size() const override { return info_.world_size; }

  void setup(TrainModule& module) override {
    if (group_ == nullptr) {
      store_ = std::make_shared<distributed::TCPStore>(distributed::TCPStoreOptions{
          .host = info_.master_addr, .port = info_.master_port, .is_server = info_.rank == 0,
          .world_size = info_.world_size, .timeout = timeout_});
      group_ = distributed::new_group("tcp", store_, info_.rank, info_.world_size,
                                      {.timeout = timeout_, .name = "trainer"});
    }
    // Non-owning: the Trainer's caller owns the module for the whole fit.
    std::shared_ptr<nn::Module> view(std::shared_ptr<nn::Module>(), &module);
    if (ddp_ == nullptr || ddp_->module().get() != &module) {
      ddp_.reset();
      ddp_ = std::make_unique<distributed::DistributedDataParallel>(view, group_);
    }
  }

  data::DataLoader& train_loader(data::DataLoader& user) override {
    train_ = shard_of(user, info_.rank, info_.world_size);
    return *train_;
  }
  data::DataLoader* eval_loader(data::DataLoader* user) override {
    if (user == nullptr) return nullptr;
    // Made afresh for every run: the user's loader may have changed (or be another object at the same address).
    auto& shard = eval_[user];
    shard = shard_of(*user, info_.rank, info_.world_size);
    return shard.get();
  }

  void before_training_step() override { ddp_->before_forward(); }
  void after_training_step(const Tensor& loss) override {
    if (loss.defined()) ddp_->after_forward(loss);
  }
  void backward(const Tensor& loss, bool sync) override {
    if (sync) {
      loss.backward();
    } else {
      auto guard = ddp_->no_sync();
      loss.backward();
    }
  }
  void before_optimizer_step(TrainModule& module, bool synced) override {
    if (synced) {
      ddp_->finalize();
      return;
    }
    // A stop cut an accumulation window short: its gradients were accumulated without communication. Average
    // them directly (every rank stops at the same batch, so every rank comes here).
    for (const Tensor& p : module.parameters()) {
      if (!p.requires_grad()) continue;
      Tensor g = p.grad().defined() ? p.grad().contiguous() : zeros_like(p);
      group_->allreduce(g, distributed::ReduceOp::Avg)->wait();
      p.set_grad(g);
    }
  }

  void all_reduce_sum(std::vector<double>& values) override {
    if (values.empty()) return;
    Tensor t = tensor(values, {static_cast<int64_t>(values.size())}, kFloat64);
    group_->allreduce(t, distributed::ReduceOp::Sum)->wait();
    const double* d = t.data_ptr<double>();
    for (size_t i = 0; i < values.size(); ++i) values[i] = d[i];
  }
  void barrier() override { group_->barrier()->wait(); }
  std::string broadcast_from_zero(const std::string& text) override {
    Tensor size = tensor(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1}, kInt64);
    group_->broadcast(size, 0)->wait();
    const int64_t n = size.data_ptr<int64_t>()[0];
    Tensor bytes = zeros({n}, kUInt8);
    if (info_.rank == 0 && n > 0) std::memcpy(bytes.raw_data_ptr(), text.data(), static_cast<size_t>(n));
    group_->broadcast(bytes, 0)->wait();
    return std::string(static_cast<const char*>(bytes.raw_data_ptr()), static_cast<size_t>(n));
  }

 private:
  distributed::Duration timeout_;
  distributed::RankInfo info_;
  std::shared_ptr<distributed::Store> store_;
  std::shared_ptr<distributed::ProcessGroup> group_;
  std::unique_ptr<distributed::DistributedDataParallel> ddp_;
  std::unique_ptr<data::DataLoader> train_;
  std::map<const data::DataLoader*, std::unique_ptr<data::DataLoader>> eval_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const TrainerOptions& options) {
  if (options.strategy == "ddp") return std::make_unique<DDPStrategy>(options);
  return std::make_unique<SingleStrategy>();
}

}  // namespace kiln::trainer

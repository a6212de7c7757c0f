#include "kiln/trainer/strategy.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "kiln/distributed/ddp.h"
#include "kiln/distributed/env.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/ps/parameter_server.h"
#include "kiln/distributed/store.h"
#include "kiln/distributed/sync_batch_norm.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

namespace {

class SingleStrategy : public Strategy {
 public:
  std::string name() const override { return "single"; }
};

// A loader like `user` (same dataset, batch size, workers, collate) over this rank's shard: the user's
// shuffle and seed move into a DistributedSampler, which reshuffles per epoch like the user's loader would. An
// iterable dataset's streams are told the rank instead, and split the examples themselves.
std::unique_ptr<data::DataLoader> shard_of(const data::DataLoader& user, int rank, int world) {
  data::DataLoaderOptions o = user.options();
  if (user.is_iterable()) return std::make_unique<data::DataLoader>(user.iterable_dataset(), o, rank, world);
  auto sampler = std::make_shared<data::DistributedSampler>(user.dataset()->size(), world, rank, o.shuffle, o.seed,
                                                            o.drop_last);
  o.shuffle = false;
  return std::make_unique<data::DataLoader>(user.dataset(), o, std::move(sampler));
}

// What the loops need from the ranks that train together, over a process group among them: this rank's
// shard of the data, sums of metrics over ranks, a barrier and rank 0's text. A process outside the group (a
// parameter server's server: group_ null) trains on nothing and has nothing to reduce.
class GroupStrategy : public Strategy {
 public:
  data::DataLoader& train_loader(data::DataLoader& user) override {
    train_ = shard_of(user, shard_rank_, shard_world_);
    return *train_;
  }
  data::DataLoader* eval_loader(data::DataLoader* user) override {
    if (user == nullptr) return nullptr;
    // Made afresh for every run: the user's loader may have changed (or be another object at the same address).
    auto& shard = eval_[user];
    shard = shard_of(*user, shard_rank_, shard_world_);
    return shard.get();
  }
  void forget_eval_loaders() override { eval_.clear(); }
  void forget_loaders() override { train_.reset(), eval_.clear(); }

  void all_reduce_sum(std::vector<double>& values) override {
    if (values.empty() || group_ == nullptr) return;
    Tensor t = tensor(values, {static_cast<int64_t>(values.size())}, kFloat64);
    group_->allreduce(t, distributed::ReduceOp::Sum)->wait();
    const double* d = t.data_ptr<double>();
    for (size_t i = 0; i < values.size(); ++i) values[i] = d[i];
  }
  void barrier() override {
    if (group_ != nullptr) group_->barrier()->wait();
  }
  std::string broadcast_from_zero(const std::string& text) override {
    if (group_ == nullptr) return text;
    Tensor size = tensor(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1}, kInt64);
    group_->broadcast(size, 0)->wait();
    const int64_t n = size.data_ptr<int64_t>()[0];
    Tensor bytes = zeros({n}, kUInt8);
    if (group_->rank() == 0 && n > 0) std::memcpy(bytes.raw_data_ptr(), text.data(), static_cast<size_t>(n));
    group_->broadcast(bytes, 0)->wait();
    return std::string(static_cast<const char*>(bytes.raw_data_ptr()), static_cast<size_t>(n));
  }

 protected:
  // Waits for the group at the end (rank 0 may serve the store the others still use), printing a failure;
  // false when it failed.
  bool final_barrier(const char* who) {
    if (group_ == nullptr) return true;
    try {
      barrier();  // the most derived one's (a parameter server's adds the job's first failure to errors)
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: %s %d: the final barrier failed: %s\n", who, group_->rank(), e.what());
      return false;
    }
  }

  std::shared_ptr<distributed::ProcessGroup> group_;
  int shard_rank_ = 0, shard_world_ = 1;  // which shard of the data this process trains on

 private:
  std::unique_ptr<data::DataLoader> train_;
  std::map<const data::DataLoader*, std::unique_ptr<data::DataLoader>> eval_;
};

class DDPStrategy : public GroupStrategy {
 public:
  explicit DDPStrategy(const TrainerOptions& options)
      : timeout_(static_cast<int64_t>(options.process_group_timeout * 1000)),
        backend_(options.ddp_backend),
        find_unused_(options.ddp_find_unused_parameters),
        sync_batchnorm_(options.sync_batchnorm) {
    auto info = distributed::rank_info_from_env();
    KILN_CHECK(info.has_value(), "Trainer: strategy 'ddp' runs one process per rank, and this process has no "
               "rank: start the program with `kiln launch --nproc N -- PROGRAM ...` (or torchrun, mpirun, srun)");
    info_ = *info;
    shard_rank_ = info_.rank, shard_world_ = info_.world_size;
  }
  // Rank 0 serves the store: it must not go before the others are done with it.
  ~DDPStrategy() override { final_barrier("rank"); }

  std::string name() const override { return "ddp"; }
  int rank() const override { return info_.rank; }
  int world_size() const override { return info_.world_size; }

  // Every rank learns whether prepare_data failed, and where, through agree's all-reduce over the trainer's
  // group (so over every backend, mpi's too, which has no store); a rank still waiting there when the one
  // preparing dies fails as soon as the group sees the death.
  void prepare_data(const std::function<void()>& prepare, bool per_node) override {
    connect();
    std::exception_ptr error;
    if (per_node ? info_.local_rank == 0 : info_.rank == 0) {
      try {
        prepare();
      } catch (...) {
        error = std::current_exception();
      }
    }
    agree(error, "the DataModule's prepare_data()");
  }

  // One all-reduce of a flag per rank.
  void agree(std::exception_ptr error, const std::string& what) override {
    connect();
    Tensor failed = zeros({info_.world_size}, kInt32);
    if (error) failed.data_ptr<int32_t>()[info_.rank] = 1;
    try {
      group_->allreduce(failed)->wait();
    } catch (const std::exception& e) {
      if (error) std::rethrow_exception(error);
      detail::throw_error(detail::concat(
          "Trainer: rank ", info_.rank, " waiting for every rank to finish ", what, " (each waits up to ",
          "process_group_timeout, ", timeout_.count() / 1000.0, " s: raise it for a long prepare_data): ", e.what()));
    }
    if (error) std::rethrow_exception(error);
    std::string who;
    for (int r = 0; r < info_.world_size; ++r)
      if (failed.data_ptr<int32_t>()[r] != 0) who += (who.empty() ? "" : ", ") + std::to_string(r);
    KILN_CHECK(who.empty(), "Trainer: ", what, " failed on rank ", who, " (its own error says why); rank ",
               info_.rank, " stops too");
  }

  void setup(TrainModule& module) override {
    connect();
    // Non-owning: the Trainer's caller owns the module for the whole fit.
    std::shared_ptr<nn::Module> view(std::shared_ptr<nn::Module>(), &module);
    if (ddp_ == nullptr || ddp_->module().get() != &module) {
      ddp_.reset();
      ddp_ = std::make_unique<distributed::DistributedDataParallel>(
          view, group_, distributed::DDPOptions{.find_unused_parameters = find_unused_});
    }
  }

  // sync_batchnorm: the module's batch norms use the group for the fit only, and are local again after it
  // (the group goes with this Trainer; the module may train elsewhere later).
  void fit_starting() override {
    if (sync_batchnorm_) distributed::convert_sync_batchnorm(*ddp_->module(), group_);
  }
  void fit_ended(const std::string&) override {
    if (sync_batchnorm_ && ddp_ != nullptr) distributed::revert_sync_batchnorm(*ddp_->module());
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
  // One whole DDP round per call: the parameters this loss does not reach are found from its graph (with
  // find_unused_parameters), and finalize() leaves every gradient averaged before the next forward or backward.
  void manual_backward(const Tensor& loss) override {
    ddp_->after_forward(loss);
    loss.backward();
    ddp_->finalize();
  }
  void before_optimizer_step(TrainModule& module, bool synced) override {
    if (synced) {
      ddp_->finalize();
      return;
    }
    // A stop cut an accumulation window short: its gradients were accumulated without communication. Average
    // them through DDP's buckets (every rank stops at the same batch, so every rank comes here).
    ddp_->allreduce_accumulated_gradients();
  }

 private:
  // The store and the trainer's group, made by the first call (a DataModule's prepare_data, or fit's setup).
  void connect() {
    if (group_ != nullptr) return;
    // A backend that needs no store (mpi: its ranks are mpirun's) gets none: no port taken, no MASTER_ADDR.
    if (distributed::backend_needs_store(backend_)) {
      store_ = std::make_shared<distributed::TCPStore>(distributed::TCPStoreOptions{
          .host = info_.master_addr, .port = info_.master_port, .is_server = info_.rank == 0,
          .world_size = info_.world_size, .timeout = timeout_});
    }
    group_ = distributed::new_group(backend_, store_, info_.rank, info_.world_size,
                                    {.timeout = timeout_, .name = "trainer"});
  }

  distributed::Duration timeout_;
  std::string backend_;  // TrainerOptions::ddp_backend
  bool find_unused_;     // TrainerOptions::ddp_find_unused_parameters
  bool sync_batchnorm_;  // TrainerOptions::sync_batchnorm
  distributed::RankInfo info_;
  std::shared_ptr<distributed::Store> store_;
  std::unique_ptr<distributed::DistributedDataParallel> ddp_;
};

class ParameterServerStrategy : public GroupStrategy {
 public:
  explicit ParameterServerStrategy(const TrainerOptions& options)
      : timeout_(static_cast<int64_t>(options.process_group_timeout * 1000)) {
    auto info = distributed::rank_info_from_env();
    KILN_CHECK(info.has_value(), "Trainer: strategy 'parameter_server' runs servers and workers as processes, and "
               "this process has no rank: start the program with `kiln launch --servers S --workers W -- PROGRAM ...`");
    info_ = *info;
    int servers = options.ps.servers;
    if (const char* env = std::getenv("KILN_PS_SERVERS"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const long from_env = std::strtol(env, &end, 10);
      KILN_CHECK(*end == '\0' && from_env >= 1, "Trainer: KILN_PS_SERVERS='", env, "': expected a count >= 1");
      KILN_CHECK(servers == 0 || servers == from_env, "Trainer: ps.servers is ", servers,
                 " but the launcher started ", from_env, " servers (KILN_PS_SERVERS)");
      servers = static_cast<int>(from_env);
    }
    KILN_CHECK(servers >= 1, "Trainer: strategy 'parameter_server' needs to know how many of the ", info_.world_size,
               " ranks are servers: set ps.servers, or start with `kiln launch --servers S --workers W`");
    role_ = distributed::ps::role_of(info_.rank, info_.world_size, servers);
    ps_.mode = distributed::ps::parse_mode(options.ps.mode);
    ps_.staleness = options.ps.staleness;
    ps_.optimizer = distributed::ps::parse_placement(options.ps.optimizer);
    ps_.timeout = timeout_;
    KILN_CHECK(ps_.staleness >= 0, "Trainer: ps.staleness ", ps_.staleness, ": expected >= 0");
    KILN_CHECK(!(options.gradient_clip_val > 0 && ps_.mode == distributed::ps::Mode::Sync &&
                 ps_.optimizer == distributed::ps::Placement::Server),
               "Trainer: gradient_clip_val under a sync parameter server with the optimizer on the servers would ",
               "clip each worker's part of the gradient, not their mean (which DDP clips); set ps.optimizer: worker ",
               "to clip the mean");
    shard_rank_ = role_.is_server() ? 0 : role_.index;
    shard_world_ = role_.num_workers;
  }
  ~ParameterServerStrategy() override {
    // The workers have told the servers they are done (fit_ended), and wait for each other; then every
    // process counts itself out in the store, and rank 0 (a server, which serves the store) waits for all.
    worker_.reset();
    if (!final_barrier("worker") && store_ != nullptr) {
      distributed::ps::record_failure(*store_, ps_.name, role_.describe() + ": the final barrier failed");
    }
    if (store_ == nullptr) return;
    try {
      store_->add("ps_finished", 1);
      if (info_.rank == 0) {
        // After a failure, a few seconds only: the others read the failure from the store on their way out, but
        // a process that died never counts itself out.
        using Clock = std::chrono::steady_clock;
        auto deadline = Clock::now() + timeout_;
        while (store_->add("ps_finished", 0) < info_.world_size && Clock::now() < deadline) {
          if (store_->check({distributed::ps::failure_key(ps_.name)})) {
            deadline = std::min(deadline, Clock::now() + std::chrono::seconds(3));
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: %s: leaving the job: %s\n", role_.describe().c_str(), e.what());
    }
  }

  std::string name() const override { return "parameter_server"; }
  // The workers count as ranks 0..W-1 (worker 0 logs and checkpoints); servers come after them.
  int rank() const override { return role_.is_server() ? role_.num_workers + role_.index : role_.index; }
  int world_size() const override { return role_.num_workers; }
  bool is_server() const override { return role_.is_server(); }

  void setup(TrainModule& module) override { connect(); }

  // Servers and workers share no group, but every process reaches the store: the process that prepares
  // publishes how it went under a key of its node (the node's first rank) and of the call (a counter: every
  // process that runs a stage makes the same calls), which the others wait for. It prepares for every stage,
  // so it is a worker where the node has one. A failure is also recorded as the job's, so that processes of
  // other nodes, which did not wait for this one, fail too rather than train without it.
  void prepare_data(const std::function<void()>& prepare, bool per_node) override {
    connect();
    const int first = per_node ? info_.rank - info_.local_rank : 0;
    const int end = per_node ? first + info_.local_world_size : info_.world_size;
    const int first_worker = std::max(first, role_.num_servers);
    const int preparer = first_worker < end ? first_worker : first;
    const std::string key = "prepare_data/" + std::to_string(prepare_calls_++) + "/" +
                            (per_node ? "node" + std::to_string(first) : std::string("job"));
    const std::string who = [&](int rank) {
      return distributed::ps::role_of(rank, info_.world_size, role_.num_servers).describe() + " (rank " +
             std::to_string(rank) + ")";
    }(preparer);
    if (info_.rank == preparer) {
      std::string failure;
      std::exception_ptr error;
      try {
        prepare();
      } catch (const std::exception& e) {
        failure = e.what(), error = std::current_exception();
      } catch (...) {
        failure = "an exception that is not a std::exception", error = std::current_exception();
      }
      if (!error) {
        store_->set(key, std::string("ok"));
        return;
      }
      try {
        store_->set(key, who + ": " + failure);
        distributed::ps::record_failure(*store_, ps_.name,
                                        who + ": the DataModule's prepare_data() failed: " + failure);
      } catch (...) {
        // The others time out instead; this process's own error is the one to report.
      }
      std::rethrow_exception(error);
    }
    std::string outcome;
    try {
      store_->wait({key}, timeout_);
      outcome = store_->get_string(key);
    } catch (const std::exception& e) {
      detail::throw_error(detail::concat(
          "Trainer: ", role_.describe(), " waiting for the DataModule's prepare_data() on ", who, " (up to ",
          "process_group_timeout, ", timeout_.count() / 1000.0, " s: raise it for a long prepare_data): ", e.what()));
    }
    KILN_CHECK(outcome == "ok", "Trainer: the DataModule's prepare_data() failed on ", outcome, "; ",
               role_.describe(), " stops too");
  }

  bool optimizers_ready(TrainModule& module,
                        const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) override {
    KILN_CHECK(optimizers.size() == 1, "Trainer: strategy 'parameter_server' serves one optimizer's parameters, "
               "but configure_optimizers() made ", optimizers.size());
    if (role_.is_server()) {
      distributed::ps::Server server(store_, role_, *optimizers[0], ps_);
      server.run();
      return true;
    }
    KILN_CHECK(worker_ == nullptr, "Trainer: strategy 'parameter_server' runs one fit() per process");
    worker_ = std::make_unique<distributed::ps::Worker>(store_, role_, *optimizers[0], ps_, &module);
    return false;
  }

  // No group spans servers and workers: a failure here is recorded as the job's, which the other processes
  // watch (they fail naming it, in fit or in their workers' collectives below), and rethrown.
  void agree(std::exception_ptr error, const std::string& what) override {
    if (!error) return;
    std::string message = "an exception that is not a std::exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    if (store_ != nullptr) {
      distributed::ps::record_failure(*store_, ps_.name, role_.describe() + " (rank " + std::to_string(info_.rank) +
                                                             "): " + what + " failed: " + message);
    }
    std::rethrow_exception(error);
  }

  // The workers' own collectives (metrics, the run folder, the final barrier) fail naming only the group when a
  // worker left it for a failure elsewhere (its prepare_data, say): the job's first failure, recorded in the
  // store before that worker left, says why.
  void all_reduce_sum(std::vector<double>& values) override {
    with_job_failure([&] { GroupStrategy::all_reduce_sum(values); });
  }
  void barrier() override {
    with_job_failure([&] { GroupStrategy::barrier(); });
  }
  std::string broadcast_from_zero(const std::string& text) override {
    return with_job_failure([&] { return GroupStrategy::broadcast_from_zero(text); });
  }

  // (A server is given the user's loaders and never iterates them.)
  data::DataLoader& train_loader(data::DataLoader& user) override {
    return role_.is_server() ? user : GroupStrategy::train_loader(user);
  }
  data::DataLoader* eval_loader(data::DataLoader* user) override {
    return role_.is_server() ? user : GroupStrategy::eval_loader(user);
  }

  // Before the first loop, every worker pulls the parameters the servers hold (worker 0 first sends them its
  // own, or a checkpoint's): every gradient and every validation is computed on them.
  void fit_starting() override {
    if (worker_ != nullptr) worker_->start();
  }
  // The servers learn at once that the fit is over: they return from their fit, or fail naming this worker.
  void fit_ended(const std::string& error) override {
    if (worker_ == nullptr) return;
    if (error.empty()) {
      worker_->finish();
    } else {
      worker_->abort(error);
    }
  }
  void before_optimizer_step(TrainModule& module, bool synced) override {
    if (ps_.optimizer == distributed::ps::Placement::Worker) worker_->exchange_gradients();
  }
  bool step_optimizer(optim::Optimizer& optimizer) override {
    if (ps_.optimizer == distributed::ps::Placement::Worker) return false;
    worker_->step();
    return true;
  }
  bool agree_every_batch() const override {
    return role_.num_workers > 1 && ps_.mode == distributed::ps::Mode::Sync;
  }
  bool supports_manual_optimization() const override { return false; }

  // With the optimizer on the servers, a checkpoint holds their shards; on the workers, the workers'
  // parameters and optimizer state (in the checkpoint already) are the whole state.
  void save_state(Checkpoint& c) override {
    if (ps_.optimizer == distributed::ps::Placement::Worker) return;
    const std::vector<distributed::ps::ShardState> shards = worker_->fetch_shards();
    c.set_int("ps.num_servers", static_cast<int64_t>(shards.size()));
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string prefix = "ps.shard." + std::to_string(k) + ".";
      c.tensors[prefix + "values"] = shards[k].values;
      for (const auto& [key, t] : shards[k].optimizer.tensors) c.tensors[prefix + "optimizer." + key] = t;
      for (const auto& [key, v] : shards[k].optimizer.scalars) c.set_double(prefix + "optimizer." + key, v);
    }
  }
  void load_state(const Checkpoint& c) override {
    if (ps_.optimizer == distributed::ps::Placement::Worker) return;
    KILN_CHECK(c.has("ps.num_servers"), "resuming from ", c.path, ": strategy 'parameter_server' needs the servers' ",
               "shards, and this checkpoint has none (was it written under another strategy?)");
    const int64_t servers = c.get_int("ps.num_servers");
    KILN_CHECK(servers == role_.num_servers, "resuming from ", c.path, ": it holds the shards of ", servers,
               " servers, this job has ", role_.num_servers);
    if (role_.index != 0) return;  // worker 0 sends the servers their state
    std::vector<distributed::ps::ShardState> shards(static_cast<size_t>(servers));
    for (int64_t k = 0; k < servers; ++k) {
      const std::string prefix = "ps.shard." + std::to_string(k);
      serialize::TensorMap tensors = c.tensor_section(prefix);
      auto values = tensors.find("values");
      KILN_CHECK(values != tensors.end(), "resuming from ", c.path, ": no ", prefix, ".values");
      shards[k].values = values->second;
      shards[k].optimizer.tensors = c.tensor_section(prefix + ".optimizer");
      for (const auto& [key, text] : c.section(prefix + ".optimizer")) {
        shards[k].optimizer.scalars[key] = c.get_double(prefix + ".optimizer." + key);
      }
    }
    worker_->resume(std::move(shards));
  }

 private:
  // The store (rank 0, a server, serves it) and the workers' group, made by the first call (a DataModule's
  // prepare_data, or fit's setup).
  void connect() {
    if (store_ != nullptr) return;
    store_ = std::make_shared<distributed::TCPStore>(distributed::TCPStoreOptions{
        .host = info_.master_addr, .port = info_.master_port, .is_server = info_.rank == 0,
        .world_size = info_.world_size, .timeout = timeout_});
    if (!role_.is_server()) {
      group_ = distributed::new_group("tcp", std::make_shared<distributed::PrefixStore>("workers", store_),
                                      role_.index, role_.num_workers, {.timeout = timeout_, .name = "trainer"});
    }
  }

  template <class F>
  auto with_job_failure(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& e) {
      std::string first;
      try {
        const std::string key = distributed::ps::failure_key(ps_.name);
        if (store_ != nullptr && store_->check({key})) first = store_->get_string(key);
      } catch (...) {
        // no store to ask: the group's error is all there is
      }
      if (first.empty() || std::string(e.what()).find(first) != std::string::npos) throw;
      throw Error(std::string(e.what()) + "; the job's first failure: " + first);
    }
  }

  distributed::Duration timeout_;
  distributed::RankInfo info_;
  distributed::ps::Role role_;
  distributed::ps::PSOptions ps_;
  std::shared_ptr<distributed::Store> store_;
  std::unique_ptr<distributed::ps::Worker> worker_;
  int prepare_calls_ = 0;  // prepare_data calls so far: each has its own store keys
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const TrainerOptions& options) {
  if (options.strategy == "ddp") return std::make_unique<DDPStrategy>(options);
  if (options.strategy == "parameter_server") {
    KILN_CHECK(!options.sync_batchnorm, "Trainer: sync_batchnorm needs strategy 'ddp' (the parameter server's "
               "workers do not run their forward passes in step); got strategy 'parameter_server'");
    return std::make_unique<ParameterServerStrategy>(options);
  }
  return std::make_unique<SingleStrategy>();
}

}  // namespace kiln::trainer

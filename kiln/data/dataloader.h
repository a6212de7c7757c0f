// DataLoader: batches from a dataset, in a sampler's order, optionally built ahead by worker threads.
//
// One epoch: the sampler gives the epoch's index list; batch b is the examples at positions
// [b * batch_size, (b + 1) * batch_size) of that list, merged by the collate function. Batches are numbered, so
// workers can build them in any order while the loader hands them out strictly by number: the batches and their
// order are the same for every num_workers, 0 (everything on the calling thread) included. Workers build at
// most num_workers * prefetch_factor batches ahead of the consumer (a bounded window, not an unbounded queue).
//
// Epochs: each range-for over the loader is one epoch. A loop that runs to the end moves the loader to the next
// epoch; one that is left early (break) leaves it mid-epoch, and the next range-for starts the next epoch from
// its first batch, as PyTorch does. set_epoch(e) picks the epoch explicitly. For exact resume, state() says where
// the loader is (epoch, batches handed out, shuffle seed); set_state() on a new loader makes its next range-for
// continue from that batch of that epoch.
//
// Iterable datasets (dataset.h): each worker reads its own stream and makes consecutive batches from it (the
// last one short unless drop_last); the loader hands out worker 0's first batch, worker 1's first, ..., then
// each worker's second, skipping workers whose stream has ended, as PyTorch does. The batches depend on
// num_workers (each worker batches its own stream), not on timing. size() is -1 (unknown); set_state resumes
// by reading again, and dropping, the batches the saved state had handed out.
//
// A worker that throws does not end the program: the error reaches the consumer as a kiln::Error naming the
// batch, when that batch's turn comes. Destroying the loader (or starting another epoch) mid-epoch stops the
// workers and joins them; each finishes at most the batch it is building.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/sampler.h"

namespace kiln::data {

// A batch: field k holds field k of every example, merged (by default stacked along a new dim 0).
using Batch = std::vector<Tensor>;
using CollateFn = std::function<Batch(std::vector<Example>&&)>;

// Makes an uninitialized CPU tensor of `shape` and `dtype`: where a batch's field is built.
using BatchAllocator = std::function<Tensor(IntArrayRef shape, DType dtype)>;

// Stacks field k of every example along a new dim 0: examples of fields (...) give a batch of fields (B, ...).
// All examples must have the same number of fields and, field by field, the same shape and dtype.
Batch default_collate(std::vector<Example>&& examples);
// The same, each CPU field stacked straight into a tensor from `allocate`, which must have the shape and dtype
// asked for and be contiguous (fields on a GPU are stacked there). The loader's pin_memory passes
// cuda::empty_pinned: the batch is built in the memory the copy to the GPU reads, with no second copy. Records
// no autograd graph.
Batch default_collate(std::vector<Example>&& examples, const BatchAllocator& allocate);

struct DataLoaderOptions {
  int64_t batch_size = 1;
  // Visit the dataset in a new random order each epoch (a RandomSampler seeded with `seed`).
  bool shuffle = false;
  // Drop the last batch when it would be smaller than batch_size.
  bool drop_last = false;
  // Threads that build batches ahead of the consumer; 0 builds each batch on the calling thread when needed.
  int num_workers = 0;
  // Batches each worker may have ready ahead of the consumer.
  int prefetch_factor = 2;
  // The shuffle seed (used only with shuffle = true).
  uint64_t seed = 0;
  // Merges a batch's examples; empty means default_collate.
  CollateFn collate = {};
  // Builds each batch's CPU tensors in pinned (page-locked) host memory, on the worker, so that
  // `to(cuda, non_blocking = true)` copies it to the GPU without waiting (the Trainer does so): default_collate
  // stacks straight into pinned memory; a custom collate's result is copied there. Without a CUDA device it
  // does nothing (pins_memory() says): one program runs on either machine.
  bool pin_memory = false;
};

// Where a loader stands, for exact resume: the epoch, how many of its batches were handed out, and the seed of
// the loader's own shuffle sampler (a sampler passed in keeps its own seed; save it separately).
struct DataLoaderState {
  uint64_t epoch = 0;
  int64_t batches_yielded = 0;
  uint64_t seed = 0;
  bool operator==(const DataLoaderState&) const = default;
};

class DataLoader {
 public:
  // `sampler` replaces the default (sequential, or random with shuffle = true; passing both is an error).
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {}, std::shared_ptr<Sampler> sampler = nullptr);
  // Over a stream (shuffle is the stream's business: true is an error). rank and world_size go into every
  // StreamInfo: the share of the examples this process reads (the Trainer sets them under ddp).
  DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options = {}, int rank = 0,
             int world_size = 1);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch; -1 over an iterable dataset (unknown until its streams end).
  int64_t size() const;
  // The dataset: one of the two is null.
  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }
  const std::shared_ptr<IterableDataset>& iterable_dataset() const { return iterable_; }
  bool is_iterable() const { return iterable_ != nullptr; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  const DataLoaderOptions& options() const { return options_; }
  // Whether batches come in pinned memory: pin_memory was asked for and a CUDA device is present.
  bool pins_memory() const { return pin_; }

  // The next range-for runs epoch `epoch` from its first batch.
  void set_epoch(uint64_t epoch);
  DataLoaderState state() const { return state_; }
  // The next range-for runs epoch state.epoch from batch state.batches_yielded (and reseeds the loader's own
  // shuffle sampler with state.seed).
  void set_state(const DataLoaderState& state);

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;
    Batch& operator*() const;
    Batch* operator->() const { return &**this; }
    Iterator& operator++();
    bool operator==(std::default_sentinel_t) const;

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader) : loader_(loader) {}
    DataLoader* loader_;
  };
  // Starts an epoch (stopping any one in progress) and builds its first batch.
  Iterator begin();
  std::default_sentinel_t end() { return {}; }

 private:
  struct Run;
  void stop_run();
  void fetch_next();
  void fetch_next_from_streams();
  // The epoch's batches are all out: the iterator reaches the end, and the state moves to the next epoch.
  void end_epoch();
  void worker_loop(Run& run);
  void stream_worker_loop(Run& run, int worker);

  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<IterableDataset> iterable_;
  int rank_ = 0, world_size_ = 1;  // an iterable dataset's share
  DataLoaderOptions options_;
  bool pin_ = false;
  std::shared_ptr<Sampler> sampler_;
  std::shared_ptr<RandomSampler> own_random_sampler_;  // the sampler shuffle = true made, else null
  DataLoaderState state_;
  bool resume_pending_ = false;
  std::unique_ptr<Run> run_;
};

}  // namespace kiln::data

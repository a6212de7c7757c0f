// DataLoader: the epoch driver, the worker threads and default_collate.
#include "kiln/data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "kiln/autograd/grad_mode.h"
#include "kiln/tensor/cuda/cuda.h"

namespace kiln::data {

namespace {

// Checks that every example has the fields of example 0, each of the same shape and dtype.
void check_examples(const std::vector<Example>& examples) {
  KILN_CHECK(!examples.empty(), "default_collate: no examples to collate");
  const size_t fields = examples[0].size();
  for (size_t e = 1; e < examples.size(); ++e)
    KILN_CHECK(examples[e].size() == fields, "default_collate: example ", e, " has ", examples[e].size(),
               " fields but example 0 has ", fields);
  for (size_t k = 0; k < fields; ++k) {
    const Tensor& first = examples[0][k];
    for (size_t e = 1; e < examples.size(); ++e) {
      const Tensor& t = examples[e][k];
      KILN_CHECK(t.sizes() == first.sizes() && t.dtype() == first.dtype(), "default_collate: field ", k, " of example ",
                 e, " is ", t.dtype(), " of shape ", shape_str(t.sizes()), " but example 0's is ", first.dtype(), " of shape ",
                 shape_str(first.sizes()));
    }
  }
}

// Field k of every example, stacked along a new dim 0.
Tensor stack_field(const std::vector<Example>& examples, size_t k) {
  std::vector<Tensor> parts(examples.size());
  for (size_t e = 0; e < examples.size(); ++e) parts[e] = examples[e][k];
  return stack(parts, 0);
}

}  // namespace

Batch default_collate(std::vector<Example>&& examples) {
  check_examples(examples);
  Batch batch;
  batch.reserve(examples[0].size());
  for (size_t k = 0; k < examples[0].size(); ++k) batch.push_back(stack_field(examples, k));
  return batch;
}

Batch default_collate(std::vector<Example>&& examples, const BatchAllocator& allocate) {
  KILN_CHECK(allocate, "default_collate: no allocator");
  check_examples(examples);
  NoGradGuard no_grad;
  Batch batch;
  batch.reserve(examples[0].size());
  const auto n = static_cast<int64_t>(examples.size());
  for (size_t k = 0; k < examples[0].size(); ++k) {
    const Tensor& first = examples[0][k];
    if (!first.device().is_cpu()) {  // a field already on a GPU: stacked there, as without an allocator
      batch.push_back(stack_field(examples, k));
      continue;
    }
    Shape shape{n};
    shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
    Tensor out = allocate(shape, first.dtype());
    KILN_CHECK(out.defined() && out.sizes() == shape && out.dtype() == first.dtype() && out.device().is_cpu() &&
                   out.is_contiguous(),
               "default_collate: the allocator returned ",
               out.defined() ? detail::concat(out.dtype(), " of shape ", shape_str(out.sizes()), " on ", out.device(),
                                              out.is_contiguous() ? "" : ", not contiguous")
                             : std::string("an undefined tensor"),
               " for field ", k, "; expected a contiguous CPU tensor, ", first.dtype(), " of shape ", shape_str(shape));
    for (int64_t e = 0; e < n; ++e) out.select(0, e).copy_(examples[static_cast<size_t>(e)][k]);
    batch.push_back(std::move(out));
  }
  return batch;
}

namespace {

// One built batch, or the error building it raised (as text: the consumer rethrows it as a kiln::Error, or as
// kiln::OutOfMemoryError when it was one, for code that backs off from those), or (from a stream) the stream's
// end.
struct Result {
  Batch batch;
  bool failed = false;
  bool out_of_memory = false;
  bool end = false;
  std::string message;
};

[[noreturn]] void throw_failure(const Result& r) {
  if (r.out_of_memory) throw OutOfMemoryError(r.message);
  throw Error(r.message);
}

}  // namespace

// One epoch in progress.
struct DataLoader::Run {
  std::vector<int64_t> indices;
  int64_t num_batches = 0;
  int64_t next_batch = 0;  // the number of the next batch to hand out
  bool done = false;
  Batch current;

  // Shared with the workers; guarded by mutex.
  std::mutex mutex;
  std::condition_variable ready_cv;  // the consumer waits for its batch here
  std::condition_variable space_cv;  // workers wait for room in the window here
  int64_t next_claim = 0;  // the number of the next batch a worker will take
  int64_t window = 1;  // workers stay below next_batch + window
  bool stop = false;
  std::map<int64_t, Result> ready;
  std::vector<std::thread> threads;

  // Iterable datasets: one stream per worker (one, read on the consumer's thread, without workers). Batch b
  // comes from stream b % streams.size(); ended_at[w] is the batch number at which stream w ended (-1 before).
  std::vector<ExampleStream> streams;
  std::vector<int64_t> ended_at;
  int64_t yielded = 0;  // batches handed out (batch numbers of ended streams are skipped)
};

namespace {

// A copy of `batch` with each CPU tensor in pinned memory (a custom collate's batch).
Batch pinned(Batch&& batch) {
  for (Tensor& t : batch) {
    if (!t.defined() || !t.device().is_cpu()) continue;
    Tensor p = cuda::empty_pinned(t.sizes(), t.dtype());
    p.copy_(t);
    t = std::move(p);
  }
  return std::move(batch);
}

// The batch of `examples`: the user's collate or default_collate, in pinned memory when `pin`.
Batch collate_batch(std::vector<Example>&& examples, const CollateFn& collate, bool pin) {
  if (collate) {
    Batch batch = collate(std::move(examples));
    return pin ? pinned(std::move(batch)) : batch;
  }
  return pin ? default_collate(std::move(examples), cuda::empty_pinned) : default_collate(std::move(examples));
}

Result build_batch(const Dataset& dataset, const std::vector<int64_t>& indices, int64_t batch_size, int64_t b,
                   const CollateFn& collate, bool pin) {
  Result r;
  size_t begin = static_cast<size_t>(b * batch_size);
  size_t end = std::min(indices.size(), begin + static_cast<size_t>(batch_size));
  try {
    std::vector<Example> examples;
    examples.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) examples.push_back(dataset.get(indices[i]));
    r.batch = collate_batch(std::move(examples), collate, pin);
  } catch (const std::exception& e) {
    r.failed = true;
    r.out_of_memory = dynamic_cast<const OutOfMemoryError*>(&e) != nullptr;
    r.message = detail::concat("DataLoader: building batch ", b, " (sampler positions ", begin, "..", end - 1,
                               ") failed: ", e.what());
  } catch (...) {
    r.failed = true;
    r.message = detail::concat("DataLoader: building batch ", b, " failed with a non-standard exception");
  }
  return r;
}

// The next batch of `stream` (batch number b, read by worker `worker`): up to batch_size examples; the stream's
// end when it has none left (or, with drop_last, fewer than batch_size).
Result build_stream_batch(ExampleStream& stream, const DataLoaderOptions& o, bool pin, int64_t b, int worker) {
  Result r;
  try {
    std::vector<Example> examples;
    examples.reserve(static_cast<size_t>(o.batch_size));
    while (static_cast<int64_t>(examples.size()) < o.batch_size) {
      std::optional<Example> e = stream();
      if (!e) break;
      examples.push_back(std::move(*e));
    }
    if (examples.empty() || (o.drop_last && static_cast<int64_t>(examples.size()) < o.batch_size)) {
      r.end = true;
      return r;
    }
    r.batch = collate_batch(std::move(examples), o.collate, pin);
  } catch (const std::exception& e) {
    r.failed = true;
    r.out_of_memory = dynamic_cast<const OutOfMemoryError*>(&e) != nullptr;
    r.message = detail::concat("DataLoader: building batch ", b, " from stream ", worker, " failed: ", e.what());
  } catch (...) {
    r.failed = true;
    r.message = detail::concat("DataLoader: building batch ", b, " failed with a non-standard exception");
  }
  return r;
}

void check_options(const DataLoaderOptions& o) {
  KILN_CHECK(o.batch_size >= 1, "DataLoader: batch_size must be at least 1, got ", o.batch_size);
  KILN_CHECK(o.num_workers >= 0, "DataLoader: num_workers must be non-negative, got ", o.num_workers);
  KILN_CHECK(o.prefetch_factor >= 1, "DataLoader: prefetch_factor must be at least 1, got ", o.prefetch_factor);
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options, std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)),
      options_(std::move(options)),
      pin_(options_.pin_memory && cuda::is_available()),
      sampler_(std::move(sampler)) {
  KILN_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  check_options(options_);
  KILN_CHECK(!(sampler_ && options_.shuffle), "DataLoader: shuffle = true and a sampler were both given; ",
             "shuffle only picks the default sampler");
  if (!sampler_) {
    if (options_.shuffle) {
      own_random_sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
      sampler_ = own_random_sampler_;
    } else {
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
    }
  }
  state_.seed = options_.seed;
}

DataLoader::DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options, int rank, int world_size)
    : iterable_(std::move(dataset)),
      rank_(rank),
      world_size_(world_size),
      options_(std::move(options)),
      pin_(options_.pin_memory && cuda::is_available()) {
  KILN_CHECK(iterable_ != nullptr, "DataLoader: dataset is null");
  check_options(options_);
  KILN_CHECK(!options_.shuffle, "DataLoader: shuffle = true over an iterable dataset: a stream has no index to ",
             "shuffle; shuffle inside the stream (StreamInfo has the seed and the epoch)");
  KILN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "DataLoader: rank ", rank, " of world_size ",
             world_size, ": expected 0 <= rank < world_size");
  state_.seed = options_.seed;
}

DataLoader::~DataLoader() { stop_run(); }

int64_t DataLoader::size() const {
  if (iterable_) return -1;
  int64_t n = sampler_->size(), bs = options_.batch_size;
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

void DataLoader::set_epoch(uint64_t epoch) {
  stop_run();
  state_.epoch = epoch;
  state_.batches_yielded = 0;
  resume_pending_ = false;
}

void DataLoader::set_state(const DataLoaderState& state) {
  KILN_CHECK(state.batches_yielded >= 0 && (iterable_ || state.batches_yielded <= size()),
             "DataLoader::set_state: batches_yielded ",
             state.batches_yielded, " is out of range for an epoch of ", size(), " batches");
  stop_run();
  state_ = state;
  options_.seed = state.seed;
  if (own_random_sampler_) own_random_sampler_->set_seed(state.seed);
  resume_pending_ = true;
}

void DataLoader::stop_run() {
  if (!run_) return;
  {
    std::lock_guard<std::mutex> lock(run_->mutex);
    run_->stop = true;
  }
  run_->space_cv.notify_all();
  for (auto& t : run_->threads) t.join();
  run_.reset();
}

DataLoader::Iterator DataLoader::begin() {
  stop_run();
  int64_t start = 0;
  if (resume_pending_) {
    start = state_.batches_yielded;
    resume_pending_ = false;
  } else {
    if (state_.batches_yielded > 0) ++state_.epoch;  // the previous epoch was left early
    state_.batches_yielded = 0;
  }
  run_ = std::make_unique<Run>();
  Run& run = *run_;
  if (iterable_) {
    const int streams = std::max(1, options_.num_workers);
    for (int w = 0; w < streams; ++w) {
      const StreamInfo info{.epoch = state_.epoch, .worker = w, .num_workers = streams, .rank = rank_,
                            .world_size = world_size_, .seed = options_.seed};
      run.streams.push_back(iterable_->stream(info));
      KILN_CHECK(run.streams.back() != nullptr, "DataLoader: the iterable dataset returned an empty stream for ",
                 "worker ", w, " of epoch ", state_.epoch);
    }
    run.ended_at.assign(run.streams.size(), -1);
    run.num_batches = std::numeric_limits<int64_t>::max();  // unknown until the streams end
    run.window = static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor;
    for (int w = 0; w < options_.num_workers; ++w) {
      run.threads.emplace_back([this, &run, w] { stream_worker_loop(run, w); });
    }
    // Resuming: the batches handed out before are read again and dropped (streams are deterministic).
    for (int64_t i = 0; i <= start && run_ != nullptr && !run_->done; ++i) fetch_next();
    return Iterator(this);
  }
  sampler_->set_epoch(state_.epoch);
  dataset_->set_epoch(state_.epoch);
  run.indices = sampler_->indices();
  run.num_batches = size();
  KILN_ASSERT(static_cast<int64_t>(run.indices.size()) == sampler_->size(), "sampler gave ", run.indices.size(),
              " indices, its size() is ", sampler_->size());
  run.next_batch = run.next_claim = start;
  run.window = static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor;
  for (int w = 0; w < options_.num_workers; ++w) run.threads.emplace_back([this, &run] { worker_loop(run); });
  fetch_next();
  return Iterator(this);
}

void DataLoader::worker_loop(Run& run) {
  for (;;) {
    int64_t b;
    {
      std::unique_lock<std::mutex> lock(run.mutex);
      run.space_cv.wait(lock, [&] {
        return run.stop || run.next_claim >= run.num_batches || run.next_claim < run.next_batch + run.window;
      });
      if (run.stop || run.next_claim >= run.num_batches) return;
      b = run.next_claim++;
    }
    Result r = build_batch(*dataset_, run.indices, options_.batch_size, b, options_.collate, pin_);
    {
      std::lock_guard<std::mutex> lock(run.mutex);
      run.ready.emplace(b, std::move(r));
    }
    run.ready_cv.notify_all();
  }
}

void DataLoader::stream_worker_loop(Run& run, int worker) {
  const auto streams = static_cast<int64_t>(run.streams.size());
  for (int64_t b = worker;; b += streams) {
    {
      std::unique_lock<std::mutex> lock(run.mutex);
      run.space_cv.wait(lock, [&] { return run.stop || b < run.next_batch + run.window; });
      if (run.stop) return;
    }
    Result r = build_stream_batch(run.streams[static_cast<size_t>(worker)], options_, pin_, b, worker);
    const bool last = r.end || r.failed;
    {
      std::lock_guard<std::mutex> lock(run.mutex);
      run.ready.emplace(b, std::move(r));
    }
    run.ready_cv.notify_all();
    if (last) return;
  }
}

void DataLoader::end_epoch() {
  run_->done = true;
  run_->current.clear();
  state_.epoch += 1;
  state_.batches_yielded = 0;
  stop_run();
}

void DataLoader::fetch_next_from_streams() {
  Run& run = *run_;
  const auto streams = static_cast<int64_t>(run.streams.size());
  for (;;) {
    if (std::all_of(run.ended_at.begin(), run.ended_at.end(), [](int64_t e) { return e >= 0; })) {
      end_epoch();
      return;
    }
    const int64_t b = run.next_batch;
    const auto w = static_cast<size_t>(b % streams);
    Result r;
    if (run.ended_at[w] >= 0) {  // that stream is over: its turns are skipped
      r.end = true;
    } else if (options_.num_workers == 0) {
      r = build_stream_batch(run.streams[w], options_, pin_, b, static_cast<int>(w));
    } else {
      std::unique_lock<std::mutex> lock(run.mutex);
      run.ready_cv.wait(lock, [&] { return run.ready.count(b) > 0; });
      auto it = run.ready.find(b);
      r = std::move(it->second);
      run.ready.erase(it);
    }
    {
      std::lock_guard<std::mutex> lock(run.mutex);
      ++run.next_batch;
    }
    run.space_cv.notify_all();
    if (r.failed) {
      stop_run();
      throw_failure(r);
    }
    if (r.end) {
      if (run.ended_at[w] < 0) run.ended_at[w] = b;
      continue;
    }
    run.current = std::move(r.batch);
    state_.batches_yielded = ++run.yielded;
    return;
  }
}

void DataLoader::fetch_next() {
  if (iterable_) {
    fetch_next_from_streams();
    return;
  }
  Run& run = *run_;
  if (run.next_batch >= run.num_batches) {
    end_epoch();
    return;
  }
  Result r;
  if (options_.num_workers == 0) {
    r = build_batch(*dataset_, run.indices, options_.batch_size, run.next_batch, options_.collate, pin_);
    ++run.next_batch;
  } else {
    {
      std::unique_lock<std::mutex> lock(run.mutex);
      run.ready_cv.wait(lock, [&] { return run.ready.count(run.next_batch) > 0; });
      auto it = run.ready.find(run.next_batch);
      r = std::move(it->second);
      run.ready.erase(it);
      ++run.next_batch;
    }
    run.space_cv.notify_all();
  }
  if (r.failed) {
    stop_run();
    throw_failure(r);
  }
  run.current = std::move(r.batch);
  state_.batches_yielded = run.next_batch;
}

Batch& DataLoader::Iterator::operator*() const {
  KILN_CHECK(loader_->run_ && !loader_->run_->done, "DataLoader: dereferencing an iterator past the epoch's end");
  return loader_->run_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  KILN_CHECK(loader_->run_ && !loader_->run_->done, "DataLoader: advancing an iterator past the epoch's end");
  loader_->fetch_next();
  return *this;
}

bool DataLoader::Iterator::operator==(std::default_sentinel_t) const { return !loader_->run_ || loader_->run_->done; }

}  // namespace kiln::data

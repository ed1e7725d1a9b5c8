// Batches from a Dataset: the training loader (reshuffled every epoch, last partial batch
// dropped, endless, resumable) and the evaluation loader (split order, remainder kept as a
// smaller final batch). Both can prepare the next batches on worker threads.
//
// Epoch e's order is shuffled_indices(train size, seed, e): a pure function of the seed and
// the epoch number, so a run resumed from a saved DataPosition sees exactly the batches an
// uninterrupted run would.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/session/data/dataset.h"
#include "runtime/base/tensor.h"

namespace modelc::rt {

// Where the training loader is: the epoch, and the batch within it, that it yields next.
struct DataPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const DataPosition&) const = default;
};

// Stores a position in checkpoint metadata as "data.epoch" and "data.batch" (decimal).
void put_position(std::map<std::string, std::string>& metadata, const DataPosition& pos);
// Reads it back; throws DataError naming `origin` (the checkpoint file) when a key is
// missing or not a non-negative integer.
DataPosition get_position(const std::map<std::string, std::string>& metadata, const std::string& origin);

// A batch of a (features, labels) source, or of an array source (Dataset::named): every
// input by name, features and labels empty.
struct Batch {
  HostTensor features;  // [n, example shape...]
  HostTensor labels;    // [n] or [n, T], i32
  std::vector<std::pair<std::string, HostTensor>> named;  // array sources: [n, example shape...] each
  int64_t epoch = 0;    // training: the epoch; evaluation: 0
  int64_t index = 0;    // the batch's number within its epoch (or evaluation pass)
  int64_t size() const {
    const HostTensor& t = named.empty() ? features : named.front().second;
    return t.shape.empty() ? 0 : t.shape[0];
  }
  // An input's tensor by name (array sources); nullptr when the batch has none of that name.
  const HostTensor* find(const std::string& name) const {
    for (const auto& [n, t] : named)
      if (n == name) return &t;
    return nullptr;
  }
};

// Batches 0, 1, 2, ... made by `make(k)`, `count` of them (negative: without end). With
// `prefetch` > 0, `workers` threads (as DataLoader's num_workers) make batches ahead, worker
// w the batches k with k % workers == w, each with its own copy of `make`; next() returns
// them in order of k, so the stream is the same whatever the worker count. At most
// max(prefetch, workers) batches past the one next() returns next are made or held. An
// exception thrown by `make(k)` reaches the caller of next() when it asks for batch k (after
// every batch before it), and every later call throws it again. With `prefetch` == 0, next()
// makes the batch itself. The destructor stops and joins the workers.
class BatchStream {
 public:
  using Maker = std::function<Batch(int64_t k)>;
  BatchStream(Maker make, int64_t count, int prefetch, int workers = 1);
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;
  std::optional<Batch> next();  // nullopt after the last batch

 private:
  void work(size_t w);
  std::vector<Maker> makers_;  // one per worker (one: synchronous mode)
  int64_t count_;
  size_t depth_;
  int64_t next_k_ = 0;  // the batch next() returns next
  std::mutex m_;
  std::condition_variable cv_;
  std::map<int64_t, Batch> ready_;
  std::exception_ptr error_;
  int64_t error_k_ = -1;  // the batch whose making threw (the earliest such)
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

class TrainLoader {
 public:
  // Throws DataError when the training split holds fewer than `batch` examples, when
  // `example_shape` does not fit the data (Dataset::check_input; unused for an array source,
  // whose inputs' shapes Dataset::open_arrays checked), or when `start` lies outside an epoch.
  TrainLoader(std::shared_ptr<const Dataset> data, int64_t batch, std::vector<int64_t> example_shape, uint64_t seed,
              DataPosition start = {}, int prefetch = 2, int workers = 1);
  Batch next();                      // endless: epochs follow each other
  DataPosition position() const;     // of the batch next() returns next
  int64_t batches_per_epoch() const { return per_epoch_; }

 private:
  std::shared_ptr<const Dataset> data_;
  int64_t per_epoch_ = 0;
  int64_t next_linear_ = 0;  // epoch * per_epoch + batch of the next batch
  std::unique_ptr<BatchStream> stream_;
};

class EvalLoader {
 public:
  // One pass over `split` in its fixed order; the last batch holds the remainder.
  EvalLoader(std::shared_ptr<const Dataset> data, Split split, int64_t batch, std::vector<int64_t> example_shape,
             int prefetch = 2, int workers = 1);
  std::optional<Batch> next();
  int64_t batches() const { return batches_; }

 private:
  std::shared_ptr<const Dataset> data_;
  int64_t batches_ = 0;
  std::unique_ptr<BatchStream> stream_;
};

}  // namespace modelc::rt

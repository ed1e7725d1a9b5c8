// The batch stream (worker thread and bounded queue) and the training and evaluation loaders.
#include "runtime/session/data/loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "runtime/session/data/file_io.h"

namespace modelc::rt {

void put_position(std::map<std::string, std::string>& metadata, const DataPosition& pos) {
  metadata["data.epoch"] = std::to_string(pos.epoch);
  metadata["data.batch"] = std::to_string(pos.batch);
}

DataPosition get_position(const std::map<std::string, std::string>& metadata, const std::string& origin) {
  auto get = [&](const char* key) {
    auto it = metadata.find(key);
    if (it == metadata.end()) throw DataError(fmt::format("{}: metadata has no '{}' (the data position)", origin, key));
    const std::string& s = it->second;
    int64_t v = -1;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < 0)
      throw DataError(fmt::format("{}: metadata '{}' is '{}', not a non-negative integer", origin, key, s));
    return v;
  };
  return {get("data.epoch"), get("data.batch")};
}

BatchStream::BatchStream(Maker make, int64_t count, int prefetch, int workers)
    : count_(count), depth_(prefetch > 0 ? static_cast<size_t>(std::max(prefetch, workers)) : 0) {
  const size_t n = depth_ > 0 ? static_cast<size_t>(std::max(workers, 1)) : 1;
  makers_.assign(n, make);
  if (depth_ > 0)
    for (size_t w = 0; w < n; ++w) workers_.emplace_back([this, w] { work(w); });
}

BatchStream::~BatchStream() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void BatchStream::work(size_t w) {
  const auto n = static_cast<int64_t>(makers_.size());
  for (auto k = static_cast<int64_t>(w); count_ < 0 || k < count_; k += n) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return stop_ || k < next_k_ + static_cast<int64_t>(depth_); });
      if (stop_ || (error_ && error_k_ < k)) return;  // no one will read past a failed batch
    }
    Batch b;
    try {
      b = makers_[w](k);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      if (!error_ || k < error_k_) error_ = std::current_exception(), error_k_ = k;
      cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(m_);
    ready_.emplace(k, std::move(b));
    cv_.notify_all();
  }
}

std::optional<Batch> BatchStream::next() {
  if (depth_ == 0) {
    if (error_) std::rethrow_exception(error_);
    if (count_ >= 0 && next_k_ >= count_) return std::nullopt;
    try {
      return makers_[0](next_k_++);
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }
  std::unique_lock<std::mutex> lock(m_);
  if (count_ >= 0 && next_k_ >= count_) return std::nullopt;
  cv_.wait(lock, [&] { return ready_.count(next_k_) || (error_ && error_k_ == next_k_); });
  auto it = ready_.find(next_k_);
  if (it == ready_.end()) std::rethrow_exception(error_);
  Batch b = std::move(it->second);
  ready_.erase(it);
  ++next_k_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

namespace {

// The training batches' maker: owns the current epoch's permutation (used by one thread).
struct TrainMaker {
  std::shared_ptr<const Dataset> data;
  int64_t batch = 0, per_epoch = 0, start = 0;
  uint64_t seed = 0;
  std::vector<int64_t> shape;
  int64_t perm_epoch = -1;
  std::vector<int64_t> perm;

  Batch operator()(int64_t k) {
    const int64_t linear = start + k;
    Batch b;
    b.epoch = linear / per_epoch;
    b.index = linear % per_epoch;
    if (b.epoch != perm_epoch) {
      perm = shuffled_indices(data->size(Split::Train), seed, static_cast<uint64_t>(b.epoch));
      perm_epoch = b.epoch;
    }
    std::span<const int64_t> pos(perm.data() + b.index * batch, static_cast<size_t>(batch));
    if (data->named()) data->gather_named(Split::Train, pos, b.named);
    else data->gather(Split::Train, pos, shape, b.features, b.labels);
    return b;
  }
};

}  // namespace

TrainLoader::TrainLoader(std::shared_ptr<const Dataset> data, int64_t batch, std::vector<int64_t> example_shape,
                         uint64_t seed, DataPosition start, int prefetch, int workers)
    : data_(std::move(data)) {
  if (batch < 1) throw DataError(fmt::format("{}: batch size {} must be positive", data_->origin(), batch));
  if (!data_->named()) data_->check_input("features", data_->feature_type(), example_shape);
  const int64_t n = data_->size(Split::Train);
  if (n < batch)
    throw DataError(fmt::format("{}: the training split has {} examples, fewer than one batch of {}", data_->origin(), n, batch));
  per_epoch_ = n / batch;
  if (start.epoch < 0 || start.batch < 0 || start.batch >= per_epoch_)
    throw DataError(fmt::format("{}: data position epoch {} batch {} is outside an epoch of {} batches (did the data or the "
                                "batch size change since the checkpoint?)", data_->origin(), start.epoch, start.batch, per_epoch_));
  if (__builtin_mul_overflow(start.epoch, per_epoch_, &next_linear_) || __builtin_add_overflow(next_linear_, start.batch, &next_linear_))
    throw DataError(fmt::format("{}: data position epoch {} is too large", data_->origin(), start.epoch));
  TrainMaker maker{data_, batch, per_epoch_, next_linear_, seed, std::move(example_shape), -1, {}};
  stream_ = std::make_unique<BatchStream>(std::move(maker), -1, prefetch, workers);
}

Batch TrainLoader::next() {
  std::optional<Batch> b = stream_->next();
  if (!b) throw DataError(data_->origin() + ": the training stream ended");  // cannot happen: it is endless
  next_linear_ = b->epoch * per_epoch_ + b->index + 1;
  return std::move(*b);
}

DataPosition TrainLoader::position() const { return {next_linear_ / per_epoch_, next_linear_ % per_epoch_}; }

EvalLoader::EvalLoader(std::shared_ptr<const Dataset> data, Split split, int64_t batch, std::vector<int64_t> example_shape,
                       int prefetch, int workers)
    : data_(std::move(data)) {
  if (batch < 1) throw DataError(fmt::format("{}: batch size {} must be positive", data_->origin(), batch));
  if (!data_->named()) data_->check_input("features", data_->feature_type(), example_shape);
  const int64_t n = data_->size(split);
  batches_ = (n + batch - 1) / batch;
  auto make = [d = data_, split, batch, n, shape = std::move(example_shape)](int64_t k) {
    Batch b;
    b.index = k;
    const int64_t lo = k * batch, hi = std::min(n, lo + batch);
    std::vector<int64_t> pos;
    for (int64_t p = lo; p < hi; ++p) pos.push_back(p);
    if (d->named()) d->gather_named(split, pos, b.named);
    else d->gather(split, pos, shape, b.features, b.labels);
    return b;
  };
  stream_ = std::make_unique<BatchStream>(std::move(make), batches_, prefetch, workers);
}

std::optional<Batch> EvalLoader::next() { return stream_->next(); }

}  // namespace modelc::rt

// Opening a data source from a DataSpec, splitting it, standardising it, and gathering
// batches of examples.
#include "runtime/session/data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/session/data/file_io.h"
#include "runtime/base/philox.h"

namespace modelc::rt {

const char* split_name(Split s) { return s == Split::Train ? "train" : "held-out"; }

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> p(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t u = static_cast<uint64_t>(i);
    PhiloxCounter r = philox4x32_10({static_cast<uint32_t>(u), static_cast<uint32_t>(u >> 32), static_cast<uint32_t>(stream),
                                     static_cast<uint32_t>(stream >> 32)}, key);
    const uint64_t bits = (uint64_t{r[0]} << 32) | r[1];
    // Lemire's multiply-high: j uniform in [0, i] up to a 2^-64 bias.
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(bits) * (u + 1)) >> 64);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

namespace {

// The stream of the once-only shuffle that splits off the held-out set; epochs use streams
// 0, 1, 2, ... (runtime/session/data/loader.cc).
constexpr uint64_t kSplitStream = 0xD1B54A32D192ED03ull;

const std::string& str_arg(const DataSpec& spec, const char* name) {
  auto it = spec.strs.find(name);
  if (it == spec.strs.end() || it->second.empty())
    throw DataError(fmt::format("data source {}(): missing argument '{}'", spec.kind, name));
  return it->second;
}

std::string str_arg_or(const DataSpec& spec, const char* name) {
  auto it = spec.strs.find(name);
  return it == spec.strs.end() ? std::string() : it->second;
}

int64_t int_arg(const DataSpec& spec, const char* name, std::optional<int64_t> dflt) {
  if (auto it = spec.ints.find(name); it != spec.ints.end()) return it->second;
  if (auto it = spec.floats.find(name); it != spec.floats.end()) {
    double v = it->second;
    if (v != std::floor(v) || std::fabs(v) > 9.0e15)
      throw DataError(fmt::format("data source {}(): '{}' must be an integer, got {}", spec.kind, name, v));
    return static_cast<int64_t>(v);
  }
  if (!dflt) throw DataError(fmt::format("data source {}(): missing argument '{}'", spec.kind, name));
  return *dflt;
}


int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

}  // namespace

std::shared_ptr<const Dataset> Dataset::open(const DataSpec& spec, const std::string& base_dir, uint64_t seed,
                                             double validation, ElemType label_type, const Standardization* stats) {
  auto path = [&](const std::string& p) { return resolve_data_path(base_dir, p); };
  if (label_type != ElemType::I32 && (label_type != ElemType::F32 || spec.kind != "csv"))
    throw DataError(fmt::format("data source {}() gives {}, but the model's target input is {}: {}", spec.kind,
                                spec.kind == "idx" ? "class labels (i32)" : spec.kind == "csv" ? "i32 or f32 targets" : "target tokens (i32)",
                                dtype_name(label_type),
                                spec.kind == "csv" ? "declare it f32 (regression) or i32 (classes)"
                                                   : "declare it i32, or use csv() for float targets"));
  if (spec.kind == "idx") {
    const bool normalize = int_arg(spec, "normalize", 1) != 0;
    Examples train = load_idx(path(str_arg(spec, "images")), path(str_arg(spec, "labels")), normalize);
    const std::string ti = str_arg_or(spec, "test_images"), tl = str_arg_or(spec, "test_labels");
    if (ti.empty() != tl.empty())
      throw DataError("data source idx(): give both test_images and test_labels, or neither");
    std::optional<Examples> test;
    if (!ti.empty()) {
      test = load_idx(path(ti), path(tl), normalize);
      if (test->feature_shape != train.feature_shape)
        throw DataError(fmt::format("{}: test images are {}, the training images {}", path(ti),
                                    shape_str(test->feature_shape), shape_str(train.feature_shape)));
    }
    return std::make_shared<Dataset>(std::move(train), std::move(test), Vocab{}, seed, validation, false);
  }
  if (spec.kind == "csv") {
    Examples all = load_csv(path(str_arg(spec, "path")), int_arg(spec, "label_column", -1), int_arg(spec, "header", 0) != 0,
                            label_type);
    const bool normalize = int_arg(spec, "normalize", 1) != 0;
    return std::make_shared<Dataset>(std::move(all), std::nullopt, Vocab{}, seed, validation, normalize, stats);
  }
  if (spec.kind == "text" || spec.kind == "tokens") {
    Vocab vocab;
    const std::string p = path(str_arg(spec, "path"));
    const int64_t context = int_arg(spec, "context", std::nullopt);
    Examples all = spec.kind == "text" ? load_text(p, context, vocab)
                                       : load_tokens(p, context, int_arg(spec, "vocab", 65536), vocab);
    return std::make_shared<Dataset>(std::move(all), std::nullopt, std::move(vocab), seed, validation, false);
  }
  throw DataError(fmt::format("unknown data source '{}': expected idx, csv, text or tokens", spec.kind));
}

Dataset::Dataset(Examples all, std::optional<Examples> test, Vocab vocab, uint64_t seed, double validation,
                 bool standardize, const Standardization* stats)
    : vocab_(std::move(vocab)) {
  if (!(validation < 1.0)) throw DataError(fmt::format("{}: validation fraction {} must be below 1", all.origin, validation));
  if (validation <= 0.0) validation = 0.1;
  train_ = std::make_shared<Examples>(std::move(all));
  if (test) {
    heldout_ = std::make_shared<Examples>(std::move(*test));
    for (int64_t i = 0; i < train_->count; ++i) train_idx_.push_back(i);
    for (int64_t i = 0; i < heldout_->count; ++i) heldout_idx_.push_back(i);
  } else {
    const int64_t n = train_->count;
    if (n < 2) throw DataError(fmt::format("{}: {} example(s): too few to hold out a validation split", train_->origin, n));
    const int64_t h = std::clamp<int64_t>(std::llround(static_cast<double>(n) * validation), 1, n - 1);
    std::vector<int64_t> order;
    if (train_->context > 0) {
      for (int64_t i = 0; i < n; ++i) order.push_back(i);
    } else {
      order = shuffled_indices(n, seed, kSplitStream);
    }
    train_idx_.assign(order.begin(), order.end() - h);
    heldout_idx_.assign(order.end() - h, order.end());
    heldout_ = train_;
  }
  if (standardize && train_->context == 0) standardize_features(stats);
}

// csv's standardisation: `stats` (a trained model's, from its checkpoint) or the training
// split's own, applied to both splits.
void Dataset::standardize_features(const Standardization* stats) {
  const int64_t f = train_->feature_numel();
  if (stats) {
    if (static_cast<int64_t>(stats->mean.size()) != f || stats->std.size() != stats->mean.size())
      throw DataError(fmt::format("{}: the examples have {} feature columns, the trained model's standardisation "
                                  "statistics {}", train_->origin, f, stats->mean.size()));
    mean_ = stats->mean;
    std_ = stats->std;
  } else {
    std::vector<double> sum(static_cast<size_t>(f), 0.0), sq(static_cast<size_t>(f), 0.0);
    for (int64_t i : train_idx_) {
      const float* x = train_->features.data() + i * f;
      for (int64_t j = 0; j < f; ++j) sum[static_cast<size_t>(j)] += x[j];
    }
    const double cnt = static_cast<double>(train_idx_.size());
    mean_.resize(static_cast<size_t>(f));
    std_.resize(static_cast<size_t>(f));
    for (int64_t j = 0; j < f; ++j) mean_[static_cast<size_t>(j)] = static_cast<float>(sum[static_cast<size_t>(j)] / cnt);
    for (int64_t i : train_idx_) {
      const float* x = train_->features.data() + i * f;
      for (int64_t j = 0; j < f; ++j) {
        double d = x[j] - static_cast<double>(mean_[static_cast<size_t>(j)]);
        sq[static_cast<size_t>(j)] += d * d;
      }
    }
    for (int64_t j = 0; j < f; ++j) {
      double sd = std::sqrt(sq[static_cast<size_t>(j)] / cnt);
      std_[static_cast<size_t>(j)] = sd > 1e-12 ? static_cast<float>(sd) : 1.0f;
    }
  }
  auto apply = [&](Examples& e) {
    for (int64_t i = 0; i < e.count; ++i)
      for (int64_t j = 0; j < f; ++j) {
        float& v = e.features[static_cast<size_t>(i * f + j)];
        v = (v - mean_[static_cast<size_t>(j)]) / std_[static_cast<size_t>(j)];
      }
  };
  apply(*train_);
  if (heldout_ != train_) apply(*heldout_);
}

void Dataset::check_input(const std::string& input, ElemType type, const std::vector<int64_t>& example_shape) const {
  if (type != feature_type())
    throw DataError(fmt::format("{}: the data gives {} features, input '{}' is {}", origin(), dtype_name(feature_type()),
                                input, dtype_name(type)));
  if (numel(example_shape) != feature_numel())
    throw DataError(fmt::format("{}: input '{}' wants examples of shape {} ({} values), the data gives {} ({} values)",
                                origin(), input, shape_str(example_shape), numel(example_shape),
                                shape_str(feature_shape()), feature_numel()));
}

namespace {

// The first value of `ex` outside [0, limit) that `input` would take, described with its
// place in the file; "" when there is none.
std::string first_bad_index(const Examples& ex, const std::string& input, bool labels, int64_t limit,
                            std::optional<int64_t> ignore) {
  auto bad = [&](int32_t v) { return !index_accepted(v, limit, ignore); };
  for (const Examples::Field& f : ex.fields) {  // an array source: the field of the input
    if (f.name != input || f.type != ElemType::I32) continue;
    const int64_t per = std::max<int64_t>(1, f.example_bytes() / 4);
    for (size_t k = 0; k < f.bytes.size() / 4; ++k) {
      int32_t v;
      std::memcpy(&v, f.bytes.data() + 4 * k, 4);
      if (bad(v)) return fmt::format("{}: element {} (example {}) is {}", f.origin, k, static_cast<int64_t>(k) / per, v);
    }
  }
  if (!ex.fields.empty()) return "";
  if (ex.context == 0) {
    if (!labels || ex.label_type != ElemType::I32) return "";  // dense features and targets are f32, never indices
    for (int64_t i = 0; i < ex.count; ++i) {
      const int32_t v = ex.labels[static_cast<size_t>(i)];
      if (!bad(v)) continue;
      if (!ex.lines.empty()) return fmt::format("{}:{}: the label is {}", ex.labels_origin, ex.lines[static_cast<size_t>(i)], v);
      return fmt::format("{}: label {} (0-based) is {}", ex.labels_origin, i, v);
    }
    return "";
  }
  // Windows: inputs are tokens [0, count*T), targets tokens [1, count*T].
  const int64_t first = labels ? 1 : 0, last = ex.count * ex.context + first;
  for (int64_t k = first; k < last; ++k) {
    const int32_t v = ex.tokens[static_cast<size_t>(k)];
    if (!bad(v)) continue;
    if (ex.text) {
      const int32_t top = *std::max_element(ex.tokens.begin(), ex.tokens.end());  // the corpus's ids are 0..top
      return fmt::format("{}: the corpus has {} distinct bytes, so its token ids run to {}; byte {} (0-based) is id {}",
                         ex.origin, top + 1, top, k, v);
    }
    return fmt::format("{}: token {} (byte offset {}) is {}", ex.origin, k, 2 * k, v);
  }
  return "";
}

}  // namespace

void Dataset::check_indices(const Program& p, const std::string& input, bool labels) const {
  // The tightest limit of the feeds of `input`, and the value they all ignore (cross_entropy's
  // ignore_index), if they agree on one.
  std::vector<const BufferDesc*> limited;
  for (const Function& f : p.functions)
    for (const Feed& fd : f.feeds)
      if (const BufferDesc& d = p.buffers.at(fd.buffer); fd.name == input && d.index_limit > 0) limited.push_back(&d);
  if (limited.empty()) return;
  const BufferDesc* tight = *std::min_element(limited.begin(), limited.end(), [](const BufferDesc* a, const BufferDesc* b) {
    return a->index_limit < b->index_limit;
  });
  const int64_t limit = tight->index_limit;
  const std::string& note = tight->index_note;
  std::optional<int64_t> ignore = tight->index_ignore;
  for (const BufferDesc* d : limited)
    if (d->index_ignore != ignore) ignore.reset();
  const std::string also = ignore ? fmt::format(" (or {}, the ignored index)", *ignore) : "";
  for (const Examples* ex : {train_.get(), heldout_ != train_ ? heldout_.get() : nullptr}) {
    if (!ex) continue;  // one source, split: checked once
    std::string bad = first_bad_index(*ex, input, labels, limit, ignore);
    if (!bad.empty())
      throw DataError(fmt::format("{}, but input '{}' takes values in [0, {}){}: {}", bad, input, limit, also, note));
  }
}

void Dataset::gather(Split split, std::span<const int64_t> pos, const std::vector<int64_t>& example_shape,
                     HostTensor& features, HostTensor& labels) const {
  check_input("features", feature_type(), example_shape);
  const Examples& src = split == Split::Train ? *train_ : *heldout_;
  const std::vector<int64_t>& idx = indices(split);
  const auto n = static_cast<int64_t>(pos.size());
  std::vector<int64_t> fshape = {n}, lshape = {n};
  fshape.insert(fshape.end(), example_shape.begin(), example_shape.end());
  lshape.insert(lshape.end(), src.label_shape.begin(), src.label_shape.end());
  features = HostTensor(src.feature_type, fshape);
  labels = HostTensor(src.label_type, lshape);
  const int64_t fb = src.feature_numel() * static_cast<int64_t>(dtype_bytes(src.feature_type));
  const int64_t ln = src.label_numel();
  for (int64_t b = 0; b < n; ++b) {
    const int64_t p = pos[static_cast<size_t>(b)];
    if (p < 0 || p >= static_cast<int64_t>(idx.size()))
      throw DataError(fmt::format("{}: position {} outside the {} split ({} examples)", origin(), p, split_name(split), idx.size()));
    src.copy(idx[static_cast<size_t>(p)], features.bytes.data() + b * fb,
             labels.bytes.data() + b * ln * static_cast<int64_t>(dtype_bytes(src.label_type)));
  }
}

double Dataset::unigram_entropy() const {
  if (named() || train_->label_type != ElemType::I32) return std::nan("");
  std::vector<double> counts;
  auto add = [&](int32_t t) {
    if (t < 0) return;
    if (static_cast<size_t>(t) >= counts.size()) counts.resize(static_cast<size_t>(t) + 1, 0.0);
    counts[static_cast<size_t>(t)] += 1;
  };
  for (int64_t i : train_idx_) {
    if (train_->context > 0) {
      const int32_t* w = train_->tokens.data() + i * train_->context;
      for (int64_t k = 1; k <= train_->context; ++k) add(w[k]);
    } else {
      add(train_->labels[static_cast<size_t>(i)]);
    }
  }
  double total = 0, h = 0;
  for (double c : counts) total += c;
  for (double c : counts)
    if (c > 0) h -= c / total * std::log(c / total);
  return h;
}

}  // namespace modelc::rt

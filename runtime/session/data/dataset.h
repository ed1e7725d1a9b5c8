// A Dataset: a data source split into a training part and a held-out part, ready to be cut
// into batches (runtime/session/data/loader.h).
//
// The held-out split is
//   - idx with test_images/test_labels: the test files (the validation fraction is unused);
//   - idx without them, csv: the last `validation` fraction of the examples after one
//     shuffle (seeded by the run seed, so the split is the same on every run and on resume);
//   - text, tokens: the last `validation` fraction of the windows in corpus order (a
//     contiguous tail: neighbouring windows share a token and their context, so a shuffled
//     split would leak training text into the held-out set).
// A validation fraction <= 0 (none given) means 0.1, so that there is always something to
// evaluate; at least one example is held out and at least one kept for training.
//
// Normalisation (`normalize = true`, the default): idx pixels are divided by 255 and left in
// [0, 1] (no standardisation; the held-out split sees exactly the same transform); csv
// features are standardised per column with the mean and standard deviation of the
// TRAINING split only (a constant column is only centred), and the held-out split uses the
// same statistics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/session/data/sources.h"
#include "runtime/base/program.h"
#include "runtime/base/tensor.h"

namespace modelc::rt {

enum class Split : uint8_t { Train, Heldout };
const char* split_name(Split s);  // "train", "held-out"

// A pseudo-random permutation of 0..n-1 drawn with Philox from (seed, stream) only: the same
// on every machine and run. Fisher-Yates with 64-bit draws.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t stream);

// csv's per-column standardisation: x' = (x - mean) / std.
struct Standardization {
  std::vector<float> mean, std;
};

// A model input an array source feeds: its name, element type and one example's shape.
struct InputSpec {
  std::string name;
  ElemType type = ElemType::F32;
  std::vector<int64_t> example_shape;
  bool optional = false;  // absent from the data: no field (predict's target on new data)
};

// Whether a train section's data kind binds inputs by name (npy, npz, safetensors) rather
// than giving (features, labels).
bool is_array_source(const std::string& kind);

class Dataset {
 public:
  // Reads the source `spec` names (relative paths resolved against base_dir, the .model
  // file's directory) and splits it. `label_type`: the dtype of the model's target input,
  // i32 (class labels, target tokens) or f32 (regression targets: csv only). Throws
  // DataError. `stats`: csv's standardisation with these statistics (a trained model's,
  // runtime/session/data/preprocess.h) instead of the training split's own.
  static std::shared_ptr<const Dataset> open(const DataSpec& spec, const std::string& base_dir, uint64_t seed,
                                             double validation, ElemType label_type = ElemType::I32,
                                             const Standardization* stats = nullptr);
  // An array source (is_array_source): every input of `inputs` from the array the spec binds
  // to it ("input.NAME"), converted to the input's type (runtime/session/data/arrays.h);
  // each array's first axis numbers the examples, and the rest must hold one example of the
  // input (the same number of values). The held-out split is the `test` file's arrays
  // (npz, safetensors), else the validation fraction after one shuffle. Throws DataError
  // naming the file, the array and the input.
  // `whole`: no split; both splits are every example in file order (predict on new data).
  static std::shared_ptr<const Dataset> open_arrays(const DataSpec& spec, const std::string& base_dir, uint64_t seed,
                                                    double validation, const std::vector<InputSpec>& inputs,
                                                    bool whole = false);
  // An application's own arrays, by input name (the embedding API's data source): each
  // tensor's first axis numbers the examples, the rest is one example (the input's shape
  // less its batch dim). Batched, shuffled and split like an array source; `test`, when
  // not empty, is the held-out set (the same names). Throws DataError when the tensors'
  // example counts differ, a tensor is a scalar or its bytes do not match its shape.
  using Tensors = std::vector<std::pair<std::string, HostTensor>>;
  static std::shared_ptr<const Dataset> from_tensors(Tensors inputs, uint64_t seed, double validation, Tensors test = {});
  // New csv data to predict from (modelrun predict --input): `path` with every column a
  // feature, or, when its rows have `features` + 1 fields, features and a label (at the
  // spec's label_column); no split (both splits are every row in file order), standardised
  // with `stats` when given (a trained model's) or its own statistics (spec's normalize).
  static std::shared_ptr<const Dataset> open_csv_input(const DataSpec& spec, const std::string& path, int64_t features,
                                                       ElemType label_type, const Standardization* stats);
  // Whether the examples have labels (unlabeled csv input: no).
  bool labeled() const { return train_->labeled; }
  // From examples in memory: `test` is the held-out set, or nullopt to split `all` as above
  // (windowed examples: the tail in order; dense ones: shuffled once). `standardize`: csv's
  // per-column standardisation with training statistics.
  Dataset(Examples all, std::optional<Examples> test, Vocab vocab, uint64_t seed, double validation,
          bool standardize, const Standardization* stats = nullptr);

  const std::string& origin() const { return train_->origin; }
  int64_t size(Split s) const { return static_cast<int64_t>(indices(s).size()); }
  ElemType feature_type() const { return train_->feature_type; }
  const std::vector<int64_t>& feature_shape() const { return train_->feature_shape; }
  const std::vector<int64_t>& label_shape() const { return train_->label_shape; }
  ElemType label_type() const { return train_->label_type; }
  int64_t feature_numel() const { return train_->feature_numel(); }
  bool windowed() const { return train_->context > 0; }
  // text: the characters; tokens: the size only; idx/csv: size 0.
  const Vocab& vocab() const { return vocab_; }
  // The source example numbers of a split, in the split's fixed order.
  const std::vector<int64_t>& indices(Split s) const { return s == Split::Train ? train_idx_ : heldout_idx_; }
  // csv with normalize: the training statistics applied (empty otherwise).
  const std::vector<float>& feature_mean() const { return mean_; }
  const std::vector<float>& feature_std() const { return std_; }

  // Throws DataError unless one example's features fit an input of `example_shape`
  // (element counts equal) and `type` is the features' type. `input` names the input.
  void check_input(const std::string& input, ElemType type, const std::vector<int64_t>& example_shape) const;

  // Throws DataError unless every label (labels) or every feature value (an i32 source's
  // token ids) of both splits lies in [0, limit) for the program's `input`, the tightest
  // index limit of the buffers fed by that name (rt::BufferDesc::index_limit; none: no
  // check), or is the ignored index every such buffer accepts (BufferDesc::index_ignore).
  // The error names the file, the example (a line, an item, a byte or token offset), the
  // value, the input and where the limit is declared.
  void check_indices(const Program& p, const std::string& input, bool labels) const;

  // Fills `features` [n, example_shape...] and `labels` [n, label_shape...] with the split's
  // examples at positions `pos` (positions in indices(split)).
  void gather(Split split, std::span<const int64_t> pos, const std::vector<int64_t>& example_shape,
              HostTensor& features, HostTensor& labels) const;

  // Array sources: whether the data feeds inputs by name, and each named input's examples at
  // positions `pos` of the split, [n, example shape...], in `inputs` order.
  bool named() const { return !train_->fields.empty(); }
  void gather_named(Split split, std::span<const int64_t> pos,
                    std::vector<std::pair<std::string, HostTensor>>& out) const;

  // The entropy in nats of the empirical distribution of the training split's targets
  // (windowed sources: every target token of every training window; dense: the class labels):
  // the loss of the best model that ignores its inputs. NaN for f32 targets.
  double unigram_entropy() const;

 private:
  Dataset() = default;
  // Every example of `all` as both splits, in order.
  static std::shared_ptr<Dataset> whole(Examples all);
  std::shared_ptr<Examples> train_, heldout_;  // heldout_ may be train_ (one source, split)
  std::vector<int64_t> train_idx_, heldout_idx_;
  Vocab vocab_;
  std::vector<float> mean_, std_;
  void standardize_features(const Standardization* stats);
};

}  // namespace modelc::rt

// The array data sources npy(), npz() and safetensors() (every model input bound by name to
// an array whose first axis numbers the examples), an application's tensors, and the
// unsplit data sets predict reads as new data.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/session/data/arrays.h"
#include "runtime/session/data/dataset.h"
#include "runtime/session/data/file_io.h"

namespace modelc::rt {

bool is_array_source(const std::string& kind) { return kind == "npy" || kind == "npz" || kind == "safetensors"; }

int64_t Examples::Field::example_bytes() const {
  int64_t n = static_cast<int64_t>(dtype_bytes(type));
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

int64_t values_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The spec's binding of input `name`: a file (npy) or an array name (npz, safetensors).
const std::string& binding(const DataSpec& spec, const std::string& name) {
  auto it = spec.strs.find("input." + name);
  if (it == spec.strs.end() || it->second.empty())
    throw DataError(fmt::format("data source {}(): model input '{}' is bound to no {}", spec.kind, name,
                                spec.kind == "npy" ? "file" : "array"));
  return it->second;
}

// The array of `inputs[k]` from the archive `arrays` read from `file`.
RawArray take(NamedArrays& arrays, const std::string& file, const std::string& key, const std::string& input) {
  for (auto& [name, a] : arrays)
    if (name == key) return std::move(a);
  std::vector<std::string> names;
  for (const auto& [name, a] : arrays) names.push_back("'" + name + "'");
  throw DataError(fmt::format("{}: no array '{}' for input '{}' (the file holds {}){}", file, key, input,
                              fmt::join(names, ", "),
                              key == input ? fmt::format("; name the array with {} = \"ARRAY\" in the data source", input) : ""));
}

// Whether the spec binds input `name` to something there: a file (npy) or an array of the archive.
bool has_array(const DataSpec& spec, const NamedArrays& archive, const std::string& name) {
  auto it = spec.strs.find("input." + name);
  if (it == spec.strs.end() || it->second.empty()) return false;
  if (spec.kind == "npy") return true;
  for (const auto& [n, a] : archive)
    if (n == it->second) return true;
  return false;
}

// The examples of one file set: every input's array checked and converted.
Examples examples_of(const DataSpec& spec, const std::string& base_dir, const std::string& file,
                     const std::vector<InputSpec>& inputs) {
  Examples ex;
  ex.fields.reserve(inputs.size());
  NamedArrays archive;
  if (spec.kind != "npy") archive = spec.kind == "npz" ? read_npz(file) : read_safetensors_arrays(file);
  std::vector<std::string> origins;
  const InputSpec* first = nullptr;
  for (const InputSpec& in : inputs) {
    if (in.optional && !has_array(spec, archive, in.name)) continue;
    RawArray a = spec.kind == "npy" ? read_npy(resolve_data_path(base_dir, binding(spec, in.name)))
                                    : take(archive, file, binding(spec, in.name), in.name);
    if (a.shape.empty())
      throw DataError(fmt::format("{}: a scalar; input '{}' needs an array whose first axis numbers the examples",
                                  a.origin, in.name));
    std::vector<int64_t> example(a.shape.begin() + 1, a.shape.end());
    if (values_of(example) != values_of(in.example_shape))
      throw DataError(fmt::format("{}: a {} array of shape [{}] gives examples of shape [{}] ({} values); input '{}' "
                                  "takes examples of shape [{}] ({} values)", a.origin, a.dtype(), fmt::join(a.shape, ","),
                                  fmt::join(example, ","), values_of(example), in.name, fmt::join(in.example_shape, ","),
                                  values_of(in.example_shape)));
    if (first && a.shape[0] != ex.count)
      throw DataError(fmt::format("{}: {} examples, but {} has {} (every input's array needs one row per example)",
                                  a.origin, a.shape[0], ex.fields.front().origin, ex.count));
    ex.count = a.shape[0];
    first = &in;
    Examples::Field f{in.name, a.origin, in.type, in.example_shape, convert_array(a, in.type, in.name)};
    origins.push_back(spec.kind == "npy" ? a.origin : file);
    ex.fields.push_back(std::move(f));
  }
  if (ex.fields.empty()) throw DataError(fmt::format("data source {}(): the model has no inputs to feed", spec.kind));
  origins.erase(std::unique(origins.begin(), origins.end()), origins.end());
  ex.origin = fmt::format("{}", fmt::join(origins, ", "));
  ex.labels_origin = ex.origin;
  return ex;
}

}  // namespace

std::shared_ptr<const Dataset> Dataset::open_arrays(const DataSpec& spec, const std::string& base_dir, uint64_t seed,
                                                    double validation, const std::vector<InputSpec>& inputs,
                                                    bool whole) {
  if (!is_array_source(spec.kind)) throw DataError(fmt::format("data source {}() is not an array source", spec.kind));
  auto str = [&](const char* name) {
    auto it = spec.strs.find(name);
    return it == spec.strs.end() ? std::string() : it->second;
  };
  if (spec.kind != "npy" && str("path").empty())
    throw DataError(fmt::format("data source {}(): missing argument 'path'", spec.kind));
  const std::string file = spec.kind == "npy" ? "" : resolve_data_path(base_dir, str("path"));
  Examples all = examples_of(spec, base_dir, file, inputs);
  if (whole) return Dataset::whole(std::move(all));
  std::optional<Examples> test;
  if (!str("test").empty()) test = examples_of(spec, base_dir, resolve_data_path(base_dir, str("test")), inputs);
  return std::make_shared<Dataset>(std::move(all), std::move(test), Vocab{}, seed, validation, false);
}

namespace {

Examples examples_of_tensors(Dataset::Tensors tensors, const char* what) {
  Examples ex;
  for (auto& [name, t] : tensors) {
    const std::string origin = fmt::format("{} tensor '{}'", what, name);
    if (t.shape.empty())
      throw DataError(fmt::format("{}: a scalar; the first axis of each tensor numbers the examples", origin));
    if (t.numel() < 0 || t.bytes.size() != static_cast<size_t>(t.numel()) * dtype_bytes(t.type))
      throw DataError(fmt::format("{}: {} bytes for a {} tensor of shape {}", origin, t.bytes.size(), dtype_name(t.type),
                                  t.shape_str()));
    if (!ex.fields.empty() && t.shape[0] != ex.count)
      throw DataError(fmt::format("{}: {} examples, but tensor '{}' has {}", origin, t.shape[0], ex.fields.front().name,
                                  ex.count));
    ex.count = t.shape[0];
    ex.fields.push_back({name, origin, t.type, std::vector<int64_t>(t.shape.begin() + 1, t.shape.end()), std::move(t.bytes)});
  }
  if (ex.fields.empty()) throw DataError(fmt::format("{} tensors: none given", what));
  ex.origin = fmt::format("the {} tensors", what);
  ex.labels_origin = ex.origin;
  return ex;
}

}  // namespace

std::shared_ptr<const Dataset> Dataset::from_tensors(Tensors inputs, uint64_t seed, double validation, Tensors test) {
  Examples all = examples_of_tensors(std::move(inputs), "the application's");
  std::optional<Examples> held;
  if (!test.empty()) {
    held = examples_of_tensors(std::move(test), "the application's held-out");
    for (size_t k = 0; k < all.fields.size(); ++k)
      if (k >= held->fields.size() || held->fields[k].name != all.fields[k].name ||
          held->fields[k].type != all.fields[k].type || held->fields[k].shape != all.fields[k].shape)
        throw DataError(fmt::format("the held-out tensors must have the training tensors' names, types and example "
                                    "shapes in order; '{}' differs", all.fields[k].name));
    if (held->fields.size() != all.fields.size())
      throw DataError("the held-out tensors must have the training tensors' names, types and example shapes in order");
  }
  return std::make_shared<Dataset>(std::move(all), std::move(held), Vocab{}, seed, validation, false);
}

std::shared_ptr<Dataset> Dataset::whole(Examples all) {
  std::shared_ptr<Dataset> d(new Dataset());
  for (int64_t i = 0; i < all.count; ++i) d->train_idx_.push_back(i);
  d->heldout_idx_ = d->train_idx_;
  d->train_ = d->heldout_ = std::make_shared<Examples>(std::move(all));
  return d;
}

std::shared_ptr<const Dataset> Dataset::open_csv_input(const DataSpec& spec, const std::string& path, int64_t features,
                                                       ElemType label_type, const Standardization* stats) {
  auto arg = [&](const char* name, int64_t dflt) {
    auto it = spec.ints.find(name);
    return it == spec.ints.end() ? dflt : it->second;
  };
  const bool header = arg("header", 0) != 0;
  Examples ex = load_csv(path, arg("label_column", -1), header, label_type, /*labeled=*/false);
  if (ex.feature_numel() == features + 1) ex = load_csv(path, arg("label_column", -1), header, label_type);
  else if (ex.feature_numel() != features)
    throw DataError(fmt::format("{}: rows of {} fields; the model takes {} features (and, optionally, a label)", path,
                                ex.feature_numel(), features));
  std::shared_ptr<Dataset> d = whole(std::move(ex));
  if (arg("normalize", 1) != 0) d->standardize_features(stats);
  return d;
}

void Dataset::gather_named(Split split, std::span<const int64_t> pos,
                           std::vector<std::pair<std::string, HostTensor>>& out) const {
  const Examples& src = split == Split::Train ? *train_ : *heldout_;
  const std::vector<int64_t>& idx = indices(split);
  const auto n = static_cast<int64_t>(pos.size());
  out.clear();
  for (const Examples::Field& f : src.fields) {
    std::vector<int64_t> shape = {n};
    shape.insert(shape.end(), f.shape.begin(), f.shape.end());
    HostTensor t(f.type, shape);
    const int64_t w = f.example_bytes();
    for (int64_t b = 0; b < n; ++b) {
      const int64_t p = pos[static_cast<size_t>(b)];
      if (p < 0 || p >= static_cast<int64_t>(idx.size()))
        throw DataError(fmt::format("{}: position {} outside the {} split ({} examples)", origin(), p, split_name(split),
                                    idx.size()));
      if (w > 0) std::memcpy(t.bytes.data() + b * w, f.bytes.data() + idx[static_cast<size_t>(p)] * w, static_cast<size_t>(w));
    }
    out.emplace_back(f.name, std::move(t));
  }
}

}  // namespace modelc::rt

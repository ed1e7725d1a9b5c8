// Checkpoints in the safetensors format (https://huggingface.co/docs/safetensors), so that
// Python's safetensors and PyTorch read them: an 8-byte little-endian header length, a JSON
// header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
// padded with spaces to a multiple of 8 bytes, then the tensors' bytes in header order,
// offsets relative to the start of the data. Names are the model's parameter and state
// names verbatim ("block.2.linear.0.w").
//
// Saving is atomic: the file is written under a temporary name in the target's directory,
// fsync'ed, renamed over the target, and the directory fsync'ed; a failure removes the
// temporary file and leaves any previous checkpoint untouched.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/tensor.h"

namespace modelc::rt {

// A bad or unreadable checkpoint, or one that does not fit the model; the message names the
// file and, where there is one, the tensor.
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using NamedTensors = std::vector<std::pair<std::string, HostTensor>>;

struct Checkpoint {
  std::string path;
  NamedTensors tensors;  // in header order
  std::map<std::string, std::string> metadata;
  const HostTensor* find(const std::string& name) const;  // nullptr when absent
  // Metadata field `key`, read strictly; each throws CheckpointError naming the file and the
  // field when it is missing or malformed. text(): any string. count(): a non-negative decimal
  // integer that fits in int64 ("5.5", "-1", "5 ", "1e3" and 20 digits are refused). seed():
  // the same, up to 2^64 - 1. has(): whether the field is there at all.
  bool has(const std::string& key) const { return metadata.count(key) != 0; }
  const std::string& text(const std::string& key) const;
  int64_t count(const std::string& key) const;
  uint64_t seed(const std::string& key) const;
};

// Writes `tensors` (in this order) and `metadata` to `path` atomically. Throws
// CheckpointError for an empty or repeated name, a tensor whose bytes do not match its shape,
// or any I/O failure.
void save_checkpoint(const std::string& path, const NamedTensors& tensors,
                     const std::map<std::string, std::string>& metadata = {});

// Reads and validates a whole checkpoint: the length, the JSON, every dtype, shape and
// offset (in range, no overlaps, no gaps, no trailing bytes), BOOL values 0 or 1.
Checkpoint load_checkpoint(const std::string& path);

// What the model expects of one tensor.
struct TensorSpec {
  std::string name;
  ElemType type = ElemType::F32;
  std::vector<int64_t> shape;
};

// Throws CheckpointError listing every difference, one per line ("ckpt.safetensors: tensor
// 'fc1.w' has shape [784,128], the model expects [784,256]", "ckpt.safetensors: missing
// tensor 'fc2.b'", ...). Tensors the model does not expect are errors unless allow_extra.
void check_against(const Checkpoint& ckpt, const std::vector<TensorSpec>& expected, bool allow_extra = false);

// The safetensors dtype name of an element type: "F32", "F16", "BF16", "I32", "BOOL".
const char* safetensors_dtype(ElemType t);

}  // namespace modelc::rt

// Array files as NumPy and PyTorch users write them, read as they are (dtype, shape and
// little-endian bytes in C order), and converted to the element type of the model input they
// feed:
//
//   .npy          NumPy's format 1.0, 2.0 and 3.0 (np.save): a simple dtype, C or Fortran
//                 order (Fortran order is transposed to C order), either byte order
//   .npz          a zip archive of .npy files (np.savez: stored; np.savez_compressed:
//                 deflate), zip64 included; "x.npy" in the archive is the array "x"
//   .safetensors  a safetensors file of arrays (safetensors.numpy.save_file, torch's
//                 save_file): F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL
//
// Every reader throws DataError naming the file (and the array in an archive) and what is
// wrong: a bad magic, a truncated file, a dtype modelc cannot read (structured, complex,
// strings, objects), a damaged archive member (its CRC is checked), sizes that disagree.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/dtype.h"

namespace modelc::rt {

struct RawArray {
  std::string origin;  // for messages: "x.npy", "data.npz: array 'x'"
  char kind = 'f';     // 'f' IEEE float, 'B' bfloat16, 'i' signed, 'u' unsigned, 'b' bool
  int itemsize = 4;    // bytes per element
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, C order
  int64_t numel() const;
  std::string dtype() const;  // "float64", "int32", "uint8", "bool", "bfloat16", ...
};

using NamedArrays = std::vector<std::pair<std::string, RawArray>>;

// `bytes` as a .npy file, `origin` naming it in messages.
RawArray parse_npy(const std::vector<uint8_t>& bytes, const std::string& origin);
RawArray read_npy(const std::string& path);
NamedArrays read_npz(const std::string& path);
NamedArrays read_safetensors_arrays(const std::string& path);
// By the file's suffix: .npz and .safetensors give their arrays, .npy one array named "".
NamedArrays read_arrays(const std::string& path);

// The array's values as elements of `to` (little-endian, C order), for model input `input`:
//   f32   from any float (a finite value beyond f32's range is an error), integer or bool
//   i32   from any integer or bool (a value outside i32 is an error); never from a float
//   bool  from bool, or integers that are 0 or 1
//   f16, bf16   from an array of that very type
// Errors name the array, the element (and its example: the index along the first axis),
// the value and the input.
std::vector<uint8_t> convert_array(const RawArray& a, DType to, const std::string& input);

}  // namespace modelc::rt

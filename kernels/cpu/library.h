// The CPU library ops: the opaque ops of a Program (matmul, convolution, pooling, embedding,
// data movement, fill, cumsum) that the code generator hands to hand-written kernels. Each op
// is one entry in a table keyed by the IR's op name, read from kernels/library_ops.def (the
// op's name, its CPU kernel and its CUDA implementation on one line); the executor looks an
// Instr's `op` up here and calls it with the instruction's buffers (their evaluated shapes
// and types), its attributes and the thread pool. Attribute names are the IR's
// (compiler/ir/ops/*.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/device/cpu/thread_pool.h"
#include "runtime/base/error.h"
#include "runtime/base/program.h"

namespace modelc::kernels {

using rt::ElemType;

// One operand of a library call: a buffer's data and its evaluated type and shape. `data`
// is null for an absent optional input (kNoBuffer).
struct TensorArg {
  void* data = nullptr;
  ElemType type = ElemType::F32;
  std::vector<int64_t> shape;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i < 0 ? i + static_cast<int>(shape.size()) : i)); }
  int rank() const { return static_cast<int>(shape.size()); }
  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
  bool present() const { return data != nullptr; }
};

struct LibCall {
  std::string op;     // the library op's name
  std::string where;  // the instruction's source location, for messages
  std::vector<TensorArg> inputs, outputs;
  const std::map<std::string, std::vector<int64_t>>* ints = nullptr;
  const std::map<std::string, double>* floats = nullptr;
  rt::ThreadPool* pool = nullptr;
  // The instruction's size table, evaluated: [$seed, $step] for an op that draws random
  // numbers (a keyed op, compiler/lowered/lower.cc), else empty. Null: none given.
  const std::vector<int64_t>* sizes = nullptr;

  // Throws RuntimeError "OP at WHERE: MSG".
  [[noreturn]] void fail(const std::string& msg) const;
  // Attribute access; a missing required attribute is an error naming it.
  const std::vector<int64_t>& ints_attr(const std::string& name) const;
  std::vector<int64_t> ints_or(const std::string& name, std::vector<int64_t> fallback) const;
  int64_t int_attr(const std::string& name) const;
  int64_t int_or(const std::string& name, int64_t fallback) const;
  double float_attr(const std::string& name) const;
  // A window attribute of one or two entries as (height, width); empty gives `fallback`.
  std::pair<int64_t, int64_t> pair_attr(const std::string& name, std::pair<int64_t, int64_t> fallback) const;

  // Checks: the number of inputs/outputs, an operand's dtype and rank.
  void expect_arity(size_t in_min, size_t in_max, size_t out_min, size_t out_max) const;
  const TensorArg& in(size_t i) const;   // present input i (error when absent)
  const TensorArg& out(size_t i = 0) const;
  void expect_type(const TensorArg& t, ElemType type, const char* role) const;
  void expect_rank(const TensorArg& t, int rank, const char* role) const;
};

using LibraryFn = void (*)(const LibCall&);

// The op's function, or nullptr when the name is unknown. Every op of
// kernels/library_ops.def has one.
LibraryFn find_library_op(const std::string& name);
// Every op name of kernels/library_ops.def (sorted), for messages and tests.
std::vector<std::string> library_op_names();

// f16 / bf16 (runtime/base/program.h's ElemType) to and from f32: widening is exact, narrowing
// rounds to nearest even (overflow to inf, NaN kept), as the compiler's kernels do.
float low_to_f32(uint16_t bits, ElemType t);
uint16_t f32_to_low(float v, ElemType t);
inline bool is_low_float(ElemType t) { return t == ElemType::F16 || t == ElemType::BF16; }
// Mixed precision for an op written for f32: when some operand of `c` is f16 or bf16, its
// f16/bf16 inputs are widened into f32 copies, `f32_op` runs on those and f32 outputs, and
// the outputs are rounded back to their types; returns false (doing nothing) when every
// operand is f32 already. Accumulation is therefore in f32, as the IR's semantics ask
// (docs/precision.md). Costs one pass over each operand and a temporary of its f32 size.
bool run_widened(const LibCall& c, LibraryFn f32_op);

// bf16 matmuls on the CPU (docs/precision.md). Where the CPU has bf16 instructions
// (AVX512-BF16 or AMX: oneDNN's effective ISA avx512_core_bf16 or above) and oneDNN is built
// in, a bf16 linear layer (x @ w, w 2-D; f32 or bf16 output; its epilogue) runs on oneDNN's
// bf16 GEMM, accumulating in f32: no f32 copies of the operands. Everything else with f16 or
// bf16 operands is widened (run_widened). The mode, process-wide, for tests and benchmarks:
// Auto (the default) takes the native path where it is available, Widened never, Native
// always where the call qualifies; set_low_float_matmul(Native) on a CPU or a build without
// it throws RuntimeError saying why.
enum class LowFloatMatmul : uint8_t { Auto, Widened, Native };
bool native_bf16_available();
LowFloatMatmul low_float_matmul();
void set_low_float_matmul(LowFloatMatmul mode);

// The calling thread's OpenMP team size for oneDNN (no-op without oneDNN's libgomp).
void set_onednn_threads(int threads);

// Convolution backends. The default (see docs/performance.md) is chosen by measurement;
// MODELC_CONV=im2col|onednn in the environment overrides it at start-up.
enum class ConvBackend : uint8_t { Im2col, OneDnn };
bool onednn_available();
ConvBackend conv_backend();
void set_conv_backend(ConvBackend b);  // OneDnn without oneDNN built in: RuntimeError

// The individual convolutions, for tests and benchmarks (the table dispatches to them).
void conv2d_im2col(const LibCall& c);
void conv2d_grad_input_im2col(const LibCall& c);
void conv2d_grad_weight_im2col(const LibCall& c);
void conv2d_onednn(const LibCall& c);
void conv2d_grad_input_onednn(const LibCall& c);
void conv2d_grad_weight_onednn(const LibCall& c);

}  // namespace modelc::kernels

// The CUDA library ops of kernels/cuda/ as data: what the op checks (the shared plans of
// kernels/cpu/*_plan.h, so the CPU twin and the GPU say the same things) and the kernel
// launches that carry it out, each a kernel of kernels/cuda/hand_kernels.cu and its
// parameter block. The GPU path (kernels/cuda/ops.cc) launches them through the driver;
// run_on_host runs the very same launches index by index through the kernels' bodies
// (kernels/cuda/bodies.h) on host memory, which is how CI tests them without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "kernels/cpu/library.h"
#include "kernels/cuda/bodies.h"

namespace modelc::kernels::cuda {

enum class HandKernel : uint8_t {
  CopyU8, CopyU16, CopyU32, FillU8, FillU16, FillU32, Embedding, EmbeddingGrad,
  MaxPool, AvgPool, MaxPoolGrad, AvgPoolGrad, Epilogue,
};
constexpr int kHandKernels = 13;
static_assert(static_cast<int>(HandKernel::Epilogue) + 1 == kHandKernels, "kHandKernels counts HandKernel");
// The PTX entry point: "modelc_copy_u32".
const char* hand_kernel_name(HandKernel k);

struct Launch {
  HandKernel kernel = HandKernel::CopyU32;
  std::variant<CopyParams, FillParams, EmbeddingParams, PoolParams, EpilogueParams> params;
  int64_t n() const;  // the indices the kernel runs over
};

// The launches of one library call, and what its error word (if any) will be about.
struct OpLaunches {
  std::vector<Launch> launches;
  bool checks_ids = false;  // embedding ops: the kernel records a bad id in the error word
  std::vector<int64_t> ids_shape;
  int64_t rows = 0;
};

// The ops kernels/cuda/ implements (sorted): every CPU library op but matmul and conv2d*.
std::vector<std::string> hand_kernel_ops();
bool is_hand_kernel_op(const std::string& op);

// Checks call `c` (its TensorArg data: device addresses, or host addresses for run_on_host)
// and returns its launches. `error_word`: where an embedding op's kernel records a bad id
// (kNoError before it runs); other ops ignore it. Throws RuntimeError as the CPU twin does,
// plus for a copy of more than kMaxCopyRank dims that cannot be merged, or 2^31 ids or more.
OpLaunches plan_launches(const LibCall& c, unsigned long long* error_word);

// The epilogue launch of kernels/cuda/epilogue.h; `out` holds rows x L x inner values of
// `type` (f32, f16 or bf16). Throws RuntimeError for another type, an unknown activation or
// a negative extent.
Launch plan_epilogue(void* out, ElemType type, const float* bias, rt::EpilogueActivation act, int64_t rows, int64_t L,
                     int64_t inner = 1);

// Runs `l` on the host: body(params, i) for i in [0, n()), in order.
void run_on_host(const Launch& l);

// The message of an error word that holds an error (see bodies.h), through c.fail: "OP at
// WHERE: id ID at position P of the ids SHAPE is out of range for a table of ROWS rows".
[[noreturn]] void fail_id_error(const LibCall& c, unsigned long long word, const std::vector<int64_t>& ids_shape, int64_t rows);

}  // namespace modelc::kernels::cuda

// The CUDA library ops of kernels/cuda/ as data: what the op checks (the shared plans of
// kernels/cpu/*_plan.h, so the CPU twin and the GPU say the same things) and the kernel
// launches that carry it out, each a kernel of kernels/cuda/hand_kernels.def and its
// parameter block. The GPU path (kernels/cuda/ops.cc) launches them through the driver;
// run_on_host runs the very same launches index by index through the kernels' bodies
// (kernels/cuda/bodies.h) on host memory, which is how CI tests them without a GPU.
//
// Both lists are data: the kernels (HandKernel, kHandKernels, hand_kernel_name, run_on_host
// and hand_kernels.cu's entry points) come from kernels/cuda/hand_kernels.def, the ops with
// hand kernels and their planners (hand_kernel_ops, plan_launches) from
// kernels/library_ops.def's MODELC_CUDA_HAND entries.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "kernels/cpu/library.h"
#include "kernels/cuda/bodies.h"

namespace modelc::kernels::cuda {

enum class HandKernel : uint8_t {
#define MODELC_HAND_KERNEL(kernel, entry, Params, body) kernel,
#include "kernels/cuda/hand_kernels.def"
};
constexpr int kHandKernels = 0
#define MODELC_HAND_KERNEL(kernel, entry, Params, body) +1
#include "kernels/cuda/hand_kernels.def"
    ;
// The PTX entry point: "modelc_copy_u32".
const char* hand_kernel_name(HandKernel k);

namespace detail {
// std::variant of the distinct types among Ts (in first-seen order); `void` entries are
// dropped (the list below ends in one, so that every line of the .def can end in a comma).
template <class V, class... Ts>
struct distinct;
template <class... Vs>
struct distinct<std::variant<Vs...>> {
  using type = std::variant<Vs...>;
};
template <class... Vs, class T, class... Ts>
struct distinct<std::variant<Vs...>, T, Ts...> {
  using type = typename distinct<std::conditional_t<std::is_void_v<T> || (std::is_same_v<T, Vs> || ...), std::variant<Vs...>,
                                                    std::variant<Vs..., T>>,
                                 Ts...>::type;
};
}  // namespace detail

// Every parameter struct of hand_kernels.def, once each.
using LaunchParams = detail::distinct<std::variant<>,
#define MODELC_HAND_KERNEL(kernel, entry, Params, body) Params,
#include "kernels/cuda/hand_kernels.def"
                                      void>::type;

struct Launch {
  HandKernel kernel = HandKernel::CopyU32;
  LaunchParams params;  // the kernel's Params (run_on_host checks it)
  int64_t n() const;    // the indices the kernel runs over
};

// The launches of one library call, and what its error word (if any) will be about.
struct OpLaunches {
  std::vector<Launch> launches;
  bool checks_ids = false;  // embedding ops: the kernel records a bad id in the error word
  std::vector<int64_t> ids_shape;
  int64_t rows = 0;
};

// Hands out the word that an op's kernels record an error found in data in (bodies.h:
// record_error; kernels/cuda/errors.h), when its planner asks for one: only ops whose
// kernels check data (embedding) do, after their checks passed. On a GPU it reserves a
// device word, for run_on_host a host word.
using ErrorWordSource = std::function<unsigned long long*()>;

// A hand-kernel op's planner (kernels/library_ops.def, MODELC_CUDA_HAND): checks call `c`
// and returns its launches.
using HandPlanner = OpLaunches (*)(const LibCall& c, const ErrorWordSource& error_word);

// Helpers of the planners: one launch of `kernel`; the FloatType (bodies.h) of a type, -1
// for one that is not f32, f16 or bf16.
OpLaunches one(HandKernel kernel, LaunchParams params);
int32_t float_type(ElemType t);

// The ops kernels/cuda/ implements (sorted): kernels/library_ops.def's MODELC_CUDA_HAND ops.
std::vector<std::string> hand_kernel_ops();

// Checks call `c` (its TensorArg data: device addresses, or host addresses for run_on_host)
// with its op's planner and returns its launches, none of them empty. `error_word`: where an
// embedding op's kernel records a bad id (a word that holds kNoError before the kernel
// runs), asked for only by those ops. Throws RuntimeError as the CPU twin does, plus for an
// op without hand kernels, a copy of more than kMaxCopyRank dims that cannot be merged, or
// 2^31 ids or more.
OpLaunches plan_launches(const LibCall& c, const ErrorWordSource& error_word);

// The epilogue launch of kernels/cuda/epilogue.h; `out` holds rows x L x inner values of
// `type` (f32, f16 or bf16). Throws RuntimeError for another type, an unknown activation or
// a negative extent.
Launch plan_epilogue(void* out, ElemType type, const float* bias, rt::EpilogueActivation act, int64_t rows, int64_t L,
                     int64_t inner = 1);

// Runs `l` on the host: body(params, i) for i in [0, n()), in order. std::bad_variant_access
// when l.params is not the kernel's Params.
void run_on_host(const Launch& l);

// The message of an error word that holds an error (see bodies.h), through c.fail: "OP at
// WHERE: id ID at position P of the ids SHAPE is out of range for a table of ROWS rows".
[[noreturn]] void fail_id_error(const LibCall& c, unsigned long long word, const std::vector<int64_t>& ids_shape, int64_t rows);

}  // namespace modelc::kernels::cuda

// The Program: everything the runtime needs to train and evaluate a model, and nothing of
// the compiler. The compiler's code generator fills one in (compiler/pipeline.h);
// the runtime owns the format, so this header is the only arrow between the two halves,
// and it points from the compiler to the runtime.
//
// A Program holds buffers (tensors with shapes that may depend on symbols such as the batch
// size), host kernels (machine code with one fixed ABI), and functions: ordered lists of
// instructions over the buffers ("train_step", "eval"). Parameters and optimizer state are
// persistent buffers shared by all functions; a function's `updates` copy its new values
// into them after it ran.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/dtype.h"

namespace modelc::rt {

// Element types: the DType both halves share (runtime/base/dtype.h), here rt::ElemType.

// A size that depends on the program's symbols: sum of coef * (product of symbols).
// Symbol ids index Program::symbols.
struct SizeExpr {
  struct Term {
    int64_t coef = 0;
    std::vector<uint32_t> symbols;  // empty: a constant term
    friend bool operator==(const Term&, const Term&) = default;
  };
  std::vector<Term> terms;  // no terms: 0

  static SizeExpr constant(int64_t c);
  static SizeExpr symbol(uint32_t id);
  bool is_constant() const;
  // Throws std::runtime_error on overflow or a symbol id out of range.
  int64_t eval(std::span<const int64_t> symbol_values) const;
  std::string str(const std::vector<std::string>& symbol_names) const;  // "64*B + 1"
  friend bool operator==(const SizeExpr&, const SizeExpr&) = default;  // the same terms in the same order
};

enum class BufferRole : uint8_t {
  Input,   // fed by the caller each call (a batch, or a runtime scalar such as $lr)
  Param,   // persistent, trainable, initialised from `init`, saved in checkpoints
  State,   // persistent optimizer state, zero-initialised, saved in checkpoints
  Output,  // produced by a function and returned to the caller
  Temp,    // produced and consumed inside one call
  Buffer   // persistent model state that is not trained (a `buffer`: batch norm's running
           // statistics), initialised from `init`, updated by the train step, read by eval,
           // saved in checkpoints with the params
};

// Params, buffers and optimizer state: storage that lives across calls and functions.
constexpr bool is_persistent(BufferRole r) {
  return r == BufferRole::Param || r == BufferRole::State || r == BufferRole::Buffer;
}
// "parameter", "buffer" or "state", for messages.
constexpr const char* persistent_kind(BufferRole r) {
  return r == BufferRole::Param ? "parameter" : r == BufferRole::Buffer ? "buffer" : "state";
}

// How a parameter starts. The compiler reduces kaiming/xavier to normal/uniform with the
// bounds computed, so the runtime only knows these four.
struct Init {
  enum class Kind : uint8_t { Zeros, Ones, Normal, Uniform, Constant } kind = Kind::Zeros;
  double a = 0, b = 0;  // normal: mean, std; uniform: low, high; constant: the value
};

struct BufferDesc {
  std::string name;  // inputs, params, states, outputs: their names; temps: a short label
  ElemType type = ElemType::F32;
  std::vector<SizeExpr> shape;
  BufferRole role = BufferRole::Temp;
  Init init;  // params and buffers
  // Integer inputs whose values index something (embedding ids, class labels): each value
  // must lie in [0, index_limit), and index_note says what the limit is and where it is
  // declared ("the classes of cross_entropy at m.model:14:10 ..."). 0: no limit known.
  int64_t index_limit = 0;
  std::string index_note;
  // With an index limit: the one value outside [0, index_limit) that is accepted too and
  // means "no index here" (cross_entropy's ignore_index, -100 by default, as PyTorch's).
  std::optional<int64_t> index_ignore;
  // Params and inputs: where the model declares them ("models/x.model:5:3"), for messages;
  // "" when unknown.
  std::string where;
};

// Whether an index input with `limit` and ignored value `ignore` takes the value v (the one
// rule of the session's and the data sets' checks).
inline bool index_accepted(int64_t v, int64_t limit, std::optional<int64_t> ignore) {
  return (v >= 0 && v < limit) || (ignore && v == *ignore);
}

// The ABI of every host kernel: process work items [begin, end) of the kernel's extent.
// `buffers` are the instruction's inputs then outputs (data pointers); `sizes` is the
// instruction's size table evaluated under the current symbol values.
using HostCodeletFn = void (*)(void* const* buffers, const int64_t* sizes, int64_t begin, int64_t end);

// How a GPU launch maps a kernel's work items to threads (chosen per kernel by the compiler).
enum class GpuMapping : uint8_t {
  Thread,  // work items spread over all threads of the grid (grid-stride loop over the extent)
  Block    // one work item per thread block (row reductions: threads split the row)
};

// The GPU ABI of a kernel (Program::ptx; compiler/codegen/nvptx.cc). Its PTX entry point is
// named CodeletDesc::name and takes four 64-bit parameters, in this order:
//   .entry NAME(.param .u64 buffers, .param .u64 sizes, .param .u64 begin, .param .u64 end)
//  - buffers: the device (global memory) address of an array of u64 device addresses, the
//    instruction's buffers as for the host (Instr::inputs then Instr::outputs; 0 for an
//    absent optional input);
//  - sizes: the device address of the instruction's size table, i64 values evaluated under
//    the current symbols as for the host (may be 0 when the table is empty);
//  - begin, end: signed 64-bit, the work items [begin, end) of Instr::extent to run
//    (normally 0 and the extent; n = end - begin <= 0 does nothing). A work item is the
//    same unit for the host and the GPU code of a kernel (one extent for both: e.g. a tile
//    of a column reduction's output columns, or one chunk of a two-phase reduction's
//    first kernel, whose partials the next instruction combines).
// Both tables are 8-byte aligned and must not change while the kernel runs (the kernel
// reads them, and its input buffers, through the non-coherent cache: no output buffer of an
// instruction may overlap one of its inputs, except an output that is the very same buffer
// as an input: an in-place update of a parameter or optimizer state, which the kernel reads
// and writes at each work item's own element through ordinary loads and stores).
// Launch: blockDim = (gpu_block, 1, 1) exactly (the PTX declares .reqntid and the kernels'
// loops and reductions assume it), no dynamic shared memory (what a kernel uses is static,
// declared in the PTX), gridDim = (G, 1, 1) with G >= 1. Every G is correct, because the
// kernels loop over their work (grid-stride); the grid to launch, with n = end - begin:
//   Thread: G = min(ceil(n / (4 * gpu_block)), 32 * multiprocessors) (each thread takes 4
//           consecutive work items per step where it can);
//   Block:  G = min(n, 32 * multiprocessors) (block b takes work items begin + b,
//           begin + b + G, ...; its threads cooperate through shuffles and shared memory).
// Alignment contract: the runtime passes buffer addresses that are at least 16-byte aligned
// (its device allocator and arena offsets give 256). A Thread kernel uses 128-bit loads and
// stores (ld/st.global.v4) for the buffers it reads or writes at the work item's own index
// when they are 16-byte aligned and begin is a multiple of 4; it checks both at run time and
// otherwise takes 32-bit accesses, so breaking the contract is slower, never wrong.
struct CodeletDesc {
  std::string name;           // e.g. "k12_add"; shown by profiles
  HostCodeletFn host = nullptr;
  std::string source;         // the kernel's host IR text (body and loop), for dumps
  // The kernel's GPU launch configuration (see the ABI above); the PTX entry point has the
  // same name.
  GpuMapping gpu_mapping = GpuMapping::Thread;
  uint32_t gpu_block = 256;   // threads per block, a multiple of 32 in [32, 1024]
  uint32_t nodes = 1;         // IR nodes fused into this kernel (1: unfused)
  // What the machine code was compiled for; the plan checker holds every instruction that
  // runs the kernel to it (runtime/session/plan_check.cc), so that an instruction cannot
  // hand the kernel buffers, sizes or an extent it was not built for (constant dims are
  // baked into the code). Operands are the instruction's inputs then outputs.
  std::vector<ElemType> operand_types;
  std::vector<std::vector<SizeExpr>> operand_shapes;
  uint32_t inputs = 0;            // how many of the operands are inputs
  std::vector<SizeExpr> sizes;    // the size table
  SizeExpr extent;                // the number of work items
};

constexpr uint32_t kNoBuffer = UINT32_MAX;

// Library epilogues: a matmul or conv2d library instruction may carry
//   ints["epilogue"] = {bias, activation}
// and then writes act(op(inputs) + bias) instead of op(inputs), as a cuBLASLt epilogue
// (CUBLASLT_EPILOGUE_BIAS, _RELU_BIAS, _GELU_BIAS for the tanh form, ...) or a oneDNN bias
// and eltwise post-op would.
//  - bias: 0 or 1. With 1 the instruction has one more input after the op's own inputs
//    (matmul: a, b; conv2d: x, w and its own optional bias slot, kNoBuffer when absent,
//    then the epilogue bias): an f32 vector of one value per element of the output's last
//    dim (matmul) or per output channel (conv2d), stored contiguously (shape [L] or L with
//    dims of 1 around it, e.g. [L,1,1] for a conv2d bias). A conv2d with a bias of its own
//    takes no epilogue bias.
//  - activation: an EpilogueActivation code, applied after the bias. Its numerics are the
//    compiler's scalar definition of the same op (compiler/ir/ops/scalar_defs.cc).
// Instructions without the attribute have no epilogue.
enum class EpilogueActivation : int64_t {
  None = 0,
  Relu = 1,      // max(x, 0), NaN propagates
  GeluErf = 2,   // 0.5 x (1 + erf(x / sqrt 2))           (gelu, approximate = "none")
  GeluTanh = 3,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (approximate = "tanh")
  Tanh = 4,
  Sigmoid = 5,   // 1 / (1 + e^-x)
};
constexpr int64_t kEpilogueActivations = 6;  // valid codes: [0, kEpilogueActivations)

inline const char* epilogue_activation_name(EpilogueActivation a) {
  switch (a) {
    case EpilogueActivation::None: return "none";
    case EpilogueActivation::Relu: return "relu";
    case EpilogueActivation::GeluErf: return "gelu";
    case EpilogueActivation::GeluTanh: return "gelu_tanh";
    case EpilogueActivation::Tanh: return "tanh";
    case EpilogueActivation::Sigmoid: return "sigmoid";
  }
  return "?";
}

struct Instr {
  enum class Kind : uint8_t { Codelet, Library } kind = Kind::Codelet;
  uint32_t codelet = 0;                // Codelet: index into Program::codelets
  std::string op;                      // Library: the library op ("matmul", "conv2d", ...)
  std::vector<uint32_t> inputs;        // buffer ids (kNoBuffer: an absent optional input)
  std::vector<uint32_t> outputs;       // buffer ids
  std::vector<SizeExpr> sizes;         // Codelet: its size table
  SizeExpr extent;                     // Codelet: the number of work items
  int64_t grain = 1;                   // Codelet: the smallest chunk of work items worth a thread
  std::map<std::string, std::vector<int64_t>> ints;  // Library: attributes
  std::map<std::string, double> floats;              // Library: attributes
  std::string where;                   // source location "models/x.model:12:5", for messages
  // Streams (Function::streams; the semantics are under Function): the stream this
  // instruction runs on, the events it waits for before it starts, and the events it
  // records once it has finished.
  uint32_t stream = 0;
  std::vector<uint32_t> waits;
  std::vector<uint32_t> records;
};

// One feed slot of a function: micro-batch `micro` of the caller's input `name` (the
// caller's batch is split along dim 0 into Function::micro_batches equal parts).
struct Feed {
  std::string name;
  uint32_t micro = 0;
  uint32_t buffer = kNoBuffer;
};

struct Function {
  std::string name;  // "train_step", "eval"
  std::vector<Instr> instrs;
  std::vector<Feed> feeds;
  uint32_t micro_batches = 1;
  std::vector<std::pair<std::string, uint32_t>> outputs;  // "loss", "logits", ...
  // (new value, persistent buffer) copied after the instructions ran; equal when the
  // step wrote the new value in place (then nothing is copied).
  std::vector<std::pair<uint32_t, uint32_t>> updates;
  // Streams and events (docs/streams.md). The default, 1 stream and 0 events, is the
  // sequential run: the instructions in list order.
  //  - A stream runs its instructions (those with Instr::stream == s) one after another in
  //    list order; instruction i+1 of a stream starts after instruction i finished (on a GPU:
  //    both launched on one CUDA stream). Streams run concurrently with each other.
  //  - An event is a one-shot flag of one run, in [0, events): exactly one instruction
  //    records it (Instr::records), once it has finished and its writes are visible; an
  //    instruction that lists it in Instr::waits starts only after that (on a GPU: a CUDA
  //    event recorded after the launch, cuStreamWaitEvent before the waiter's launch). The
  //    recorder comes before every waiter in the list, so the list order is always a valid
  //    sequential schedule (the memory plan's liveness is over it). An event no one records
  //    is an error; one no one waits for is allowed.
  //  - The run begins with every stream starting after the feeds and persistent buffers are
  //    in place (on a GPU: a fork from the caller's stream) and ends with a join: the
  //    updates are copied and the outputs read after every stream has finished.
  //  - Everything else may overlap: the schedule must order every pair of instructions that
  //    touch one buffer where one of them writes (runtime/execution/streams.h checks it). Arena
  //    reuse between buffers is the runtime's business: when it lays out the temps it adds
  //    the waits their shared bytes need (runtime/execution/streams.h, arena_hazards).
  uint32_t streams = 1;
  uint32_t events = 0;
};

// The training settings of the model's `train` section, for the runtime's loop.
struct DataSpec {
  std::string kind;  // "idx", "csv", "text", "tokens"
  std::map<std::string, std::string> strs;
  std::map<std::string, int64_t> ints;  // bools as 0/1
  std::map<std::string, double> floats;
};

// The learning rate of each step (docs/language.md, "The train section"). Every kind but
// onecycle may start with `warmup` steps of linear warm-up, lr * (step + 1) / warmup, and
// continues from lr after them; k below counts the steps after the warm-up, n is the run's
// length (total) less the warm-up. As torch.optim.lr_scheduler's:
//   constant     lr
//   step         lr * gamma^(step / every)                              (StepLR)
//   cosine       min_lr + (lr - min_lr) (1 + cos(pi k / n)) / 2          (CosineAnnealingLR)
//   linear       lr (1 + (end_factor - 1) min(k, n - 1) / (n - 1)): end_factor * lr at the
//                last step                                               (LinearLR)
//   exponential  lr * gamma^k                                            (ExponentialLR)
//   polynomial   lr (1 - min(k, n) / n)^power: 0 one step after the end  (PolynomialLR)
//   onecycle     OneCycleLR with cosine annealing and no momentum cycling: from
//                lr / div_factor up to lr over pct_start * total - 1 steps, then down to
//                lr / div_factor / final_div_factor at the last step (lr is the peak)
//   plateau      lr, times the factor ReduceLROnPlateau has reached on the watched
//                held-out metric (runtime/base/metric_watch.h; Session::set_lr_factor)
// A held-out metric watched across evaluations: the plateau schedule's and early
// stopping's (docs/language.md, "Watching a held-out metric"). An evaluation improves on the
// best so far when it is better by more than `threshold` (times the best when relative).
struct MetricWatch {
  std::string metric;     // "": nothing watched; "loss", "accuracy" or a scalar output's name
  bool maximize = false;  // mode "max": larger is better
  int64_t patience = 0;   // evaluations without an improvement that are tolerated
  double threshold = 0.0;
  bool relative = false;  // threshold_mode "rel" (the plateau schedule's default)
  bool on() const { return !metric.empty(); }
};

struct Schedule {
  std::string kind = "constant";  // one of schedule_kinds()
  double lr = 1e-3;
  int64_t warmup = 0;   // linear warm-up steps (every kind but onecycle)
  int64_t every = 0;    // step: decay period in steps
  double gamma = 0.1;   // step, exponential: decay factor
  double min_lr = 0.0;  // cosine: the floor
  double end_factor = 0.0;  // linear: the last step's lr / lr
  double power = 1.0;       // polynomial: the exponent
  double pct_start = 0.3, div_factor = 25.0, final_div_factor = 1e4;  // onecycle
  double factor = 0.1;   // plateau: the learning rate's factor at each reduction
  int64_t cooldown = 0;  // plateau: evaluations after a reduction that are not counted
  MetricWatch watch;     // plateau: what it watches (min_lr is its floor)
  // The learning rate for 0-based step `step` of `total` steps.
  double lr_at(int64_t step, int64_t total) const;
  // Whether the curve depends on the run's length (a resume into another length would
  // follow another curve): cosine, linear, polynomial, onecycle.
  bool depends_on_length() const;
};

// The schedule kinds the runtime knows, in the order docs/language.md lists them.
const std::vector<std::string>& schedule_kinds();

struct TrainSettings {
  std::optional<DataSpec> data;
  std::string optimizer;  // "sgd", "adam", "adamw", "rmsprop", "adagrad", "lion", "adafactor"
  Schedule schedule;
  int64_t batch = 32, epochs = 0, steps = 0, seed = 0, accumulate = 1, eval_every = 0;
  double validation = 0.0;  // fraction held out when the data has no test split
  double clip_grad_norm = 0.0;  // 0: off
  MetricWatch early_stopping;   // metric "": off
};

struct Program {
  std::string model;
  // Symbols sizes and kernels depend on: the model's free dims (e.g. "B"), bound from the
  // shapes of the fed inputs, then "$seed" and "$step", bound by the session.
  std::vector<std::string> symbols;
  std::vector<BufferDesc> buffers;
  std::vector<CodeletDesc> codelets;
  std::vector<Function> functions;
  TrainSettings train;
  // The kernels compiled for NVPTX (one module, every kernel an entry point), and the
  // target it was compiled for ("sm_80"); empty when the Program has no GPU code.
  std::string ptx, ptx_target;
  std::shared_ptr<void> code;  // keeps the kernels' machine code alive

  const Function* function(const std::string& name) const;
  std::optional<uint32_t> symbol_id(const std::string& name) const;
};

// Fills every kernel's contract (CodeletDesc::operand_types, ...) from the instruction that
// runs it: what the instruction gives the kernel is what it was compiled for. The code
// generator calls it last; so does anyone who builds a Program by hand. Throws RuntimeError
// when two instructions run one kernel with different operands, sizes or extents.
void record_kernel_contracts(Program& p);

}  // namespace modelc::rt

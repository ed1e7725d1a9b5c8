// The memory report: a function's predicted peak memory, before anything runs.
//
// Reads: a lowered Program (runtime/base/program.h), which graph value each of its buffers
// holds (LowerOptions::buffer_values) and those graphs. Uses the runtime's own memory plan
// (runtime/execution/memory_plan.h), so the predicted arena is the one the runtime allocates.
//
// The peak is parameters + optimizer state + the function's inputs + its arena, as the
// runtime's caching allocator holds it (rounded, runtime/device/memory/caching_allocator.h). The
// breakdown splits the bytes live at the instruction where the most are live into
// gradients (the parameters' gradients, named `grad P` by the train step), activations
// (values of the forward pass: ancestors of the loss), backward temporaries (every other
// value of the backward pass and the update, recomputed activations included) and
// workspace (two-phase reductions' partials); the arena block's excess over that instant is
// its fragmentation (placement gaps and the allocator's rounding). Library ops' own scratch (OpenBLAS, oneDNN) is outside the plan on the
// CPU.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/passes/recompute_placement.h"
#include "runtime/base/bytes.h"
#include "runtime/execution/memory_plan.h"
#include "runtime/base/program.h"

namespace modelc {

// Buffers (a model's non-trained state) are listed only where a model has some.
enum class MemKind : uint8_t { Parameters, Buffers, OptimizerState, Gradients, Activations, Temporaries, Workspace, Inputs };
constexpr int kMemKinds = 8;
const char* mem_kind_name(MemKind k);  // "parameters", "optimizer state", ...

struct BufferOrigin {
  MemKind kind = MemKind::Temporaries;
  std::string what;   // the producing op and value ("gelu %41"), or the buffer's name
  std::string where;  // the source line of the producing node ("models/x.model:12:5"), or empty
};

// One origin per buffer of `p`. `values` is LowerOptions::buffer_values; `graphs` the
// lowered graphs by function name; `describe` formats source locations (may be empty).
std::vector<BufferOrigin> buffer_origins(const rt::Program& p,
                                         const std::vector<std::pair<std::string, Value>>& values,
                                         const std::map<std::string, const Graph*>& graphs,
                                         const std::function<std::string(SourceLoc)>& describe);

struct MemoryPrediction {
  std::string function;
  std::vector<int64_t> symbols;   // the values the prediction was made under
  int64_t peak = 0;               // params + states + inputs + the arena's allocator block
  int64_t arena_block = 0;        // the arena as the runtime's caching allocator holds it
  int64_t persistent = 0;         // params + states
  int64_t inputs = 0;
  rt::ArenaPlan plan;
  std::array<int64_t, kMemKinds> at_peak{};  // bytes by kind at plan.peak_instr, persistent included
  int64_t fragmentation = 0;      // arena_block - plan.lower_bound (placement gaps, allocator rounding)
};

// Throws UserError when a size depends on a symbol `symbols` leaves unbound. `origins` may be
// empty when only the peak matters (the breakdown then counts every arena buffer as a
// backward temporary).
MemoryPrediction predict_memory(const rt::Program& p, const std::string& function,
                                const std::vector<BufferOrigin>& origins, const std::vector<int64_t>& symbols);

// The values of the Program's symbols for a prediction: `bindings` by name, "$seed" and
// "$step" 0, the batch symbol (batch_symbol) the train section's batch / accumulate when
// not bound and the Program has a train step; others stay unbound (INT64_MIN), which predict_memory reports. Throws
// UserError for a binding the Program has no symbol for.
std::vector<int64_t> bind_symbols(const rt::Program& p, const std::string& function,
                                  const std::map<std::string, int64_t>& bindings);
// The same, by name, for the bound ones (what recomputation placement sizes tensors with).
std::map<std::string, int64_t> bound_dims(const rt::Program& p, const std::vector<int64_t>& symbols);

// The symbol the batch size binds: the first dim of the function's first fed input, when
// that dim is one symbol. None when the batch dim is a constant.
std::optional<uint32_t> batch_symbol(const rt::Program& p, const std::string& function);

// The largest value of `symbol` (others as in `symbols`) whose predicted peak is at most
// `memory` bytes, and that peak; nullopt when even 1 does not fit. Searches up to 2^40.
std::optional<std::pair<int64_t, int64_t>> largest_fitting(const rt::Program& p, const std::string& function,
                                                           const std::vector<BufferOrigin>& origins,
                                                           std::vector<int64_t> symbols, uint32_t symbol, int64_t memory);

struct MemoryReportOptions {
  std::optional<int64_t> memory;  // --memory: also report the largest batch that fits
  size_t top = 10;                // how many of the largest buffers to list
};

// The text of `modelc --emit=memory` for one prediction.
std::string print_memory_report(const rt::Program& p, const std::vector<BufferOrigin>& origins,
                                const MemoryPrediction& m, const MemoryReportOptions& o);

// The checkpoint part of `modelc --emit=memory`: the algorithm, the budget, what is
// recomputed (the `top` largest) with its cost, and the peak before and after (`peak`:
// the exact prediction of the compiled step).
std::string print_recompute_report(const RecomputeReport& r, int64_t peak, size_t top = 10);

}  // namespace modelc

// `modelrun bench --compare-fusion FILE...`: each model is compiled twice in process, with
// kernel fusion on and off (ProgramOptions::fusion), and both Programs run the same steps
// on the same random batches from the same initial state (two Sessions, one seed). Printed
// per model and function (train_step, and eval as the forward pass): the median time per
// step, kernels and library calls per step, bytes moved per step, the achieved GB/s and
// its share of a STREAM-like triad measured on the same thread pool, the fused-vs-unfused
// speedup, and the largest difference between the two (the loss of every step, then every
// parameter and optimizer state; eval: every output). docs/performance.md ("Fused vs
// unfused") gives the definitions and the measured tables.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/device/cpu/thread_pool.h"
#include "runtime/base/program.h"
#include "tools/modelrun/commands.h"

namespace modelrun {

// Runs the comparison and prints its table; returns the process exit status (errors are
// printed as "modelrun: error: ...").
int run_fusion_bench(const BenchOptions& o);

// What one call of a function does, read off the Program: instructions by kind, the IR
// nodes its kernels fused, and the bytes it moves when every operand of every instruction
// is read or written once from memory (a machine without caches): the sum over
// instructions of the bytes of each input and output buffer (an operand named twice counts
// twice), plus the executor's copies of the updates into the parameters and optimizer state
// and of the returned outputs (each read once and written once). Sizes are evaluated
// under `symbol_values` (Program::symbols order); an unbound symbol a size needs is an error.
struct FunctionCost {
  int64_t codelets = 0, library_calls = 0, codelet_nodes = 0;
  double bytes = 0;
};
FunctionCost function_cost(const modelc::rt::Program& p, const modelc::rt::Function& fn,
                           std::span<const int64_t> symbol_values);

// A STREAM-like triad a[i] = b[i] + s * c[i] over three arrays of n floats, run with
// `pool`'s parallel_for (each thread touches its own range first), best of `repetitions`;
// returns GB/s counting 3 * 4 * n bytes per pass (the write-allocate read of `a` is not
// counted, as in STREAM).
double triad_gbps(modelc::rt::ThreadPool& pool, int64_t n, int repetitions);

}  // namespace modelrun

// What every executor (runtime/cpu, runtime/cuda) does before it runs a Function, whatever the
// device: check the Function against its Program (buffer ids, kernels, feeds, updates), bind
// the Program's symbols from the shapes of the fed inputs (a dim that is a single symbol with
// coefficient 1 binds it; every other dim must then evaluate equal) and from the caller's
// named values ("$seed", "$step"), and, when the values change, evaluate every used buffer's
// shape, each kernel's size table and extent, and the static memory plan of the arena
// (runtime/execution/memory_plan.h). Every error is a RuntimeError "function 'NAME': ...".
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/execution/memory_plan.h"
#include "runtime/base/program.h"
#include "runtime/base/tensor.h"

namespace modelc::rt {

class FunctionLayout {
 public:
  // Checks the function; `plan_arena`: lay temps and outputs out in one arena (else each
  // executor allocates them itself).
  FunctionLayout(const Program& program, const Function& fn, bool plan_arena);

  [[noreturn]] void fail(const std::string& msg) const;

  // Binds the symbols for a run: `feeds` holds one tensor per Function::feeds slot (a null
  // pointer is a missing feed), checked against the buffers' types and shapes. Returns true
  // when the symbol values changed (or on the first call) and the layout was made anew.
  bool bind(std::span<const HostTensor* const> feeds, const std::map<std::string, int64_t>& symbols);

  // Whether the function touches buffer b (an input, output, temp, parameter or state).
  bool used(uint32_t b) const { return used_[b]; }
  // Under the current binding:
  const std::vector<int64_t>& shape(uint32_t b) const { return shapes_[b]; }
  size_t bytes(uint32_t b) const;  // numel * element size; throws on overflow
  const std::vector<int64_t>& sizes(size_t instr) const { return sizes_[instr]; }
  int64_t extent(size_t instr) const { return extents_[instr]; }
  const ArenaPlan& plan() const { return plan_; }
  const std::vector<int64_t>& values() const { return values_; }
  int64_t layouts() const { return layouts_; }
  const Function& function() const { return fn_; }
  const Program& program() const { return program_; }

  // The name of feed slot i for messages: "'x'" or "'x' (micro-batch 1)".
  std::string feed_name(size_t i) const;

 private:
  void lay_out();

  const Program& program_;
  const Function& fn_;
  bool plan_arena_;
  std::vector<bool> used_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::vector<int64_t>> sizes_;
  std::vector<int64_t> extents_;
  std::vector<int64_t> values_;
  ArenaPlan plan_;
  bool laid_out_ = false;
  int64_t layouts_ = 0;
};

}  // namespace modelc::rt

// The static memory plan of a function: when each of its buffers is live, and where in one
// arena each temporary lives.
//
// Shared by the compiler (which predicts a step's peak memory before anything runs,
// `modelc --emit=memory`) and the runtime (which lays out every Temp and Output buffer of
// a function at these offsets in one allocation): both call the same functions on the
// same Program, so the prediction is the layout the runtime uses.
//
// Liveness is over the instruction list, which is the schedule. A Temp or Output buffer
// is live from the first instruction that writes it to the last one that reads it, both
// inclusive, so a buffer never shares memory with another buffer of the same instruction
// (the kernel ABI forbids an output overlapping an input, runtime/base/program.h). Outputs and
// the new values of updates stay live to the end of the function (index = instrs.size()):
// the caller copies them out after the last instruction. Inputs, parameters and optimizer
// state are not in the arena.
//
// Placement is greedy (Pisarchyk and Lee, 2020, "Efficient memory management for deep
// neural net inference", the strategies of TensorFlow Lite's arena planner): buffers in
// some order, each at the best-fitting gap between the buffers already placed whose
// lifetimes overlap its own (the smallest gap it fits in, else on top). It tries three
// orders and keeps the smallest arena: by size (big buffers first leave gaps the many
// small ones fill), by breadth (size x lifetime) and by power-of-two size class in
// schedule order (memory_plan.cc says when each wins). Optimal placement is NP-hard
// (dynamic storage allocation); the arena is compared against the lower bound no
// placement can beat, the largest sum of bytes live at one instruction, and the memory
// report prints the gap.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/base/program.h"

namespace modelc::rt {

// Arena offsets and sizes are multiples of this (the GPU ABI's alignment contract asks for
// at least 16 bytes; 256 is what cudaMalloc gives and what vector loads like best).
constexpr int64_t kArenaAlignment = 256;

struct BufferLife {
  uint32_t buffer = kNoBuffer;
  int64_t bytes = 0;      // the buffer's size, rounded up to kArenaAlignment (at least one unit)
  uint32_t first = 0;     // the first instruction that writes it
  uint32_t last = 0;      // the last instruction that reads it (inclusive)
};

struct ArenaPlan {
  std::vector<int64_t> offset;   // by buffer id; -1 for buffers outside the arena
  std::vector<BufferLife> lives; // the arena's buffers, in buffer-id order
  int64_t size = 0;              // the arena's bytes
  int64_t lower_bound = 0;       // the largest sum of bytes live at one instruction
  uint32_t peak_instr = 0;       // an instruction where that sum is reached
  // Bytes of arena buffers live at instruction i (i in [0, instrs.size()]).
  std::vector<int64_t> live_bytes;
};

// The exact byte size of buffer `b` under `symbols` (Program::symbols order); throws
// RuntimeError when a dim depends on an unbound symbol, is negative or overflows.
int64_t buffer_bytes(const Program& p, uint32_t b, std::span<const int64_t> symbols);

// The lifetimes of the function's Temp and Output buffers. A buffer written but never read
// lives at its writer only. Buffers the function never writes are left out.
std::vector<BufferLife> buffer_lives(const Program& p, const Function& fn, std::span<const int64_t> symbols);

// Places the buffers (greedy by size, above). Offsets of buffers whose lives overlap never
// overlap; `offset` has `buffer_count` entries.
ArenaPlan plan_arena(std::vector<BufferLife> lives, size_t buffer_count, uint32_t instr_count);

// buffer_lives then plan_arena.
ArenaPlan plan_function_memory(const Program& p, const Function& fn, std::span<const int64_t> symbols);

// Checks a plan's one promise: no two buffers with overlapping lives overlap in memory, and
// all lie inside the arena. Returns the first violation, or an empty string.
std::string check_arena(const ArenaPlan& plan);

}  // namespace modelc::rt

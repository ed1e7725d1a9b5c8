// Streams and events of a Function, device-neutral (the semantics: Function in
// runtime/base/program.h; the design: docs/streams.md).
//
// Reads a Function's stream fields and guarantees nothing about them by itself: it checks
// them (structure, then data races over the buffers), answers "does instruction a finish
// before instruction b starts in every run" (StreamOrder), and computes the extra waits that
// an arena layout needs when buffers with disjoint lifetimes share bytes (arena_hazards).
// The CPU executor (runtime/execution/cpu/streams.h), a GPU executor and the compiler's schedule pass
// (compiler/lowered/schedule.h) all use these, so they agree on what a schedule means.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/execution/memory_plan.h"
#include "runtime/base/program.h"

namespace modelc::rt {

// The structure of a function's streams: streams >= 1, every Instr::stream < streams, every
// event id < events, every event recorded by exactly one instruction, every waiter after its
// recorder in the list (so no instruction waits for an event it records). Returns the first
// problem ("instruction 7 waits for event 3, which instruction 9 records after it") or "".
std::string check_stream_structure(const Function& fn);

// The happens-before relation of a function's schedule: a -> b when a finishes before b
// starts in every run (stream order and events, transitively). The function's structure
// must be valid (check_stream_structure). Memory: n^2 bits for n instructions.
class StreamOrder {
 public:
  // `extra` adds edges (a, b), a < b, as extra waits would (e.g. arena_hazards' own).
  explicit StreamOrder(const Function& fn, const std::vector<std::pair<uint32_t, uint32_t>>& extra = {});
  // a finishes before b starts (false for a == b and for a > b).
  bool before(uint32_t a, uint32_t b) const {
    return a < b && (bits_[static_cast<size_t>(b) * words_ + a / 64] >> (a % 64) & 1);
  }
  size_t size() const { return n_; }

 private:
  size_t n_ = 0, words_ = 0;
  std::vector<uint64_t> bits_;  // row b: the instructions that finish before b starts
};

// Every pair of instructions that touch one buffer, one of them writing it (an output, or
// an in-place update: the same buffer as input and output), must be ordered. Returns the
// first unordered pair as a message naming both instructions and the buffer, or "".
std::string check_stream_races(const Program& p, const Function& fn, const StreamOrder& order);

// The dependencies an arena layout adds: when buffer B2 takes bytes that buffer B1 held
// earlier in the list (their lives are disjoint, runtime/execution/memory_plan.h), the first writer
// of B2 must start after every instruction that read or wrote B1. Returns the pairs
// (earlier, later) not already implied by `order`, at most one per (later, stream of
// earlier): the last such instruction on that stream implies the ones before it. Sorted.
std::vector<std::pair<uint32_t, uint32_t>> arena_hazards(const Function& fn, const ArenaPlan& plan,
                                                         const StreamOrder& order);

// A function's events plus the ones a set of extra dependencies needs: per instruction the
// events it waits for and records (its own first), and the total count. An extra pair
// (a, b), a < b, reuses an event that a already records, else a new one (one per
// recorder); other pairs are ignored.
struct StreamEvents {
  uint32_t events = 0;
  std::vector<std::vector<uint32_t>> waits, records;  // by instruction
};
StreamEvents with_extra_waits(const Function& fn, const std::vector<std::pair<uint32_t, uint32_t>>& extra);

}  // namespace modelc::rt

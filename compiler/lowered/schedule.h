// Stream scheduling: the instructions of a lowered function spread over streams, with the
// events their dependencies need (the semantics: Function in runtime/base/program.h; the design:
// docs/streams.md).
//
// Reads a lowered rt::Function (buffer ids known). The dependencies are the buffer accesses
// in list order: read-after-write, write-after-read and write-after-write on every buffer,
// persistent ones included (an in-place update reads and writes its buffer); the
// function's updates and outputs are read at its end, after the join of all streams, so
// they add none. Guarantees: the instruction list and its order are unchanged (so is the
// memory plan, runtime/execution/memory_plan.h); every dependency is ordered by stream order or
// events; and the events are minimal: an instruction waits for an event only when no other
// path (its stream's earlier instructions, its other waits, transitively) already orders
// the dependency. Arena reuse between buffers is not a dependency here: the runtime adds
// those waits when it lays the arena out (rt::arena_hazards).
//
// The heuristic is list scheduling with unit costs, in list order: an instruction goes to
// the stream where it can start first (when all its dependencies have finished and the
// stream is free); among equals, the stream whose last instruction it depends on (a
// dependent chain stays on one stream), then the lowest. Independent work (the weight and
// input gradients of a matmul, parallel branches) thereby lands on other streams.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/program.h"

namespace modelc {

// The direct dependencies of each instruction: the earlier instructions it must follow
// (sorted, no duplicates), from the buffer accesses above.
std::vector<std::vector<uint32_t>> instruction_deps(const rt::Program& p, const rt::Function& fn);

struct ScheduleStats {
  uint32_t streams = 1;     // streams used (at most the number asked for)
  uint32_t events = 0;      // events placed
  size_t dependencies = 0;  // direct dependencies
  size_t cross = 0;         // of them, between different streams
};

// Assigns fn's instructions to at most `streams` streams (>= 1) and places the events,
// replacing any schedule fn had. streams == 1: everything on stream 0, no events.
ScheduleStats schedule_streams(const rt::Program& p, rt::Function& fn, uint32_t streams);

// Checks a function's schedule: its structure, every dependency ordered, and (minimal)
// no wait that could be removed with every dependency still ordered. Returns the first
// problem, or "".
std::string verify_schedule(const rt::Program& p, const rt::Function& fn, bool minimal = true);

}  // namespace modelc

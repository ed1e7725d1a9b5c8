// `modelrun bench --profile`: where a step's time goes, per kernel and library call, from
// Session::profile (CPU: the wall time of each instruction; CUDA: events on its stream).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/execution/instr_time.h"
#include "runtime/session/session.h"

namespace modelrun {

// The `top` instructions by total time (0: all), one row each: the kernel or library op,
// how many IR nodes it fuses, its .model source line, calls per step, ms per step, its share
// of `step_ms` (the profiled step's wall time), the bytes it reads and writes and the rate
// that makes; then a line with the instructions' sum against the step.
std::string profile_table(const std::vector<modelc::rt::cuda::InstrTime>& prof, double step_ms, int64_t top);

// Runs `steps` train steps of `s` with profiling on (each fed by `next`), and returns their
// table (profile_table against their mean wall time).
std::string profile_steps(modelc::rt::Session& s, int64_t steps, int64_t top,
                          const std::function<std::map<std::string, modelc::rt::HostTensor>()>& next);

}  // namespace modelrun

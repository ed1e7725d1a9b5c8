// Internal to .plan files (runtime/session/plan.h): the encoding of the 'program' section.
//
// Little-endian throughout. Primitives: u8, u32, i64/u64, f64 (the IEEE bits as u64),
// str (u32 length + bytes), list (u32 count + items). The layout, in order:
//   program  := str model, list<str> symbols, list<buffer> buffers, list<kernel> kernels,
//               list<function> functions, train, str ptx_target, target
//   size     := list<term>; term := i64 coef, list<u32> symbols
//   buffer   := str name, u8 type, u8 role, u8 init.kind, f64 init.a, f64 init.b, list<size> shape,
//               str where
//   kernel   := str name, str source, u8 gpu_mapping, u32 gpu_block, u32 nodes,
//               list<(u8 type, list<size> shape)> operands, u32 inputs, list<size> sizes,
//               size extent   (the contract: runtime/base/program.h, CodeletDesc)
//   function := str name, u32 micro_batches, list<instr>, list<feed>, list<(str, u32)> outputs,
//               list<(u32, u32)> updates
//   instr    := u8 kind, u32 kernel, str op, list<u32> inputs, list<u32> outputs, list<size> sizes,
//               size extent, i64 grain, list<(str, list<i64>)> ints, list<(str, f64)> floats, str where
//   feed     := str name, u32 micro, u32 buffer
//   train    := u8 has_data [str kind, list<(str, str)>, list<(str, i64)>, list<(str, f64)>],
//               str optimizer, str schedule.kind, f64 lr, i64 warmup, i64 every, f64 gamma,
//               f64 min_lr, f64 end_factor, power, pct_start, div_factor, final_div_factor
//               (version 3), i64 batch, epochs, steps, seed, accumulate, eval_every,
//               f64 validation, f64 clip_grad_norm
//   target   := str arch, str cpu, list<str> features
//   [streams] := u32 "STRM", list<fstreams> (one per function, in order); present only when
//               some function has more than one stream or any event (runtime/base/program.h)
//   fstreams := u32 streams, u32 events, list<istreams> (one per instruction, in order)
//   istreams := u32 stream, list<u32> waits, list<u32> records
//   [index]  := u32 "INDX", list<(u32 buffer, i64 limit, str note)>; present only when some
//               input has an index limit (BufferDesc::index_limit)
//   [ignore] := u32 "IGNR", list<(u32 buffer, i64 value)>; present only when some index input
//               accepts a value outside its range as "no index" (BufferDesc::index_ignore)
// Plans without the streams part load as one stream without events, the sequential run;
// without the index part, with no index limits; without the ignore part, ignoring nothing.
// The decoder checks every length against the bytes that remain (so no allocation exceeds
// the input), every enum value, and that the section ends exactly where the program does.
#pragma once

#include <string>
#include <string_view>

#include "runtime/session/plan.h"

namespace modelc::rt::plan_detail {

std::string encode_program(const Program& program, const PlanTarget& target);
// Throws RuntimeError("<what is wrong> at byte N") without the file's name.
void decode_program(std::string_view bytes, Program& program, PlanTarget& target);

// A name from a plan, fit for a message: control bytes (NUL among them) as \xNN, and at
// most 200 bytes.
std::string printable(std::string_view name);

}  // namespace modelc::rt::plan_detail

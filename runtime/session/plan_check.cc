// check_program (runtime/session/plan.h): what a Program must be for the runtime to run it
// without reading or writing outside a buffer, in three parts.
//  - Ids and values: every buffer, kernel and symbol id in range, enum values valid, names
//    present and unique, micro-batches and feeds that agree, the train settings valid.
//  - Kernels: every instruction that runs a kernel gives it exactly the operands (types
//    and shapes), the size table and the extent the kernel was compiled for
//    (CodeletDesc's contract). Library ops check their operands themselves when they run.
//  - Data flow, per function: inputs are fed, temps are written once before they are read,
//    parameters and optimizer state are written only in place, outputs are the buffers
//    named so and written, updates copy between buffers of one type and shape, each
//    persistent buffer at most once, and no temp, input or output is shared by two
//    functions.
// Every failure is a RuntimeError saying which function, instruction and buffer.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>

#include "runtime/base/error.h"
#include "runtime/base/train_rules.h"
#include "runtime/execution/streams.h"
#include "runtime/session/plan_codec.h"

namespace modelc::rt {

namespace {

using plan_detail::printable;

[[noreturn]] void fail(const std::string& msg) { throw RuntimeError(msg); }

void check_size(const Program& p, const SizeExpr& e, const std::string& what) {
  for (const SizeExpr::Term& t : e.terms)
    for (uint32_t s : t.symbols)
      if (s >= p.symbols.size()) fail(fmt::format("{} names symbol {}, but the program has {} symbols", what, s, p.symbols.size()));
}

void check_buffer_id(const Program& p, uint32_t b, const std::string& what, bool optional) {
  if (optional && b == kNoBuffer) return;
  if (b >= p.buffers.size()) fail(fmt::format("{} names buffer {}, but the program has {} buffers", what, b, p.buffers.size()));
}

std::string shape_of(const Program& p, ElemType t, const std::vector<SizeExpr>& shape) {
  std::string s;
  for (const SizeExpr& e : shape) s += (s.empty() ? "" : ",") + e.str(p.symbols);
  return fmt::format("{}[{}]", dtype_name(t), s);
}

std::string buffer_str(const Program& p, uint32_t b) {
  const BufferDesc& d = p.buffers[b];
  return fmt::format("buffer {} ('{}') {}", b, printable(d.name), shape_of(p, d.type, d.shape));
}

void check_buffers_and_kernels(const Program& p) {
  if (p.model.empty()) fail("the program has no model name");
  std::set<std::string> names;
  for (const std::string& s : p.symbols)
    if (s.empty() || !names.insert(s).second) fail(fmt::format("symbol '{}' is empty or appears twice", printable(s)));
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const BufferDesc& b = p.buffers[i];
    const std::string what = fmt::format("buffer {} ('{}')", i, printable(b.name));
    if (static_cast<uint8_t>(b.type) > static_cast<uint8_t>(ElemType::Bool)) fail(what + " has an invalid element type");
    if (static_cast<uint8_t>(b.role) > static_cast<uint8_t>(BufferRole::Buffer)) fail(what + " has an invalid role");
    if (static_cast<uint8_t>(b.init.kind) > static_cast<uint8_t>(Init::Kind::Constant))
      fail(what + " has an invalid initializer");
    if (b.role == BufferRole::State && (b.init.kind != Init::Kind::Zeros || b.init.a != 0 || b.init.b != 0))
      fail(what + " is optimizer state, which starts at zero, but has an initializer");
    for (size_t k = 0; k < b.shape.size(); ++k) check_size(p, b.shape[k], fmt::format("{}: dim {}", what, k));
    if (b.index_limit != 0 && (b.index_limit < 0 || b.role != BufferRole::Input || b.type != ElemType::I32))
      fail(fmt::format("{} has index limit {}, but only an i32 input may have one, and it must be positive", what, b.index_limit));
    if (b.index_ignore && (b.index_limit <= 0 || (*b.index_ignore >= 0 && *b.index_ignore < b.index_limit) ||
                           *b.index_ignore < std::numeric_limits<int32_t>::min() ||
                           *b.index_ignore > std::numeric_limits<int32_t>::max()))
      fail(fmt::format("{} ignores index {}, but an ignored index goes with an index limit ({}), outside [0, limit) and "
                       "within i32", what, *b.index_ignore, b.index_limit));
  }
  names.clear();
  for (size_t i = 0; i < p.codelets.size(); ++i) {
    const CodeletDesc& k = p.codelets[i];
    const std::string what = fmt::format("kernel {} ('{}')", i, printable(k.name));
    if (k.name.empty() || k.name.find('\0') != std::string::npos) fail(what + " has no valid name");
    if (!names.insert(k.name).second) fail(what + ": the name appears twice");
    if (static_cast<uint8_t>(k.gpu_mapping) > static_cast<uint8_t>(GpuMapping::Block))
      fail(what + " has an invalid GPU mapping");
    if (k.gpu_block == 0 || k.gpu_block % 32 != 0 || k.gpu_block > 1024)
      fail(fmt::format("{} has a GPU block of {} threads (not a multiple of 32 in [32, 1024])", what, k.gpu_block));
    if (k.nodes == 0) fail(what + " fuses no nodes");
    if (k.operand_types.size() != k.operand_shapes.size() || k.inputs > k.operand_types.size())
      fail(what + ": its contract's operands do not agree");
    for (size_t o = 0; o < k.operand_shapes.size(); ++o)
      for (const SizeExpr& e : k.operand_shapes[o]) check_size(p, e, fmt::format("{}: operand {}", what, o));
    for (const SizeExpr& e : k.sizes) check_size(p, e, what + ": its size table");
    check_size(p, k.extent, what + ": its extent");
  }
}

// The instruction gives its kernel what the kernel was compiled for.
void check_contract(const Program& p, const Instr& in, const std::string& what) {
  const CodeletDesc& k = p.codelets[in.codelet];
  const std::string kw = fmt::format("{} (kernel '{}')", what, printable(k.name));
  if (in.inputs.size() != k.inputs || in.inputs.size() + in.outputs.size() != k.operand_types.size())
    fail(fmt::format("{} has {} inputs and {} outputs, but the kernel was compiled for {} and {}", kw, in.inputs.size(),
                     in.outputs.size(), k.inputs, k.operand_types.size() - k.inputs));
  for (size_t o = 0; o < k.operand_types.size(); ++o) {
    const uint32_t b = o < in.inputs.size() ? in.inputs[o] : in.outputs[o - in.inputs.size()];
    const std::string want = shape_of(p, k.operand_types[o], k.operand_shapes[o]);
    if (b == kNoBuffer) fail(fmt::format("{}: operand {} is absent, but the kernel was compiled for {}", kw, o, want));
    const BufferDesc& d = p.buffers[b];
    if (d.type != k.operand_types[o] || d.shape != k.operand_shapes[o])
      fail(fmt::format("{}: operand {} is {}, but the kernel was compiled for {}", kw, o, buffer_str(p, b), want));
  }
  if (in.sizes != k.sizes) fail(fmt::format("{}: the size table differs from the one the kernel was compiled for", kw));
  if (in.extent != k.extent)
    fail(fmt::format("{}: the extent is {}, but the kernel was compiled for {}", kw, in.extent.str(p.symbols), k.extent.str(p.symbols)));
}

void check_instructions(const Program& p, const Function& f, const std::string& fn) {
  for (size_t i = 0; i < f.instrs.size(); ++i) {
    const Instr& in = f.instrs[i];
    const std::string what = fmt::format("{}: instruction {}{}", fn, i, in.where.empty() ? "" : " at " + printable(in.where));
    if (static_cast<uint8_t>(in.kind) > static_cast<uint8_t>(Instr::Kind::Library)) fail(what + " has an invalid kind");
    for (uint32_t b : in.inputs) check_buffer_id(p, b, what, true);
    for (uint32_t b : in.outputs) check_buffer_id(p, b, what, false);
    for (size_t k = 0; k < in.sizes.size(); ++k) check_size(p, in.sizes[k], fmt::format("{}: size {}", what, k));
    check_size(p, in.extent, what + ": the extent");
    if (in.kind == Instr::Kind::Codelet) {
      if (in.codelet >= p.codelets.size())
        fail(fmt::format("{} names kernel {}, but the program has {} kernels", what, in.codelet, p.codelets.size()));
      if (in.grain < 1) fail(fmt::format("{} has grain {}", what, in.grain));
      check_contract(p, in, what);
    } else if (in.op.empty()) {
      fail(what + " names no library op");
    }
  }
}

// Inputs fed, temps written once before they are read, persistent buffers written only in
// place, outputs named and written, updates between equal buffers.
void check_data_flow(const Program& p, const Function& f, const std::string& fn) {
  std::set<uint32_t> fed, written;
  for (const Feed& fd : f.feeds) {
    if (p.buffers[fd.buffer].role != BufferRole::Input)
      fail(fmt::format("{}: feed '{}' is {}, which is not an input", fn, printable(fd.name), buffer_str(p, fd.buffer)));
    fed.insert(fd.buffer);
  }
  for (size_t i = 0; i < f.instrs.size(); ++i) {
    const Instr& in = f.instrs[i];
    const std::string what = fmt::format("{}: instruction {}{}", fn, i, in.where.empty() ? "" : " at " + printable(in.where));
    for (uint32_t b : in.inputs) {
      if (b == kNoBuffer) continue;
      const BufferRole r = p.buffers[b].role;
      if (r == BufferRole::Input && !fed.count(b)) fail(fmt::format("{} reads {}, an input the function is not fed", what, buffer_str(p, b)));
      if ((r == BufferRole::Temp || r == BufferRole::Output) && !written.count(b))
        fail(fmt::format("{} reads {} before any instruction writes it", what, buffer_str(p, b)));
    }
    for (uint32_t b : in.outputs) {
      const BufferRole r = p.buffers[b].role;
      const bool in_place = std::find(in.inputs.begin(), in.inputs.end(), b) != in.inputs.end();
      if (r == BufferRole::Input) fail(fmt::format("{} writes {}, an input", what, buffer_str(p, b)));
      if (is_persistent(r) && !in_place)
        fail(fmt::format("{} writes {}, a persistent buffer, other than in place", what, buffer_str(p, b)));
      if ((r == BufferRole::Temp || r == BufferRole::Output) && (in_place || !written.insert(b).second))
        fail(fmt::format("{} writes {}, which {}", what, buffer_str(p, b), in_place ? "it also reads" : "an earlier instruction wrote"));
    }
  }
  for (const auto& [name, b] : f.outputs) {
    const BufferDesc& d = p.buffers[b];
    if (d.role != BufferRole::Output || d.name != name || !written.count(b))
      fail(fmt::format("{}: output '{}' is {}, which is not that output or is never written", fn, printable(name), buffer_str(p, b)));
  }
  std::set<uint32_t> targets;
  for (const auto& [from, to] : f.updates) {
    const BufferDesc &s = p.buffers[from], &d = p.buffers[to];
    if (!is_persistent(d.role))
      fail(fmt::format("{}: an update writes {}, which is not a parameter, buffer or optimizer state", fn, buffer_str(p, to)));
    if (!targets.insert(to).second) fail(fmt::format("{}: {} is updated twice", fn, buffer_str(p, to)));
    if (from != to && (!written.count(from) || s.role != BufferRole::Temp))
      fail(fmt::format("{}: the update of {} copies {}, which is not a temp the function computes", fn, buffer_str(p, to), buffer_str(p, from)));
    if (s.type != d.type || s.shape != d.shape)
      fail(fmt::format("{}: the update of {} copies {}, of another type or shape", fn, buffer_str(p, to), buffer_str(p, from)));
  }
}

void check_functions(const Program& p) {
  std::set<std::string> names;
  std::vector<int> owner(p.buffers.size(), -1);  // the one function a temp, input or output belongs to
  for (size_t fi = 0; fi < p.functions.size(); ++fi) {
    const Function& f = p.functions[fi];
    if (f.name.empty() || !names.insert(f.name).second) fail(fmt::format("function '{}' is unnamed or appears twice", printable(f.name)));
    const std::string fn = fmt::format("function '{}'", printable(f.name));
    if (f.micro_batches == 0) fail(fn + " has 0 micro-batches");
    check_instructions(p, f, fn);
    if (std::string e = check_stream_structure(f); !e.empty()) fail(fmt::format("{}: {}", fn, e));
    for (const Feed& fd : f.feeds) {
      check_buffer_id(p, fd.buffer, fmt::format("{}: feed '{}'", fn, printable(fd.name)), false);
      if (fd.micro >= f.micro_batches)
        fail(fmt::format("{}: feed '{}' is micro-batch {} of {}", fn, printable(fd.name), fd.micro, f.micro_batches));
    }
    for (const auto& [name, b] : f.outputs) check_buffer_id(p, b, fmt::format("{}: output '{}'", fn, printable(name)), false);
    for (const auto& [from, to] : f.updates) {
      check_buffer_id(p, from, fn + ": an update", false);
      check_buffer_id(p, to, fn + ": an update", false);
    }
    check_data_flow(p, f, fn);
    auto own = [&](uint32_t b) {
      if (b == kNoBuffer || is_persistent(p.buffers[b].role)) return;
      if (owner[b] >= 0 && owner[b] != static_cast<int>(fi))
        fail(fmt::format("{} is used by function '{}' and by {}", buffer_str(p, b), printable(p.functions[static_cast<size_t>(owner[b])].name), fn));
      owner[b] = static_cast<int>(fi);
    };
    for (const Instr& in : f.instrs) {
      for (uint32_t b : in.inputs) own(b);
      for (uint32_t b : in.outputs) own(b);
    }
    for (const Feed& fd : f.feeds) own(fd.buffer);
  }
}

}  // namespace

void check_program(const Program& p) {
  check_buffers_and_kernels(p);
  check_functions(p);
  const TrainSettings& t = p.train;
  const std::string& s = t.schedule.kind;
  const std::vector<std::string>& kinds = schedule_kinds();
  if (std::find(kinds.begin(), kinds.end(), s) == kinds.end())
    fail(fmt::format("the train settings name an unknown schedule '{}'", printable(s)));
  if (std::optional<std::string> e = check_train_settings(t)) fail(fmt::format("the train settings: {}", *e));
  if ((s == "plateau") != t.schedule.watch.on())
    fail(s == "plateau" ? "the plateau schedule watches no metric" : "a schedule other than plateau watches a metric");
  if (!p.ptx.empty() && p.ptx_target.empty()) fail("the program has PTX but no PTX target");
}

}  // namespace modelc::rt

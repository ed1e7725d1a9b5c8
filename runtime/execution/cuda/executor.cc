#include "runtime/execution/cuda/executor.h"

#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "kernels/cuda/errors.h"
#include "runtime/device/cuda/cuda_device.h"
#include "kernels/cuda/library.h"

namespace modelc::rt::cuda {
namespace {

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

}  // namespace

size_t DeviceTensor::bytes() const {
  size_t n = dtype_bytes(type);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string cuda_unsupported(const Program& program) {
  bool kernels = false;
  for (const Function& fn : program.functions)
    for (const Instr& in : fn.instrs) {
      if (in.kind == Instr::Kind::Codelet) kernels = true;
      else if (find_cuda_library_op(in.op) == nullptr)
        return fmt::format("library op '{}' at {} has no CUDA implementation", in.op, in.where.empty() ? "<unknown location>" : in.where);
    }
  if (kernels && program.ptx.empty()) return "the program has no GPU code (compile it with a GPU target, e.g. modelc --target sm_80)";
  return "";
}

// What a run holds until it is finished.
struct CudaRun::State {
  CudaExecutor* exec = nullptr;
  CudaDevice* device = nullptr;
  std::vector<void*> blocks;  // device: inputs, tables
  struct Output {
    std::string name;
    HostTensor host;
    void* pinned = nullptr;
  };
  std::vector<Output> outputs;
  CUevent done = nullptr;
  kernels::cuda::KernelErrorReadback errors;
  bool finished = false;

  // A device block for this run, used on `stream` (and recorded on stream 0 when another).
  uint8_t* take(size_t bytes, const std::string& what, CUstream stream) {
    void* p = nullptr;
    try {
      p = device->allocator().allocate(std::max<size_t>(bytes, 1), stream_id(stream));
    } catch (const CudaError&) {
      throw;
    } catch (const RuntimeError& e) {
      throw RuntimeError(fmt::format("out of memory allocating {} bytes for {}: {}", bytes, what, e.what()));
    }
    blocks.push_back(p);
    if (stream != device->stream()) device->allocator().record_stream(p, stream_id(device->stream()));
    return static_cast<uint8_t*>(p);
  }
  // A pinned block; `user`: the stream that reads it, after which it may be reused (freed
  // now, reusable once that stream passed this point).
  uint8_t* pinned_for(size_t bytes, CUstream user) {
    void* p = device->pinned().allocate(std::max<size_t>(bytes, 1));
    device->pinned().record_stream(p, stream_id(user));
    return static_cast<uint8_t*>(p);
  }
};

CudaRun::CudaRun(std::unique_ptr<State> s) : s_(std::move(s)) {}

CudaRun::~CudaRun() {
  if (!s_ || s_->finished) return;
  // Unfinished (an error while launching, or dropped): the device may still use the blocks.
  try {
    s_->device->context().synchronize();
  } catch (const RuntimeError&) {
    // The context is broken; free what can be freed.
  }
  s_->exec->end_run(*s_);
}

// A run is over (finished, or waited for): its blocks go back, and the arena when no other
// run is in flight.
void CudaExecutor::end_run(CudaRun::State& r) {
  for (void* p : r.blocks) device_.allocator().free(p);
  r.blocks.clear();
  for (CudaRun::State::Output& o : r.outputs)
    if (o.pinned != nullptr) device_.pinned().free(std::exchange(o.pinned, nullptr));
  if (r.done != nullptr) spare_.push_back(std::exchange(r.done, nullptr));
  r.finished = true;
  if (--in_flight_ == 0 && arena_ != nullptr) {
    device_.allocator().free(std::exchange(arena_, nullptr));
    arena_size_ = 0;
  }
}

CudaExecutor::CudaExecutor(const Program& program, const Function& fn, CudaDevice& device, std::vector<DeviceTensor>& persistent)
    : program_(program), fn_(fn), device_(device), persistent_(persistent), layout_(program, fn, /*plan_arena=*/true) {
  bool kernels = false;
  for (const Instr& in : fn.instrs) {
    if (in.kind == Instr::Kind::Codelet) {
      kernels = true;
    } else if (find_cuda_library_op(in.op) == nullptr) {
      layout_.fail(fmt::format("library op '{}' at {} has no CUDA implementation", in.op,
                               in.where.empty() ? "<unknown location>" : in.where));
    }
  }
  if (kernels && program.ptx.empty())
    layout_.fail("the program has no GPU code (compile it with a GPU target, e.g. modelc --target sm_80)");
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const BufferDesc& d = program.buffers[b];
    if (!layout_.used(static_cast<uint32_t>(b)) || !is_persistent(d.role)) continue;
    if (b >= persistent.size() || (persistent[b].data == nullptr && persistent[b].bytes() != 0))
      layout_.fail(fmt::format("{} '{}' has no device storage", persistent_kind(d.role), d.name));
  }
  if (fn.streams != 1 || fn.events != 0) {
    if (std::string e = check_stream_structure(fn); !e.empty()) layout_.fail(e);
    order_ = std::make_unique<StreamOrder>(fn);
    if (std::string e = check_stream_races(program, fn, *order_); !e.empty()) layout_.fail(e);
    if (fn.streams > 1) {
      by_stream_.resize(fn.streams);
      for (uint32_t i = 0; i < fn.instrs.size(); ++i) by_stream_[fn.instrs[i].stream].push_back(i);
    }
  }
  device_.context().make_current();
  const Driver& drv = device_.driver();
  constexpr unsigned kNoTiming = 0x2;  // CU_EVENT_DISABLE_TIMING
  MODELC_CU(drv, cuEventCreate(&uploaded_, kNoTiming));
  if (!by_stream_.empty()) {
    MODELC_CU(drv, cuEventCreate(&fork_, kNoTiming));
    join_.assign(by_stream_.size(), nullptr);
    for (CUevent& e : join_) MODELC_CU(drv, cuEventCreate(&e, kNoTiming));
  }
  if (kernels) device_.program_module(program.ptx, program.ptx_target);  // JIT now: errors at load, not mid-step
  // The run's end reads the hand kernels' error words back (read_back_kernel_errors)
  // instead of synchronizing after each op that checks data.
  kernels::cuda::set_deferred_error_checks(device_, true);
}

CudaExecutor::~CudaExecutor() {
  const auto& api = device_.driver().api();
  if (arena_ != nullptr) device_.allocator().free(arena_);
  for (std::vector<CUevent>* v : {&events_, &cu_events_, &join_, &spare_})
    for (CUevent e : *v)
      if (e != nullptr) api.cuEventDestroy_v2(e);
  for (CUevent e : {fork_, uploaded_})
    if (e != nullptr) api.cuEventDestroy_v2(e);
}

CUevent CudaExecutor::take_event() {
  if (!spare_.empty()) {
    CUevent e = spare_.back();
    spare_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  MODELC_CU(device_.driver(), cuEventCreate(&e, 0x2));
  return e;
}

void CudaExecutor::set_profiling(bool on) {
  if (!on && profile_pending_) harvest_profile();
  profiling_ = on;
  if (!on) return;
  if (events_.empty()) {
    events_.resize(2 * fn_.instrs.size());
    for (CUevent& e : events_) MODELC_CU(device_.driver(), cuEventCreate(&e, 0));
  }
  profile_.assign(fn_.instrs.size(), {});
  for (size_t i = 0; i < fn_.instrs.size(); ++i) {
    const Instr& in = fn_.instrs[i];
    InstrTime& t = profile_[i];
    t.codelet = in.kind == Instr::Kind::Codelet;
    t.name = t.codelet ? program_.codelets[in.codelet].name : in.op;
    t.nodes = t.codelet ? program_.codelets[in.codelet].nodes : 1;
    t.where = in.where;
  }
}

// Reads the profiling events of the last run that recorded them (waiting for it).
void CudaExecutor::harvest_profile() {
  profile_pending_ = false;
  const Driver& drv = device_.driver();
  for (size_t i = 0; i < fn_.instrs.size(); ++i) {
    MODELC_CU(drv, cuEventSynchronize(events_[2 * i + 1]));
    float ms = 0;
    MODELC_CU(drv, cuEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
    InstrTime& t = profile_[i];
    t.ms += ms;
    ++t.runs;
    t.bytes = 0;
    for (uint32_t b : fn_.instrs[i].inputs)
      if (b != kNoBuffer) t.bytes += static_cast<int64_t>(layout_.bytes(b));
    for (uint32_t b : fn_.instrs[i].outputs) t.bytes += static_cast<int64_t>(layout_.bytes(b));
  }
}

void CudaExecutor::prepare_tables() {
  table_offset_.assign(fn_.instrs.size(), 0);
  size_t off = 0;
  for (size_t i = 0; i < fn_.instrs.size(); ++i) {
    const Instr& in = fn_.instrs[i];
    if (in.kind != Instr::Kind::Codelet) continue;
    table_offset_[i] = off;
    off += 8 * (in.inputs.size() + in.outputs.size() + layout_.sizes(i).size());
  }
  table_bytes_ = off;
}

// Buffers that share arena bytes in turn: the later one's writer waits for every
// instruction that touched the earlier one (runtime/execution/streams.h), as on the CPU.
void CudaExecutor::lay_out_streams() {
  if (by_stream_.empty()) return;
  stream_events_ = with_extra_waits(fn_, arena_hazards(fn_, layout_.plan(), *order_));
  while (cu_events_.size() < stream_events_.events) {
    CUevent e = nullptr;
    MODELC_CU(device_.driver(), cuEventCreate(&e, 0x2));
    cu_events_.push_back(e);
  }
}

void CudaExecutor::enqueue_instr(size_t i, const std::vector<uint8_t*>& ptr, uint8_t* tables, Module* module) {
  const Driver& drv = device_.driver();
  const Instr& in = fn_.instrs[i];
  const bool multi = !by_stream_.empty();
  CUstream stream = multi ? device_.compute_stream(in.stream) : device_.stream();
  if (multi)
    for (uint32_t e : stream_events_.waits[i]) MODELC_CU(drv, cuStreamWaitEvent(stream, cu_events_[e], 0));
  if (profiling_) MODELC_CU(drv, cuEventRecord(events_[2 * i], stream));
  if (in.kind == Instr::Kind::Codelet) {
    const CodeletDesc& kd = program_.codelets[in.codelet];
    const size_t n_ptrs = in.inputs.size() + in.outputs.size();
    const CUdeviceptr t = dptr(tables + table_offset_[i]);
    module->launch(kd, t, layout_.sizes(i).empty() ? 0 : t + 8 * n_ptrs, 0, layout_.extent(i), stream);
  } else {
    CudaLibCall c;
    c.call.op = in.op;
    c.call.where = in.where;
    c.call.ints = &in.ints;
    c.call.floats = &in.floats;
    c.call.sizes = &layout_.sizes(i);
    c.device = &device_;
    c.stream = stream;
    auto arg = [&](uint32_t b) {
      kernels::TensorArg a;
      if (b == kNoBuffer) return a;
      a.data = ptr[b];
      a.type = program_.buffers[b].type;
      a.shape = layout_.shape(b);
      return a;
    };
    for (uint32_t b : in.inputs) c.call.inputs.push_back(arg(b));
    for (uint32_t b : in.outputs) c.call.outputs.push_back(arg(b));
    find_cuda_library_op(in.op)(c);
  }
  if (profiling_) MODELC_CU(drv, cuEventRecord(events_[2 * i + 1], stream));
  if (multi)
    for (uint32_t e : stream_events_.records[i]) MODELC_CU(drv, cuEventRecord(cu_events_[e], stream));
}

// Rethrows an error of a run with the function's name in front (once).
void CudaExecutor::name_error(const RuntimeError& e) const {
  if (const auto* cuda = dynamic_cast<const CudaError*>(&e))
    throw CudaError(fmt::format("function '{}': {}", fn_.name, cuda->what()), cuda->code());
  const std::string msg = e.what();
  if (msg.rfind("function '", 0) == 0) throw;
  layout_.fail(msg);
}

std::map<std::string, HostTensor> CudaExecutor::run(std::span<const HostTensor* const> feeds,
                                                    const std::map<std::string, int64_t>& symbols) {
  return finish(launch(feeds, symbols));
}

std::unique_ptr<CudaRun> CudaExecutor::launch(std::span<const HostTensor* const> feeds,
                                              const std::map<std::string, int64_t>& symbols) {
  if (layout_.bind(feeds, symbols)) {
    prepare_tables();
    lay_out_streams();
  }
  device_.context().make_current();
  const Driver& drv = device_.driver();
  const CUstream s0 = device_.stream();
  const ArenaPlan& plan = layout_.plan();
  // The profile of a run still in flight is read before its events are recorded again.
  if (profiling_ && profile_pending_) harvest_profile();
  auto st = std::make_unique<CudaRun::State>();
  st->exec = this;
  st->device = &device_;
  std::unique_ptr<CudaRun> run(new CudaRun(std::move(st)));
  CudaRun::State& r = *run->s_;
  ++in_flight_;
  std::vector<uint8_t*> ptr(program_.buffers.size(), nullptr);
  try {
    // The arena: one per function while runs are in flight (they are ordered on the device).
    const auto arena_size = static_cast<size_t>(std::max<int64_t>(plan.size, kArenaAlignment));
    if (arena_size > arena_size_) {
      if (arena_ != nullptr) device_.allocator().free(std::exchange(arena_, nullptr));
      arena_size_ = 0;
      try {
        arena_ = device_.allocator().allocate(arena_size, stream_id(s0));
      } catch (const CudaError&) {
        throw;
      } catch (const RuntimeError& e) {
        throw RuntimeError(fmt::format("out of memory allocating {} bytes for the arena of its temporaries: {}", arena_size, e.what()));
      }
      arena_size_ = arena_size;
    }
    arena_bytes_ = static_cast<int64_t>(arena_size_);
    auto* arena = static_cast<uint8_t*>(arena_);
    for (const BufferLife& l : plan.lives) ptr[l.buffer] = arena + plan.offset[l.buffer];
    // Inputs: into pinned memory now, up on the copy stream (overlapping the runs in flight).
    CUstream copy = feeds.empty() ? s0 : device_.copy_stream();
    for (size_t i = 0; i < feeds.size(); ++i) {
      const uint32_t b = fn_.feeds[i].buffer;
      const HostTensor& t = *feeds[i];
      ptr[b] = r.take(t.bytes.size(), fmt::format("input {}", layout_.feed_name(i)), copy);
      if (t.bytes.empty()) continue;
      uint8_t* staged = r.pinned_for(t.bytes.size(), copy);
      std::memcpy(staged, t.bytes.data(), t.bytes.size());
      MODELC_CU(drv, cuMemcpyHtoDAsync_v2(dptr(ptr[b]), staged, t.bytes.size(), copy));
      device_.pinned().free(staged);
    }
    if (copy != s0) {
      MODELC_CU(drv, cuEventRecord(uploaded_, copy));
      MODELC_CU(drv, cuStreamWaitEvent(s0, uploaded_, 0));
    }
    for (size_t b = 0; b < program_.buffers.size(); ++b) {
      const BufferDesc& d = program_.buffers[b];
      if (!layout_.used(static_cast<uint32_t>(b)) || !is_persistent(d.role)) continue;
      const DeviceTensor& t = persistent_[b];
      if (t.shape != layout_.shape(static_cast<uint32_t>(b)) || t.type != d.type)
        layout_.fail(fmt::format("persistent buffer '{}' holds {}{}, expected {}{}", d.name, dtype_name(t.type),
                                 shape_str(t.shape), dtype_name(d.type), shape_str(layout_.shape(static_cast<uint32_t>(b)))));
      ptr[b] = static_cast<uint8_t*>(t.data);
    }
    // Every kernel's tables, filled in pinned memory and copied up on stream 0 in one go.
    uint8_t* tables = r.take(table_bytes_, "the kernels' argument tables", s0);
    if (table_bytes_ > 0) {
      auto* image = reinterpret_cast<uint64_t*>(r.pinned_for(table_bytes_, s0));
      for (size_t i = 0; i < fn_.instrs.size(); ++i) {
        const Instr& in = fn_.instrs[i];
        if (in.kind != Instr::Kind::Codelet) continue;
        size_t k = table_offset_[i] / 8;
        for (uint32_t b : in.inputs) image[k++] = b == kNoBuffer ? 0 : dptr(ptr[b]);
        for (uint32_t b : in.outputs) image[k++] = dptr(ptr[b]);
        for (int64_t v : layout_.sizes(i)) image[k++] = static_cast<uint64_t>(v);
      }
      MODELC_CU(drv, cuMemcpyHtoDAsync_v2(dptr(tables), image, table_bytes_, s0));
      device_.pinned().free(image);
    }
    Module* module = program_.ptx.empty() ? nullptr : &device_.program_module(program_.ptx, program_.ptx_target);
    // The other streams start after stream 0's uploads ...
    if (!by_stream_.empty()) {
      MODELC_CU(drv, cuEventRecord(fork_, s0));
      for (uint32_t k = 1; k < by_stream_.size(); ++k) MODELC_CU(drv, cuStreamWaitEvent(device_.compute_stream(k), fork_, 0));
    }
    for (size_t i = 0; i < fn_.instrs.size(); ++i) {
      try {
        enqueue_instr(i, ptr, tables, module);
      } catch (const CudaError& e) {
        const Instr& in = fn_.instrs[i];
        throw CudaError(fmt::format("{} at {}: {}", in.kind == Instr::Kind::Codelet ? "kernel '" + program_.codelets[in.codelet].name + "'"
                                                                                   : "library op '" + in.op + "'",
                                    in.where, e.what()),
                        e.code());
      }
    }
    if (profiling_) profile_pending_ = true;
    // ... and stream 0 goes on after all of them.
    for (uint32_t k = 1; k < by_stream_.size(); ++k) {
      MODELC_CU(drv, cuEventRecord(join_[k], device_.compute_stream(k)));
      MODELC_CU(drv, cuStreamWaitEvent(s0, join_[k], 0));
    }
    for (const auto& [from, to] : fn_.updates) {
      const size_t n = persistent_[to].bytes();
      const BufferDesc& src = program_.buffers[from];
      if (layout_.bytes(from) != n || src.type != persistent_[to].type)
        layout_.fail(fmt::format("update of '{}' from '{}': {}{} does not match {}{}", program_.buffers[to].name, src.name,
                                 dtype_name(src.type), shape_str(layout_.shape(from)), dtype_name(persistent_[to].type),
                                 shape_str(persistent_[to].shape)));
      if (ptr[from] != persistent_[to].data && n > 0)
        MODELC_CU(drv, cuMemcpyDtoDAsync_v2(dptr(persistent_[to].data), dptr(ptr[from]), n, s0));
    }
    for (const auto& [name, b] : fn_.outputs) {
      CudaRun::State::Output o{name, HostTensor(program_.buffers[b].type, layout_.shape(b)), nullptr};
      if (!o.host.bytes.empty()) {
        o.pinned = device_.pinned().allocate(o.host.bytes.size());
        r.outputs.push_back(std::move(o));
        MODELC_CU(drv, cuMemcpyDtoHAsync_v2(r.outputs.back().pinned, dptr(ptr[b]), r.outputs.back().host.bytes.size(), s0));
      } else {
        r.outputs.push_back(std::move(o));
      }
    }
    r.errors = kernels::cuda::read_back_kernel_errors(device_, s0);
    r.done = take_event();
    MODELC_CU(drv, cuEventRecord(r.done, s0));
    return run;
  } catch (const RuntimeError& e) {
    name_error(e);
  }
}

std::map<std::string, HostTensor> CudaExecutor::finish(std::unique_ptr<CudaRun> run) {
  if (!run || !run->s_ || run->s_->exec != this || run->s_->finished)
    layout_.fail("finish: not a run of this function in flight");
  CudaRun::State& r = *run->s_;
  try {
    device_.context().make_current();
    MODELC_CU(device_.driver(), cuEventSynchronize(r.done));
    std::map<std::string, HostTensor> out;
    for (CudaRun::State::Output& o : r.outputs) {
      if (o.pinned != nullptr) std::memcpy(o.host.bytes.data(), o.pinned, o.host.bytes.size());
      out.emplace(o.name, std::move(o.host));
    }
    end_run(r);
    if (profile_pending_) harvest_profile();
    r.errors.check();
    return out;
  } catch (const RuntimeError& e) {
    name_error(e);
  }
}

}  // namespace modelc::rt::cuda

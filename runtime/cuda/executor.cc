#include "runtime/cuda/executor.h"

#include <fmt/format.h>

#include <cstring>

#include "kernels/cuda/errors.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/library.h"

namespace modelc::rt::cuda {
namespace {

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Device blocks taken for one run, given back when it ends, also on an error. The caching
// allocator hands a freed block only to later work on the same stream, so freeing while the
// stream may still run is safe.
class RunBlocks {
 public:
  explicit RunBlocks(CudaDevice& d) : device_(d) {}
  ~RunBlocks() {
    for (void* p : blocks_) device_.allocator().free(p);
  }
  RunBlocks(const RunBlocks&) = delete;
  RunBlocks& operator=(const RunBlocks&) = delete;
  uint8_t* take(size_t bytes, const std::string& what) {
    try {
      void* p = device_.allocator().allocate(std::max<size_t>(bytes, 1), stream_id(device_.stream()));
      blocks_.push_back(p);
      return static_cast<uint8_t*>(p);
    } catch (const CudaError&) {
      throw;
    } catch (const RuntimeError& e) {
      throw RuntimeError(fmt::format("out of memory allocating {} bytes for {}: {}", bytes, what, e.what()));
    }
  }

 private:
  CudaDevice& device_;
  std::vector<void*> blocks_;
};

}  // namespace

size_t DeviceTensor::bytes() const {
  size_t n = elem_bytes(type);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string cuda_unsupported(const Program& program) {
  bool kernels = false;
  for (const Function& fn : program.functions)
    for (const Instr& in : fn.instrs) {
      if (in.kind == Instr::Kind::Kernel) kernels = true;
      else if (find_cuda_library_op(in.op) == nullptr)
        return fmt::format("library op '{}' at {} has no CUDA implementation", in.op, in.where.empty() ? "<unknown location>" : in.where);
    }
  if (kernels && program.ptx.empty()) return "the program has no GPU code (compile it with a GPU target, e.g. modelc --target sm_80)";
  return "";
}

CudaExecutor::CudaExecutor(const Program& program, const Function& fn, CudaDevice& device, std::vector<DeviceTensor>& persistent)
    : program_(program), fn_(fn), device_(device), persistent_(persistent), layout_(program, fn, /*plan_arena=*/true) {
  bool kernels = false;
  for (const Instr& in : fn.instrs) {
    if (in.kind == Instr::Kind::Kernel) {
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
    if (!layout_.used(static_cast<uint32_t>(b)) || (d.role != BufferRole::Param && d.role != BufferRole::State)) continue;
    if (b >= persistent.size() || (persistent[b].data == nullptr && persistent[b].bytes() != 0))
      layout_.fail(fmt::format("{} '{}' has no device storage", d.role == BufferRole::Param ? "parameter" : "state", d.name));
  }
  if (kernels) device_.program_module(program.ptx, program.ptx_target);  // JIT now: errors at load, not mid-step
  // The run synchronizes at its end anyway: the hand kernels' data checks (an embedding id out
  // of range) wait for that instead of synchronizing after each op.
  kernels::cuda::set_deferred_error_checks(device_, true);
}

CudaExecutor::~CudaExecutor() {
  for (CUevent e : events_) device_.driver().api().cuEventDestroy_v2(e);
}

void CudaExecutor::set_profiling(bool on) {
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
    t.kernel = in.kind == Instr::Kind::Kernel;
    t.name = t.kernel ? program_.kernels[in.kernel].name : in.op;
    t.nodes = t.kernel ? program_.kernels[in.kernel].nodes : 1;
    t.where = in.where;
  }
}

void CudaExecutor::prepare_tables() {
  table_offset_.assign(fn_.instrs.size(), 0);
  size_t off = 0;
  for (size_t i = 0; i < fn_.instrs.size(); ++i) {
    const Instr& in = fn_.instrs[i];
    if (in.kind != Instr::Kind::Kernel) continue;
    table_offset_[i] = off;
    off += 8 * (in.inputs.size() + in.outputs.size() + layout_.sizes(i).size());
  }
  table_bytes_ = off;
}

std::map<std::string, HostTensor> CudaExecutor::run(std::span<const HostTensor* const> feeds,
                                                    const std::map<std::string, int64_t>& symbols) {
  if (layout_.bind(feeds, symbols)) prepare_tables();
  device_.context().make_current();
  const Driver& drv = device_.driver();
  CUstream stream = device_.stream();
  const ArenaPlan& plan = layout_.plan();
  RunBlocks blocks(device_);
  std::vector<uint8_t*> ptr(program_.buffers.size(), nullptr);
  try {
    const auto arena_size = static_cast<size_t>(std::max<int64_t>(plan.size, kArenaAlignment));
    uint8_t* arena = blocks.take(arena_size, "the arena of its temporaries");
    arena_bytes_ = static_cast<int64_t>(arena_size);
    for (const BufferLife& l : plan.lives) ptr[l.buffer] = arena + plan.offset[l.buffer];
    for (size_t i = 0; i < feeds.size(); ++i) {
      const uint32_t b = fn_.feeds[i].buffer;
      const HostTensor& t = *feeds[i];
      ptr[b] = blocks.take(t.bytes.size(), fmt::format("input {}", layout_.feed_name(i)));
      if (!t.bytes.empty()) MODELC_CU(drv, cuMemcpyHtoDAsync_v2(dptr(ptr[b]), t.bytes.data(), t.bytes.size(), stream));
    }
    for (size_t b = 0; b < program_.buffers.size(); ++b) {
      const BufferDesc& d = program_.buffers[b];
      if (!layout_.used(static_cast<uint32_t>(b)) || (d.role != BufferRole::Param && d.role != BufferRole::State)) continue;
      const DeviceTensor& t = persistent_[b];
      if (t.shape != layout_.shape(static_cast<uint32_t>(b)) || t.type != d.type)
        layout_.fail(fmt::format("persistent buffer '{}' holds {}{}, expected {}{}", d.name, elem_name(t.type),
                                 shape_str(t.shape), elem_name(d.type), shape_str(layout_.shape(static_cast<uint32_t>(b)))));
      ptr[b] = static_cast<uint8_t*>(t.data);
    }
    // Every kernel's tables, filled on the host and copied up in one go. The host image must
    // live until the copy has read it: the stream is synchronized before this run returns.
    std::vector<uint64_t> image(table_bytes_ / 8);
    uint8_t* tables = blocks.take(table_bytes_, "the kernels' argument tables");
    for (size_t i = 0; i < fn_.instrs.size(); ++i) {
      const Instr& in = fn_.instrs[i];
      if (in.kind != Instr::Kind::Kernel) continue;
      size_t k = table_offset_[i] / 8;
      for (uint32_t b : in.inputs) image[k++] = b == kNoBuffer ? 0 : dptr(ptr[b]);
      for (uint32_t b : in.outputs) image[k++] = dptr(ptr[b]);
      for (int64_t s : layout_.sizes(i)) image[k++] = static_cast<uint64_t>(s);
    }
    if (table_bytes_ > 0) MODELC_CU(drv, cuMemcpyHtoDAsync_v2(dptr(tables), image.data(), table_bytes_, stream));
    Module* module = program_.ptx.empty() ? nullptr : &device_.program_module(program_.ptx, program_.ptx_target);
    for (size_t i = 0; i < fn_.instrs.size(); ++i) {
      const Instr& in = fn_.instrs[i];
      if (profiling_) MODELC_CU(drv, cuEventRecord(events_[2 * i], stream));
      struct Stop {  // the end event, however the instruction is left
        CudaExecutor* self;
        size_t i;
        ~Stop() {
          if (self->profiling_) self->device_.driver().api().cuEventRecord(self->events_[2 * i + 1], self->device_.stream());
        }
      } stop{this, i};
      try {
        if (in.kind == Instr::Kind::Kernel) {
          const KernelDesc& kd = program_.kernels[in.kernel];
          const size_t n_ptrs = in.inputs.size() + in.outputs.size();
          const CUdeviceptr t = dptr(tables + table_offset_[i]);
          module->launch(kd, t, layout_.sizes(i).empty() ? 0 : t + 8 * n_ptrs, 0, layout_.extent(i), stream);
          continue;
        }
        CudaLibCall c;
        c.call.op = in.op;
        c.call.where = in.where;
        c.call.ints = &in.ints;
        c.call.floats = &in.floats;
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
      } catch (const CudaError& e) {
        throw CudaError(fmt::format("{} at {}: {}", in.kind == Instr::Kind::Kernel ? "kernel '" + program_.kernels[in.kernel].name + "'"
                                                                                   : "library op '" + in.op + "'",
                                    in.where, e.what()),
                        e.code());
      }
    }
    for (const auto& [from, to] : fn_.updates) {
      const size_t n = persistent_[to].bytes();
      const BufferDesc& src = program_.buffers[from];
      if (layout_.bytes(from) != n || src.type != persistent_[to].type)
        layout_.fail(fmt::format("update of '{}' from '{}': {}{} does not match {}{}", program_.buffers[to].name, src.name,
                                 elem_name(src.type), shape_str(layout_.shape(from)), elem_name(persistent_[to].type),
                                 shape_str(persistent_[to].shape)));
      if (ptr[from] != persistent_[to].data && n > 0)
        MODELC_CU(drv, cuMemcpyDtoDAsync_v2(dptr(persistent_[to].data), dptr(ptr[from]), n, stream));
    }
    std::map<std::string, HostTensor> out;
    for (const auto& [name, b] : fn_.outputs) {
      HostTensor t(program_.buffers[b].type, layout_.shape(b));
      if (!t.bytes.empty()) MODELC_CU(drv, cuMemcpyDtoHAsync_v2(t.bytes.data(), dptr(ptr[b]), t.bytes.size(), stream));
      out.emplace(name, std::move(t));
    }
    device_.synchronize();
    kernels::cuda::check_kernel_errors(device_);
    if (profiling_)
      for (size_t i = 0; i < fn_.instrs.size(); ++i) {
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
    return out;
  } catch (const CudaError& e) {
    throw CudaError(fmt::format("function '{}': {}", fn_.name, e.what()), e.code());
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    if (msg.rfind("function '", 0) == 0) throw;
    layout_.fail(msg);
  }
}

}  // namespace modelc::rt::cuda

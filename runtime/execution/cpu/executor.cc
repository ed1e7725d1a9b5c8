// The CPU executor: its part of the buffer layout (no-arena buffers, the streams' arena
// waits) and the instruction loop; checking, binding and shapes are FunctionLayout's.
#include "runtime/base/tensor.h"
#include "runtime/execution/cpu/executor.h"

#include <fmt/format.h>

#include <chrono>

#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/cpu/library.h"
#include "runtime/device/memory/caching_allocator.h"
#include "runtime/execution/function_layout.h"
#include "runtime/execution/memory_plan.h"

namespace modelc::rt {

namespace {

using rt::shape_str;

// Where an empty tensor's data points: library ops treat a null pointer as an absent input.
alignas(64) uint8_t g_empty[64];

uint8_t* data_or_empty(const HostTensor& t) { return t.bytes.empty() ? g_empty : const_cast<uint8_t*>(t.bytes.data()); }

// Memory from the session's caching allocator, or the C heap without one.
struct StorageFree {
  CachingAllocator* allocator = nullptr;
  void operator()(uint8_t* p) const {
    if (allocator) allocator->free(p);
    else std::free(p);
  }
};
using Storage = std::unique_ptr<uint8_t, StorageFree>;

// `bytes` (> 0) aligned to kArenaAlignment; throws RuntimeError naming `what` when out of
// memory (the allocator's message carries its memory summary).
Storage allocate(CachingAllocator* allocator, size_t bytes, const std::string& what) {
  if (allocator) {
    try {
      return Storage(static_cast<uint8_t*>(allocator->allocate(bytes)), StorageFree{allocator});
    } catch (const RuntimeError& e) {
      throw RuntimeError(fmt::format("out of memory allocating {} bytes for {}: {}", bytes, what, e.what()));
    }
  }
  size_t rounded = (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kArenaAlignment, rounded));
  if (!p) throw RuntimeError(fmt::format("out of memory allocating {} bytes for {}", bytes, what));
  return Storage(p, StorageFree{});
}

}  // namespace

// What the CPU adds to the shared FunctionLayout (runtime/execution/function_layout.h).
struct Executor::Layout {
  explicit Layout(const Program& p, const Function& f, bool arena) : fl(p, f, arena) {}
  FunctionLayout fl;                          // checks, symbol binding, shapes, sizes, the arena plan
  std::vector<void*> ptrs;                    // by buffer id
  std::vector<Storage> storage;               // temps and outputs, by buffer id (no arena)
  std::vector<size_t> capacity;               // bytes allocated, by buffer id (no arena)
  size_t arena_bytes = 0;                     // the last run's arena
  std::vector<kernels::LibraryFn> lib;        // per instruction (library ops)
  std::vector<std::pair<uint32_t, uint32_t>> hazards;  // arena reuse waits (streams)
  StreamEvents events;                        // the function's events plus the hazards' own
};

Executor::Executor(const Program& program, const Function& fn, ThreadPool& pool, std::vector<HostTensor>& persistent,
                   ExecutorOptions options)
    : program_(program), fn_(fn), pool_(pool), persistent_(persistent), options_(options),
      layout_(std::make_unique<Layout>(program, fn, options.arena)) {
  const size_t nb = program.buffers.size();
  Layout& L = *layout_;
  L.ptrs.assign(nb, nullptr);
  L.storage.resize(nb);
  L.capacity.assign(nb, 0);
  L.lib.assign(fn.instrs.size(), nullptr);
  for (size_t i = 0; i < fn.instrs.size(); ++i) {
    const Instr& in = fn.instrs[i];
    if (in.kind == Instr::Kind::Codelet) {
      if (!program.codelets[in.codelet].host)
        fail(fmt::format("kernel '{}' (instruction {} at {}) has no host code", program.codelets[in.codelet].name, i, in.where));
    } else {
      L.lib[i] = kernels::find_library_op(in.op);
      if (!L.lib[i]) fail(fmt::format("unknown library op '{}' at {}", in.op, in.where.empty() ? "<unknown location>" : in.where));
    }
  }
  if (fn.streams != 1 || fn.events != 0) {
    if (std::string e = check_stream_structure(fn); !e.empty()) fail(e);
    order_ = std::make_unique<StreamOrder>(fn);
    if (std::string e = check_stream_races(program, fn, *order_); !e.empty()) fail(e);
    if (fn.streams > 1 && options_.streams) {
      by_stream_.resize(fn.streams);
      for (uint32_t i = 0; i < fn.instrs.size(); ++i) by_stream_[fn.instrs[i].stream].push_back(i);
      runner_ = std::make_unique<StreamRunner>(fn.streams);
    }
  }
  for (size_t b = 0; b < nb; ++b) {
    if (!L.fl.used(static_cast<uint32_t>(b))) continue;
    const BufferDesc& d = program.buffers[b];
    if (is_persistent(d.role)) {
      if (b >= persistent.size() ||
          persistent[b].bytes.size() != static_cast<size_t>(persistent[b].numel()) * dtype_bytes(persistent[b].type))
        fail(fmt::format("{} '{}' has no storage", persistent_kind(d.role), d.name));
    }
  }
}

Executor::~Executor() = default;

void Executor::fail(const std::string& msg) const { throw RuntimeError(fmt::format("function '{}': {}", fn_.name, msg)); }

void Executor::bind(std::span<const HostTensor* const> feeds, const std::map<std::string, int64_t>& symbols) {
  // A layout of the CPU's own that failed (out of memory) leaves none: the next run lays out
  // again even when the symbols did not change.
  if (layout_->fl.bind(feeds, symbols) || !laid_out_) {
    laid_out_ = false;
    lay_out();
    laid_out_ = true;
  }
}

void Executor::lay_out() {
  Layout& L = *layout_;
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    const auto id = static_cast<uint32_t>(b);
    if (!L.fl.used(id)) continue;
    const BufferDesc& d = program_.buffers[b];
    const std::vector<int64_t>& shape = L.fl.shape(id);
    if ((d.role == BufferRole::Temp || d.role == BufferRole::Output) && !options_.arena) {
      const size_t cap = std::max<size_t>(L.fl.bytes(id), 1);
      if (cap > L.capacity[b]) {
        L.storage[b].reset();
        L.capacity[b] = 0;
        try {
          L.storage[b] = allocate(options_.allocator, cap, fmt::format("buffer '{}'", d.name));
        } catch (const RuntimeError& e) {
          fail(e.what());
        }
        L.capacity[b] = cap;
      }
      L.ptrs[b] = L.storage[b].get();
    } else if (is_persistent(d.role)) {
      HostTensor& t = persistent_[b];
      if (t.shape != shape || t.type != d.type)
        fail(fmt::format("persistent buffer '{}' holds {}{}, expected {}{}", d.name, dtype_name(t.type), t.shape_str(),
                         dtype_name(d.type), shape_str(shape)));
    }
  }
  if (runner_) {
    // Buffers that share arena bytes in turn: the later one's writer waits for every
    // instruction that touched the earlier one (runtime/execution/streams.h).
    L.hazards = options_.arena ? rt::arena_hazards(fn_, L.fl.plan(), *order_) : std::vector<std::pair<uint32_t, uint32_t>>{};
    L.events = with_extra_waits(fn_, L.hazards);
  }
  ++layouts_;
}

int64_t Executor::arena_bytes() const { return static_cast<int64_t>(layout_->arena_bytes); }

int64_t Executor::planned_arena_bytes() const { return layout_->fl.plan().size; }

const std::vector<int64_t>& Executor::symbol_values() const { return layout_->fl.values(); }

const std::vector<std::pair<uint32_t, uint32_t>>& Executor::arena_hazards() const { return layout_->hazards; }

void Executor::set_profiling(bool on) {
  profiling_ = on;
  if (!on) return;
  profile_.assign(fn_.instrs.size(), {});
  for (size_t i = 0; i < fn_.instrs.size(); ++i) {
    const Instr& in = fn_.instrs[i];
    cuda::InstrTime& t = profile_[i];
    t.codelet = in.kind == Instr::Kind::Codelet;
    t.name = t.codelet ? program_.codelets[in.codelet].name : in.op;
    t.nodes = t.codelet ? program_.codelets[in.codelet].nodes : 1;
    t.where = in.where;
  }
}

void Executor::run_instr(size_t i) {
  const Instr& in = fn_.instrs[i];
  Layout& L = *layout_;
  if (in.kind == Instr::Kind::Codelet) {
    std::vector<void*> bufs;
    bufs.reserve(in.inputs.size() + in.outputs.size());
    for (uint32_t b : in.inputs) bufs.push_back(b == kNoBuffer ? nullptr : L.ptrs[b]);
    for (uint32_t b : in.outputs) bufs.push_back(L.ptrs[b]);
    HostCodeletFn host = program_.codelets[in.codelet].host;
    const int64_t* sizes = L.fl.sizes(i).data();
    void* const* ptrs = bufs.data();
    pool_.parallel_for(L.fl.extent(i), in.grain, [&](int64_t b, int64_t e) { host(ptrs, sizes, b, e); });
    return;
  }
  kernels::LibCall call;
  call.op = in.op;
  call.where = in.where;
  call.ints = &in.ints;
  call.floats = &in.floats;
  call.pool = &pool_;
  call.sizes = &L.fl.sizes(i);
  auto arg = [&](uint32_t b) {
    kernels::TensorArg a;
    if (b == kNoBuffer) return a;
    a.data = L.ptrs[b];
    a.type = program_.buffers[b].type;
    a.shape = L.fl.shape(b);
    return a;
  };
  for (uint32_t b : in.inputs) call.inputs.push_back(arg(b));
  for (uint32_t b : in.outputs) call.outputs.push_back(arg(b));
  L.lib[i](call);
}

std::map<std::string, HostTensor> Executor::run(std::span<const HostTensor* const> feeds,
                                                const std::map<std::string, int64_t>& symbols) {
  bind(feeds, symbols);
  Layout& L = *layout_;
  // The arena lives for this run only: functions of one session take turns in the same
  // cached memory (the allocator keeps the freed block for the next run), so the session
  // holds the largest function's arena, not their sum.
  Storage arena;
  if (options_.arena) {
    const auto need = static_cast<size_t>(std::max<int64_t>(L.fl.plan().size, kArenaAlignment));
    try {
      arena = allocate(options_.allocator, need, "the arena of its temporaries");
    } catch (const RuntimeError& e) {
      fail(e.what());
    }
    L.arena_bytes = need;
    for (const BufferLife& l : L.fl.plan().lives) L.ptrs[l.buffer] = arena.get() + L.fl.plan().offset[l.buffer];
  }
  for (size_t i = 0; i < feeds.size(); ++i)
    L.ptrs[fn_.feeds[i].buffer] = data_or_empty(*feeds[i]);
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    BufferRole r = program_.buffers[b].role;
    if (L.fl.used(static_cast<uint32_t>(b)) && is_persistent(r))
      L.ptrs[b] = data_or_empty(persistent_[b]);
  }
  // Each instruction runs once per run, so its profile entry has one writer.
  auto timed = [&](size_t i) {
    try {
      if (!profiling_) return run_instr(i);
      const auto start = std::chrono::steady_clock::now();
      run_instr(i);
      cuda::InstrTime& t = profile_[i];
      t.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      ++t.runs;
      t.bytes = 0;
      for (uint32_t b : fn_.instrs[i].inputs)
        if (b != kNoBuffer) t.bytes += static_cast<int64_t>(L.fl.bytes(b));
      for (uint32_t b : fn_.instrs[i].outputs) t.bytes += static_cast<int64_t>(L.fl.bytes(b));
    } catch (const RuntimeError& e) {
      fail(e.what());
    }
  };
  if (runner_) {
    std::function<void(uint32_t)> one = [&](uint32_t i) { timed(i); };
    runner_->run(by_stream_, L.events, one);
  } else {
    for (size_t i = 0; i < fn_.instrs.size(); ++i) timed(i);
  }
  for (const auto& [from, to] : fn_.updates) {
    size_t n = static_cast<size_t>(persistent_[to].numel()) * dtype_bytes(persistent_[to].type);
    const BufferDesc& src = program_.buffers[from];
    const size_t have = L.fl.bytes(from);
    if (have != n || src.type != persistent_[to].type)
      fail(fmt::format("update of '{}' from '{}': {}{} does not match {}{}", program_.buffers[to].name, src.name,
                       dtype_name(src.type), shape_str(L.fl.shape(from)), dtype_name(persistent_[to].type), persistent_[to].shape_str()));
    if (L.ptrs[from] != persistent_[to].bytes.data() && n) std::memmove(persistent_[to].bytes.data(), L.ptrs[from], n);
  }
  std::map<std::string, HostTensor> out;
  for (const auto& [name, b] : fn_.outputs) {
    HostTensor t(program_.buffers[b].type, L.fl.shape(b));
    if (!t.bytes.empty()) std::memcpy(t.bytes.data(), L.ptrs[b], t.bytes.size());
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace modelc::rt

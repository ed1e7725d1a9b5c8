// The CPU executor: symbol binding, buffer layout and the instruction loop.
#include "runtime/tensor.h"
#include "runtime/cpu/executor.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/cpu/library.h"
#include "runtime/memory/caching_allocator.h"
#include "runtime/memory_plan.h"

namespace modelc::rt {

namespace {

constexpr int64_t kUnbound = std::numeric_limits<int64_t>::min();

using rt::shape_str;

std::string expr_shape_str(const std::vector<SizeExpr>& s, const std::vector<std::string>& names) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + s[i].str(names);
  return r + "]";
}

// The symbol a dim binds: a single symbol with coefficient 1, or none.
std::optional<uint32_t> binding_symbol(const SizeExpr& e) {
  if (e.terms.size() == 1 && e.terms[0].coef == 1 && e.terms[0].symbols.size() == 1) return e.terms[0].symbols[0];
  return std::nullopt;
}

// The first symbol of `e` that is still unbound, or -1.
int64_t unbound_symbol(const SizeExpr& e, const std::vector<int64_t>& values) {
  for (const SizeExpr::Term& t : e.terms)
    for (uint32_t s : t.symbols)
      if (s >= values.size() || values[s] == kUnbound) return s;
  return -1;
}

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

struct Executor::Layout {
  std::vector<bool> used;                     // by buffer id
  std::vector<std::vector<int64_t>> shapes;   // evaluated, by buffer id
  std::vector<void*> ptrs;                    // by buffer id
  std::vector<Storage> storage;               // temps and outputs, by buffer id (no arena)
  std::vector<size_t> capacity;               // bytes allocated, by buffer id (no arena)
  size_t arena_bytes = 0;                     // the last run's arena
  ArenaPlan plan;
  std::vector<std::vector<int64_t>> sizes;    // per instruction: the size table
  std::vector<int64_t> extents;               // per instruction
  std::vector<kernels::LibraryFn> lib;        // per instruction (library ops)
};

Executor::Executor(const Program& program, const Function& fn, ThreadPool& pool, std::vector<HostTensor>& persistent,
                   ExecutorOptions options)
    : program_(program), fn_(fn), pool_(pool), persistent_(persistent), options_(options),
      layout_(std::make_unique<Layout>()) {
  size_t nb = program.buffers.size();
  Layout& L = *layout_;
  L.used.assign(nb, false);
  L.shapes.resize(nb);
  L.ptrs.assign(nb, nullptr);
  L.storage.resize(nb);
  L.capacity.assign(nb, 0);
  auto use = [&](uint32_t id, const std::string& what) {
    if (id == kNoBuffer) return;
    if (id >= nb) fail(fmt::format("{} names buffer {}, but the program has {} buffers", what, id, nb));
    L.used[id] = true;
  };
  std::vector<bool> fed(nb, false);
  for (const Feed& f : fn.feeds) {
    use(f.buffer, fmt::format("feed '{}'", f.name));
    if (f.buffer == kNoBuffer) fail(fmt::format("feed '{}' has no buffer", f.name));
    if (program.buffers[f.buffer].role != BufferRole::Input)
      fail(fmt::format("feed '{}' writes buffer '{}', which is not an input", f.name, program.buffers[f.buffer].name));
    fed[f.buffer] = true;
  }
  L.lib.assign(fn.instrs.size(), nullptr);
  for (size_t i = 0; i < fn.instrs.size(); ++i) {
    const Instr& in = fn.instrs[i];
    std::string what = in.kind == Instr::Kind::Library ? fmt::format("library op '{}' at {}", in.op, in.where)
                                                       : fmt::format("instruction {} at {}", i, in.where);
    for (uint32_t b : in.inputs) use(b, what);
    for (uint32_t b : in.outputs) {
      if (b == kNoBuffer) fail(what + " has an absent output");
      use(b, what);
    }
    if (in.kind == Instr::Kind::Kernel) {
      if (in.kernel >= program.kernels.size())
        fail(fmt::format("{} names kernel {}, but the program has {} kernels", what, in.kernel, program.kernels.size()));
      if (!program.kernels[in.kernel].host)
        fail(fmt::format("kernel '{}' ({}) has no host code", program.kernels[in.kernel].name, what));
    } else {
      L.lib[i] = kernels::find_library_op(in.op);
      if (!L.lib[i]) fail(fmt::format("unknown library op '{}' at {}", in.op, in.where.empty() ? "<unknown location>" : in.where));
    }
  }
  for (const auto& [name, b] : fn.outputs) use(b, fmt::format("output '{}'", name));
  for (const auto& [from, to] : fn.updates) {
    use(from, "an update");
    use(to, "an update");
    if (to >= nb || (program.buffers[to].role != BufferRole::Param && program.buffers[to].role != BufferRole::State))
      fail(fmt::format("an update writes buffer '{}', which is neither a parameter nor optimizer state",
                       program.buffers[to].name));
  }
  for (size_t b = 0; b < nb; ++b) {
    if (!L.used[b]) continue;
    const BufferDesc& d = program.buffers[b];
    if (d.role == BufferRole::Input && !fed[b]) fail(fmt::format("input buffer '{}' is used but never fed", d.name));
    if (d.role == BufferRole::Param || d.role == BufferRole::State) {
      if (b >= persistent.size() ||
          persistent[b].bytes.size() != static_cast<size_t>(persistent[b].numel()) * elem_bytes(persistent[b].type))
        fail(fmt::format("{} '{}' has no storage", d.role == BufferRole::Param ? "parameter" : "state", d.name));
    }
  }
}

Executor::~Executor() = default;

void Executor::fail(const std::string& msg) const { throw RuntimeError(fmt::format("function '{}': {}", fn_.name, msg)); }

void Executor::bind(std::span<const HostTensor* const> feeds, const std::map<std::string, int64_t>& symbols) {
  const auto& names = program_.symbols;
  std::vector<int64_t> vals(names.size(), kUnbound);
  for (const auto& [name, v] : symbols)
    if (auto id = program_.symbol_id(name)) vals[*id] = v;
  if (feeds.size() != fn_.feeds.size())
    fail(fmt::format("expected {} feeds, got {}", fn_.feeds.size(), feeds.size()));
  auto feed_name = [&](const Feed& f) {
    return fn_.micro_batches > 1 && f.name[0] != '$' ? fmt::format("'{}' (micro-batch {})", f.name, f.micro)
                                                     : fmt::format("'{}'", f.name);
  };
  for (size_t i = 0; i < feeds.size(); ++i) {
    const Feed& f = fn_.feeds[i];
    const BufferDesc& d = program_.buffers[f.buffer];
    const HostTensor* t = feeds[i];
    if (!t) fail(fmt::format("missing input {}", feed_name(f)));
    if (t->type != d.type)
      fail(fmt::format("input {} has type {}, expected {}", feed_name(f), elem_name(t->type), elem_name(d.type)));
    if (t->shape.size() == d.shape.size())
      for (size_t k = 0; k < d.shape.size(); ++k)
        if (auto s = binding_symbol(d.shape[k]); s && vals[*s] == kUnbound) vals[*s] = t->shape[k];
  }
  for (size_t i = 0; i < feeds.size(); ++i) {
    const Feed& f = fn_.feeds[i];
    const BufferDesc& d = program_.buffers[f.buffer];
    const HostTensor* t = feeds[i];
    bool ok = t->shape.size() == d.shape.size();
    for (size_t k = 0; ok && k < d.shape.size(); ++k)
      ok = unbound_symbol(d.shape[k], vals) < 0 && d.shape[k].eval(vals) == t->shape[k];
    if (!ok) {
      // Name the bindings the expected shape depends on: "(B = 64)".
      std::string bound;
      std::vector<bool> seen(names.size(), false);
      for (const SizeExpr& e : d.shape)
        for (const SizeExpr::Term& term : e.terms)
          for (uint32_t s : term.symbols)
            if (s < names.size() && !seen[s]) {
              seen[s] = true;
              bound += (bound.empty() ? "" : ", ") + names[s] + " = " +
                       (vals[s] == kUnbound ? std::string("unbound") : std::to_string(vals[s]));
            }
      fail(fmt::format("input {} has shape {}, expected {}{}", feed_name(f), t->shape_str(),
                       expr_shape_str(d.shape, names), bound.empty() ? "" : " (" + bound + ")"));
    }
    if (t->bytes.size() != static_cast<size_t>(t->numel()) * elem_bytes(t->type))
      fail(fmt::format("input {} holds {} bytes, but its shape {} needs {}", feed_name(f), t->bytes.size(), t->shape_str(),
                       static_cast<size_t>(t->numel()) * elem_bytes(t->type)));
  }
  if (vals != values_ || !laid_out_) {
    // A layout that failed (out of memory) leaves none: the next run lays out again.
    values_ = vals;
    laid_out_ = false;
    lay_out();
    laid_out_ = true;
  }
}

void Executor::lay_out() {
  Layout& L = *layout_;
  const auto& names = program_.symbols;
  auto eval = [&](const SizeExpr& e, const std::string& what) {
    int64_t s = unbound_symbol(e, values_);
    if (s >= 0)
      fail(fmt::format("{} depends on symbol '{}', which no input binds", what,
                       static_cast<size_t>(s) < names.size() ? names[static_cast<size_t>(s)] : "?"));
    int64_t v = e.eval(values_);
    if (v < 0) fail(fmt::format("{} evaluates to {} (negative)", what, v));
    return v;
  };
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    if (!L.used[b]) continue;
    const BufferDesc& d = program_.buffers[b];
    std::vector<int64_t>& shape = L.shapes[b];
    shape.clear();
    for (const SizeExpr& e : d.shape) shape.push_back(eval(e, fmt::format("the shape of buffer '{}'", d.name)));
    if ((d.role == BufferRole::Temp || d.role == BufferRole::Output) && !options_.arena) {
      size_t bytes = elem_bytes(d.type);
      for (int64_t x : shape)
        if (__builtin_mul_overflow(bytes, static_cast<size_t>(x), &bytes)) fail(fmt::format("buffer '{}' is too large", d.name));
      size_t cap = std::max<size_t>(bytes, 1);
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
    } else if (d.role == BufferRole::Param || d.role == BufferRole::State) {
      HostTensor& t = persistent_[b];
      if (t.shape != shape || t.type != d.type)
        fail(fmt::format("persistent buffer '{}' holds {}{}, expected {}{}", d.name, elem_name(t.type), t.shape_str(),
                         elem_name(d.type), shape_str(shape)));
    }
  }
  if (options_.arena) {
    // Every temp and output at its offset in one arena (runtime/memory_plan.h), the layout
    // `modelc --emit=memory` predicts. The arena itself is taken for each run (run()).
    try {
      L.plan = plan_function_memory(program_, fn_, values_);
    } catch (const RuntimeError& e) {
      fail(e.what());
    }
  }
  L.sizes.resize(fn_.instrs.size());
  L.extents.assign(fn_.instrs.size(), 0);
  for (size_t i = 0; i < fn_.instrs.size(); ++i) {
    const Instr& in = fn_.instrs[i];
    if (in.kind != Instr::Kind::Kernel) continue;
    const std::string& kname = program_.kernels[in.kernel].name;
    L.sizes[i].clear();
    for (const SizeExpr& e : in.sizes) {
      int64_t s = unbound_symbol(e, values_);
      if (s >= 0) fail(fmt::format("kernel '{}' at {} depends on symbol '{}', which no input binds", kname, in.where, names[static_cast<size_t>(s)]));
      L.sizes[i].push_back(e.eval(values_));  // sizes may be negative (offsets)
    }
    L.extents[i] = eval(in.extent, fmt::format("the extent of kernel '{}' at {}", kname, in.where));
  }
  ++layouts_;
}

int64_t Executor::arena_bytes() const { return static_cast<int64_t>(layout_->arena_bytes); }

int64_t Executor::planned_arena_bytes() const { return layout_->plan.size; }

void Executor::run_instr(size_t i) {
  const Instr& in = fn_.instrs[i];
  Layout& L = *layout_;
  if (in.kind == Instr::Kind::Kernel) {
    std::vector<void*> bufs;
    bufs.reserve(in.inputs.size() + in.outputs.size());
    for (uint32_t b : in.inputs) bufs.push_back(b == kNoBuffer ? nullptr : L.ptrs[b]);
    for (uint32_t b : in.outputs) bufs.push_back(L.ptrs[b]);
    HostKernelFn host = program_.kernels[in.kernel].host;
    const int64_t* sizes = L.sizes[i].data();
    void* const* ptrs = bufs.data();
    pool_.parallel_for(L.extents[i], in.grain, [&](int64_t b, int64_t e) { host(ptrs, sizes, b, e); });
    return;
  }
  kernels::LibCall call;
  call.op = in.op;
  call.where = in.where;
  call.ints = &in.ints;
  call.floats = &in.floats;
  call.pool = &pool_;
  auto arg = [&](uint32_t b) {
    kernels::TensorArg a;
    if (b == kNoBuffer) return a;
    a.data = L.ptrs[b];
    a.type = program_.buffers[b].type;
    a.shape = L.shapes[b];
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
    const auto need = static_cast<size_t>(std::max<int64_t>(L.plan.size, kArenaAlignment));
    try {
      arena = allocate(options_.allocator, need, "the arena of its temporaries");
    } catch (const RuntimeError& e) {
      fail(e.what());
    }
    L.arena_bytes = need;
    for (const BufferLife& l : L.plan.lives) L.ptrs[l.buffer] = arena.get() + L.plan.offset[l.buffer];
  }
  for (size_t i = 0; i < feeds.size(); ++i)
    L.ptrs[fn_.feeds[i].buffer] = data_or_empty(*feeds[i]);
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    BufferRole r = program_.buffers[b].role;
    if (L.used[b] && (r == BufferRole::Param || r == BufferRole::State)) L.ptrs[b] = data_or_empty(persistent_[b]);
  }
  for (size_t i = 0; i < fn_.instrs.size(); ++i) {
    try {
      run_instr(i);
    } catch (const RuntimeError& e) {
      fail(e.what());
    }
  }
  for (const auto& [from, to] : fn_.updates) {
    size_t n = static_cast<size_t>(persistent_[to].numel()) * elem_bytes(persistent_[to].type);
    const BufferDesc& src = program_.buffers[from];
    size_t have = elem_bytes(src.type);
    for (int64_t d : L.shapes[from]) have *= static_cast<size_t>(d);
    if (have != n || src.type != persistent_[to].type)
      fail(fmt::format("update of '{}' from '{}': {}{} does not match {}{}", program_.buffers[to].name, src.name,
                       elem_name(src.type), shape_str(L.shapes[from]), elem_name(persistent_[to].type), persistent_[to].shape_str()));
    if (L.ptrs[from] != persistent_[to].bytes.data() && n) std::memmove(persistent_[to].bytes.data(), L.ptrs[from], n);
  }
  std::map<std::string, HostTensor> out;
  for (const auto& [name, b] : fn_.outputs) {
    HostTensor t(program_.buffers[b].type, L.shapes[b]);
    if (!t.bytes.empty()) std::memcpy(t.bytes.data(), L.ptrs[b], t.bytes.size());
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace modelc::rt

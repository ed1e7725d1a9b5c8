#include "runtime/execution/function_layout.h"

#include <fmt/format.h>

#include <limits>
#include <optional>

namespace modelc::rt {
namespace {

constexpr int64_t kUnbound = std::numeric_limits<int64_t>::min();

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

}  // namespace

FunctionLayout::FunctionLayout(const Program& program, const Function& fn, bool plan_arena)
    : program_(program), fn_(fn), plan_arena_(plan_arena) {
  const size_t nb = program.buffers.size();
  used_.assign(nb, false);
  shapes_.resize(nb);
  auto use = [&](uint32_t id, const std::string& what) {
    if (id == kNoBuffer) return;
    if (id >= nb) fail(fmt::format("{} names buffer {}, but the program has {} buffers", what, id, nb));
    used_[id] = true;
  };
  std::vector<bool> fed(nb, false);
  for (const Feed& f : fn.feeds) {
    use(f.buffer, fmt::format("feed '{}'", f.name));
    if (f.buffer == kNoBuffer) fail(fmt::format("feed '{}' has no buffer", f.name));
    if (program.buffers[f.buffer].role != BufferRole::Input)
      fail(fmt::format("feed '{}' writes buffer '{}', which is not an input", f.name, program.buffers[f.buffer].name));
    fed[f.buffer] = true;
  }
  for (size_t i = 0; i < fn.instrs.size(); ++i) {
    const Instr& in = fn.instrs[i];
    std::string what = in.kind == Instr::Kind::Library ? fmt::format("library op '{}' at {}", in.op, in.where)
                                                       : fmt::format("instruction {} at {}", i, in.where);
    for (uint32_t b : in.inputs) use(b, what);
    for (uint32_t b : in.outputs) {
      if (b == kNoBuffer) fail(what + " has an absent output");
      use(b, what);
    }
    if (in.kind == Instr::Kind::Codelet && in.codelet >= program.codelets.size())
      fail(fmt::format("{} names kernel {}, but the program has {} kernels", what, in.codelet, program.codelets.size()));
  }
  for (const auto& [name, b] : fn.outputs) use(b, fmt::format("output '{}'", name));
  for (const auto& [from, to] : fn.updates) {
    use(from, "an update");
    use(to, "an update");
    if (!is_persistent(program.buffers[to].role))
      fail(fmt::format("an update writes buffer '{}', which is neither a parameter nor optimizer state",
                       program.buffers[to].name));
  }
  for (size_t b = 0; b < nb; ++b)
    if (used_[b] && program.buffers[b].role == BufferRole::Input && !fed[b])
      fail(fmt::format("input buffer '{}' is used but never fed", program.buffers[b].name));
}

void FunctionLayout::fail(const std::string& msg) const { throw RuntimeError(fmt::format("function '{}': {}", fn_.name, msg)); }

std::string FunctionLayout::feed_name(size_t i) const {
  const Feed& f = fn_.feeds[i];
  return fn_.micro_batches > 1 && f.name[0] != '$' ? fmt::format("'{}' (micro-batch {})", f.name, f.micro)
                                                   : fmt::format("'{}'", f.name);
}

size_t FunctionLayout::bytes(uint32_t b) const {
  size_t n = dtype_bytes(program_.buffers[b].type);
  for (int64_t x : shapes_[b])
    if (__builtin_mul_overflow(n, static_cast<size_t>(x), &n)) fail(fmt::format("buffer '{}' is too large", program_.buffers[b].name));
  return n;
}

bool FunctionLayout::bind(std::span<const HostTensor* const> feeds, const std::map<std::string, int64_t>& symbols) {
  const auto& names = program_.symbols;
  std::vector<int64_t> vals(names.size(), kUnbound);
  for (const auto& [name, v] : symbols)
    if (auto id = program_.symbol_id(name)) vals[*id] = v;
  if (feeds.size() != fn_.feeds.size()) fail(fmt::format("expected {} feeds, got {}", fn_.feeds.size(), feeds.size()));
  for (size_t i = 0; i < feeds.size(); ++i) {
    const BufferDesc& d = program_.buffers[fn_.feeds[i].buffer];
    const HostTensor* t = feeds[i];
    if (!t) fail(fmt::format("missing input {}", feed_name(i)));
    if (t->type != d.type) fail(fmt::format("input {} has type {}, expected {}", feed_name(i), dtype_name(t->type), dtype_name(d.type)));
    if (t->shape.size() == d.shape.size())
      for (size_t k = 0; k < d.shape.size(); ++k)
        if (auto s = binding_symbol(d.shape[k]); s && vals[*s] == kUnbound) vals[*s] = t->shape[k];
  }
  for (size_t i = 0; i < feeds.size(); ++i) {
    const BufferDesc& d = program_.buffers[fn_.feeds[i].buffer];
    const HostTensor* t = feeds[i];
    bool ok = t->shape.size() == d.shape.size();
    for (size_t k = 0; ok && k < d.shape.size(); ++k) ok = unbound_symbol(d.shape[k], vals) < 0 && d.shape[k].eval(vals) == t->shape[k];
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
      fail(fmt::format("input {} has shape {}, expected {}{}", feed_name(i), t->shape_str(), expr_shape_str(d.shape, names),
                       bound.empty() ? "" : " (" + bound + ")"));
    }
    if (t->bytes.size() != static_cast<size_t>(t->numel()) * dtype_bytes(t->type))
      fail(fmt::format("input {} holds {} bytes, but its shape {} needs {}", feed_name(i), t->bytes.size(), t->shape_str(),
                       static_cast<size_t>(t->numel()) * dtype_bytes(t->type)));
  }
  if (vals == values_ && laid_out_) return false;
  // A layout that failed leaves none: the next run lays out again.
  values_ = vals;
  laid_out_ = false;
  lay_out();
  laid_out_ = true;
  return true;
}

void FunctionLayout::lay_out() {
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
    if (!used_[b]) continue;
    const BufferDesc& d = program_.buffers[b];
    shapes_[b].clear();
    for (const SizeExpr& e : d.shape) shapes_[b].push_back(eval(e, fmt::format("the shape of buffer '{}'", d.name)));
  }
  if (plan_arena_) {
    try {
      plan_ = plan_function_memory(program_, fn_, values_);
    } catch (const RuntimeError& e) {
      fail(e.what());
    }
  }
  sizes_.resize(fn_.instrs.size());
  extents_.assign(fn_.instrs.size(), 0);
  for (size_t i = 0; i < fn_.instrs.size(); ++i) {
    const Instr& in = fn_.instrs[i];
    // A library op's size table: the run's symbols a keyed op draws with ($seed, $step).
    const std::string& kname = in.kind == Instr::Kind::Codelet ? program_.codelets[in.codelet].name : in.op;
    sizes_[i].clear();
    for (const SizeExpr& e : in.sizes) {
      int64_t s = unbound_symbol(e, values_);
      if (s >= 0)
        fail(fmt::format("kernel '{}' at {} depends on symbol '{}', which no input binds", kname, in.where,
                         names[static_cast<size_t>(s)]));
      sizes_[i].push_back(e.eval(values_));  // sizes may be negative (offsets)
    }
    if (in.kind == Instr::Kind::Codelet)
      extents_[i] = eval(in.extent, fmt::format("the extent of kernel '{}' at {}", kname, in.where));
  }
  ++layouts_;
}

}  // namespace modelc::rt

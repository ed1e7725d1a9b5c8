#include "compiler/lowered/memory_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/ir/op_registry.h"
#include "runtime/base/bytes.h"
#include "runtime/base/error.h"
#include "runtime/device/memory/caching_allocator.h"

namespace modelc {

const char* mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::Parameters: return "parameters";
    case MemKind::Buffers: return "buffers";
    case MemKind::OptimizerState: return "optimizer state";
    case MemKind::Gradients: return "gradients";
    case MemKind::Activations: return "activations";
    case MemKind::Temporaries: return "backward temporaries";
    case MemKind::Workspace: return "workspace";
    case MemKind::Inputs: return "inputs";
  }
  return "?";
}

namespace {

// The nodes the graph's `loss` output depends on (all nodes when it has none: eval).
std::vector<bool> forward_nodes(const Graph& g) {
  const Graph::Output* loss = nullptr;
  for (const Graph::Output& o : g.outputs)
    if (o.name == "loss") loss = &o;
  if (!loss || g.updates.empty()) return std::vector<bool>(g.nodes.size(), true);
  std::vector<bool> fwd(g.nodes.size(), false);
  std::vector<NodeId> stack{loss->value.node};
  while (!stack.empty()) {
    NodeId id = stack.back();
    stack.pop_back();
    if (fwd[id]) continue;
    fwd[id] = true;
    for (const Value& v : g.nodes[id].inputs)
      if (v.valid() && !fwd[v.node]) stack.push_back(v.node);
  }
  return fwd;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t total_bytes(const rt::Program& p, uint32_t b, const std::vector<int64_t>& symbols) {
  try {
    return rt::buffer_bytes(p, b, symbols);
  } catch (const rt::RuntimeError& e) {
    throw UserError(fmt::format("cannot size the memory plan: {} (bind it with -D NAME=VALUE)", e.what()));
  }
}

}  // namespace

std::vector<BufferOrigin> buffer_origins(const rt::Program& p,
                                         const std::vector<std::pair<std::string, Value>>& values,
                                         const std::map<std::string, const Graph*>& graphs,
                                         const std::function<std::string(SourceLoc)>& describe) {
  std::map<std::string, std::vector<bool>> forward;
  for (const auto& [name, g] : graphs) forward[name] = forward_nodes(*g);
  std::vector<BufferOrigin> out(p.buffers.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const rt::BufferDesc& d = p.buffers[b];
    BufferOrigin& o = out[b];
    o.what = d.name;
    switch (d.role) {
      case rt::BufferRole::Param: o.kind = MemKind::Parameters; continue;
      case rt::BufferRole::State: o.kind = MemKind::OptimizerState; continue;
      case rt::BufferRole::Buffer: o.kind = MemKind::Buffers; continue;
      case rt::BufferRole::Input: o.kind = MemKind::Inputs; continue;
      default: break;
    }
    if (b >= values.size()) continue;
    const auto& [fn, v] = values[b];
    auto g = graphs.find(fn);
    if (!v.valid() || g == graphs.end() || v.node >= g->second->nodes.size()) continue;
    const Node& n = g->second->nodes[v.node];
    o.what = fmt::format("{} %{}", op_name(n.op), v.node);
    if (describe && n.loc.valid()) o.where = describe(n.loc);
    if (ends_with(d.name, ".partials")) {
      o.kind = MemKind::Workspace;
      o.what += " (partial sums)";
    } else if (n.name.rfind("grad ", 0) == 0) {
      o.kind = MemKind::Gradients;
      o.what = n.name;
    } else {
      o.kind = forward.at(fn)[v.node] ? MemKind::Activations : MemKind::Temporaries;
    }
  }
  return out;
}

MemoryPrediction predict_memory(const rt::Program& p, const std::string& function,
                                const std::vector<BufferOrigin>& origins, const std::vector<int64_t>& symbols) {
  const rt::Function* fn = p.function(function);
  if (!fn) throw InternalError(fmt::format("predict_memory: the program has no function '{}'", function));
  MemoryPrediction m;
  m.function = function;
  m.symbols = symbols;
  for (const rt::BufferDesc& d : p.buffers)
    for (const rt::SizeExpr& e : d.shape)
      for (const rt::SizeExpr::Term& t : e.terms)
        for (uint32_t s : t.symbols)
          if (s >= symbols.size() || symbols[s] == std::numeric_limits<int64_t>::min())
            throw UserError(fmt::format("cannot size buffer '{}': it depends on '{}', which is not bound (bind it "
                                        "with -D {}=VALUE)",
                                        d.name, s < p.symbols.size() ? p.symbols[s] : "?",
                                        s < p.symbols.size() ? p.symbols[s] : "NAME"));
  try {
    m.plan = rt::plan_function_memory(p, *fn, symbols);
  } catch (const rt::RuntimeError& e) {
    throw UserError(fmt::format("cannot plan the memory of '{}': {}", function, e.what()));
  }
  // Persistent buffers: every param, buffer and state of the program (a session holds them all).
  for (uint32_t b = 0; b < p.buffers.size(); ++b) {
    const rt::BufferDesc& d = p.buffers[b];
    if (!rt::is_persistent(d.role)) continue;
    int64_t bytes = total_bytes(p, b, symbols);
    m.persistent += bytes;
    const MemKind kind = d.role == rt::BufferRole::Param    ? MemKind::Parameters
                         : d.role == rt::BufferRole::Buffer ? MemKind::Buffers
                                                            : MemKind::OptimizerState;
    m.at_peak[static_cast<size_t>(b < origins.size() ? origins[b].kind : kind)] += bytes;
  }
  for (const rt::Feed& f : fn->feeds) {
    int64_t bytes = total_bytes(p, f.buffer, symbols);
    m.inputs += bytes;
    m.at_peak[static_cast<size_t>(MemKind::Inputs)] += bytes;
  }
  for (const rt::BufferLife& l : m.plan.lives)
    if (l.first <= m.plan.peak_instr && m.plan.peak_instr <= l.last)
      m.at_peak[static_cast<size_t>(l.buffer < origins.size() ? origins[l.buffer].kind : MemKind::Temporaries)] += l.bytes;
  // The executor takes at least one alignment unit, from the caching allocator.
  m.arena_block = static_cast<int64_t>(
      rt::CachingAllocator::block_size(static_cast<size_t>(std::max<int64_t>(m.plan.size, rt::kArenaAlignment))));
  m.fragmentation = m.arena_block - m.plan.lower_bound;
  m.peak = m.persistent + m.inputs + m.arena_block;
  return m;
}

std::vector<int64_t> bind_symbols(const rt::Program& p, const std::string& function,
                                  const std::map<std::string, int64_t>& bindings) {
  std::vector<int64_t> symbols(p.symbols.size(), std::numeric_limits<int64_t>::min());
  auto batch = batch_symbol(p, function);
  for (size_t s = 0; s < p.symbols.size(); ++s) {
    if (auto it = bindings.find(p.symbols[s]); it != bindings.end()) symbols[s] = it->second;
    else if (p.symbols[s][0] == '$') symbols[s] = 0;
    else if (batch && *batch == s && p.function("train_step") && p.train.batch > 0)  // a train section's
      symbols[s] = p.train.batch / std::max<int64_t>(1, p.train.accumulate);
  }
  for (const auto& [name, v] : bindings)
    if (!p.symbol_id(name)) throw UserError(fmt::format("-D {}: the compiled step has no dim '{}' to bind", name, name));
  return symbols;
}

std::map<std::string, int64_t> bound_dims(const rt::Program& p, const std::vector<int64_t>& symbols) {
  std::map<std::string, int64_t> dims;
  for (size_t s = 0; s < p.symbols.size() && s < symbols.size(); ++s)
    if (p.symbols[s][0] != '$' && symbols[s] != std::numeric_limits<int64_t>::min()) dims[p.symbols[s]] = symbols[s];
  return dims;
}

std::optional<uint32_t> batch_symbol(const rt::Program& p, const std::string& function) {
  const rt::Function* fn = p.function(function);
  if (!fn) return std::nullopt;
  for (const rt::Feed& f : fn->feeds) {
    if (f.name.empty() || f.name[0] == '$') continue;
    const rt::BufferDesc& d = p.buffers.at(f.buffer);
    if (d.shape.empty()) continue;
    const rt::SizeExpr& e = d.shape[0];
    if (e.terms.size() == 1 && e.terms[0].coef == 1 && e.terms[0].symbols.size() == 1) return e.terms[0].symbols[0];
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::pair<int64_t, int64_t>> largest_fitting(const rt::Program& p, const std::string& function,
                                                           const std::vector<BufferOrigin>& origins,
                                                           std::vector<int64_t> symbols, uint32_t symbol, int64_t memory) {
  auto peak_at = [&](int64_t v) -> std::optional<int64_t> {
    symbols.at(symbol) = v;
    try {
      return predict_memory(p, function, origins, symbols).peak;
    } catch (const UserError&) {
      return std::nullopt;  // too large to size (overflow): does not fit
    }
  };
  auto fits = [&](int64_t v) {
    auto pk = peak_at(v);
    return pk && *pk <= memory;
  };
  if (!fits(1)) return std::nullopt;
  int64_t lo = 1, hi = 2;
  constexpr int64_t kMax = int64_t{1} << 40;
  while (hi <= kMax && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > kMax) return std::make_pair(lo, *peak_at(lo));
  while (hi - lo > 1) {  // fits(lo), !fits(hi)
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return std::make_pair(lo, *peak_at(lo));
}

std::string print_memory_report(const rt::Program& p, const std::vector<BufferOrigin>& origins,
                                const MemoryPrediction& m, const MemoryReportOptions& o) {
  std::string bound;
  for (size_t s = 0; s < p.symbols.size() && s < m.symbols.size(); ++s)
    if (p.symbols[s][0] != '$') bound += fmt::format("{}{} = {}", bound.empty() ? "" : ", ", p.symbols[s], m.symbols[s]);
  std::string out = fmt::format("memory plan of {} '{}'{}\n", p.model, m.function, bound.empty() ? "" : " (" + bound + ")");
  out += fmt::format("predicted peak: {} ({} bytes)\n", format_bytes(m.peak), m.peak);
  auto row = [&](const std::string& name, int64_t bytes) {
    double pct = m.peak > 0 ? 100.0 * static_cast<double>(bytes) / static_cast<double>(m.peak) : 0.0;
    out += fmt::format("  {:<22}{:>12}  {:5.1f}%\n", name, format_bytes(bytes), pct);
  };
  for (int k = 0; k < kMemKinds; ++k)
    if (static_cast<MemKind>(k) != MemKind::Buffers || m.at_peak[static_cast<size_t>(k)] > 0)
      row(mem_kind_name(static_cast<MemKind>(k)), m.at_peak[static_cast<size_t>(k)]);
  row("arena fragmentation", m.fragmentation);
  const rt::Function& fn = *p.function(m.function);
  if (m.function == "train_step") {
    // Frozen parameters (the train section's `freeze`): the step never updates them.
    std::vector<bool> updated(p.buffers.size(), false);
    for (const auto& [from, to] : fn.updates) updated[to] = true;
    int64_t frozen = 0, frozen_bytes = 0;
    for (uint32_t b = 0; b < p.buffers.size(); ++b)
      if (p.buffers[b].role == rt::BufferRole::Param && !updated[b]) {
        ++frozen;
        frozen_bytes += total_bytes(p, b, m.symbols);
      }
    if (frozen)
      out += fmt::format("  of the parameters, {} in {} tensor{} {} frozen: no gradients, no optimizer state\n",
                         format_bytes(frozen_bytes), frozen, frozen == 1 ? "" : "s", frozen == 1 ? "is" : "are");
  }
  std::string at = m.plan.peak_instr < fn.instrs.size() ? fn.instrs[m.plan.peak_instr].where : "the end";
  const int64_t gap_bytes = m.plan.size - m.plan.lower_bound;
  double gap = m.plan.lower_bound > 0 ? 100.0 * static_cast<double>(gap_bytes) / static_cast<double>(m.plan.lower_bound) : 0;
  out += fmt::format("arena: {} for {} buffer{} over {} instruction{} (greedy placement); lower bound {} (+{:.1f}%), "
                     "reached at instruction {} ({}); allocator block {}\n",
                     format_bytes(m.plan.size), m.plan.lives.size(), m.plan.lives.size() == 1 ? "" : "s",
                     fn.instrs.size(), fn.instrs.size() == 1 ? "" : "s", format_bytes(m.plan.lower_bound),
                     gap, m.plan.peak_instr, at.empty() ? "no source line" : at, format_bytes(m.arena_block));
  std::vector<const rt::BufferLife*> big;
  for (const rt::BufferLife& l : m.plan.lives) big.push_back(&l);
  std::stable_sort(big.begin(), big.end(), [](auto* a, auto* b) { return a->bytes > b->bytes; });
  if (big.size() > o.top) big.resize(o.top);
  if (!big.empty()) out += fmt::format("largest buffers:\n");
  for (const rt::BufferLife* l : big) {
    const BufferOrigin& bo = origins.at(l->buffer);
    bool live_at_peak = l->first <= m.plan.peak_instr && m.plan.peak_instr <= l->last;
    out += fmt::format("  {:>12}  {:<20} live {}-{}{}  {}  {}\n", format_bytes(l->bytes), mem_kind_name(bo.kind), l->first,
                       l->last, live_at_peak ? " (at peak)" : "", bo.what, bo.where);
  }
  if (o.memory) {
    auto sym = batch_symbol(p, m.function);
    if (!sym) {
      out += fmt::format("in {}: the peak {} (the batch dim is fixed)\n", format_bytes(*o.memory),
                         m.peak <= *o.memory ? "fits" : "does not fit");
    } else {
      auto best = largest_fitting(p, m.function, origins, m.symbols, *sym, *o.memory);
      if (best)
        out += fmt::format("in {}: the largest {} that fits is {} (peak {})\n", format_bytes(*o.memory), p.symbols[*sym],
                           best->first, format_bytes(best->second));
      else
        out += fmt::format("in {}: nothing fits, not even {} = 1\n", format_bytes(*o.memory), p.symbols[*sym]);
    }
  }
  return out;
}

std::string print_recompute_report(const RecomputeReport& r, int64_t peak, size_t top) {
  const RecomputePlacement& pl = r.placement;
  if (r.recomputed.empty())
    return r.budget ? fmt::format("recomputation: the budget of {} needs no recomputation (peak {})\n", format_bytes(*r.budget),
                                  format_bytes(peak))
                    : "recomputation: none (no --mem-budget or mem_budget, no @checkpoint)\n";
  auto gflop = [](double f) { return fmt::format("{:.3f} GFLOP", f / 1e9); };
  std::string out = fmt::format("recomputation ({}{}): recompute {} activations, +{} per step ({:+.1f}% of {})\n",
                                pl.algorithm, r.budget ? ", budget " + format_bytes(*r.budget) : std::string(),
                                r.recomputed.size(), gflop(pl.recompute_flops),
                                pl.step_flops > 0 ? 100 * pl.recompute_flops / pl.step_flops : 0.0, gflop(pl.step_flops));
  if (pl.peak_before > 0)
    out += fmt::format("  peak without recomputation {}, with it {} ({} placements sized)\n", format_bytes(pl.peak_before),
                       format_bytes(peak), pl.evaluations);
  for (size_t i = 0; i < r.recomputed.size() && i < top; ++i) {
    const RecomputeReport::Value& v = r.recomputed[i];
    out += fmt::format("  {:>12}  {:>14}  {}  {}\n", format_bytes(v.bytes), fmt::format("{:.2f} MFLOP", v.flops / 1e6),
                       v.what, v.where);
  }
  if (r.recomputed.size() > top) out += fmt::format("  ... and {} more\n", r.recomputed.size() - top);
  return out;
}

}  // namespace modelc

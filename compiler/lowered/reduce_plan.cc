// How a reduction runs, from its shapes (compiler/lowered/reduce_plan.h; the emitters are
// in codelets_reduce.cc, whose header comment gives the forms and the measurements).
#include "compiler/lowered/reduce_plan.h"

#include <algorithm>
#include <map>
#include <string>

#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// Output columns per work item of a column reduction (CodeletBuilder::tile_reduce): 16 f32
// are one 64-byte cache line of a row.
constexpr int64_t kTile = 16;
// A reduction with fewer work items than this (outputs), or a column reduction, over at
// least two chunks of elements per work item runs in two phases.
constexpr int64_t kFewItems = 64;
// Elements per chunk of a two-phase reduction, at least (when there are that many), and the
// most chunks per work item.
constexpr int64_t kChunk = 4096;
constexpr int64_t kMaxChunks = 64;

// A dim's value with every symbol at 64 (estimate's guess for one symbolic dim, here for
// products such as B*T*C), capped at 2^30.
int64_t guess(const Dim& d) {
  if (d.is_const()) return std::max<int64_t>(d.const_value(), 1);
  std::map<std::string, int64_t> values;
  for (const std::string& s : d.symbols()) values[s] = 64;
  try {
    return std::clamp<int64_t>(d.evaluate(values).value_or(1 << 30), 1, 1 << 30);
  } catch (const DimOverflow&) {
    return 1 << 30;
  }
}

std::vector<bool> reduced_axes(const Graph& g, const Node& n) {
  std::vector<bool> reduced(g.type(n.inputs.at(0)).shape.size(), false);
  for (int64_t a : n.attrs.ints("axes")) reduced.at(static_cast<size_t>(a)) = true;
  return reduced;
}

bool sums_f64(const Graph& g, const Node& n) {
  return n.op == OpKind::CrossEntropy || (n.op != OpKind::Max && g.type(n.inputs.at(0)).dtype != DType::I32);
}

}  // namespace

int64_t estimate(const Shape& s) {
  int64_t n = 1;
  for (const Dim& d : s) n = std::min<int64_t>(n * (d.is_const() ? std::max<int64_t>(d.const_value(), 1) : 64), 1 << 30);
  return n;
}

Geometry geometry(const Graph& g, const Node& n) {
  const Shape& xs = g.type(n.inputs.at(0)).shape;
  const std::vector<bool> reduced = reduced_axes(g, n);
  Geometry geo;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (reduced[d]) geo.count = geo.count * xs[d];
    else geo.outputs = geo.outputs * xs[d];
    if (xs[d] == Dim(1)) continue;
    if (!geo.groups.empty() && geo.groups.back().reduced == reduced[d]) geo.groups.back().extent = geo.groups.back().extent * xs[d];
    else geo.groups.push_back({xs[d], reduced[d]});
  }
  Dim st = 1;
  for (size_t j = geo.groups.size(); j-- > 0;) {
    geo.groups[j].stride = st;
    st = st * geo.groups[j].extent;
  }
  int64_t longest = -1;
  for (size_t j = 0, r = 0; j < geo.groups.size(); ++j) {
    if (!geo.groups[j].reduced) continue;
    if (int64_t e = guess(geo.groups[j].extent); e > longest) {
      longest = e;
      geo.chunked = r;  // among the reduced groups
    }
    ++r;
  }
  geo.column = longest >= 0 && !geo.groups.back().reduced;
  if (geo.column) geo.columns = geo.groups.back().extent;
  return geo;
}


std::optional<int64_t> tiles_per_row(const Geometry& geo, int64_t tile) {
  if (!geo.columns.is_const()) return std::nullopt;
  return (geo.columns.const_value() + tile - 1) / tile;
}

std::pair<Dim, int64_t> one_phase_items(const Graph& g, const Node& n, const ReducePlan& p) {
  if (n.op == OpKind::CrossEntropy) return {Dim(1), estimate(g.type(n.inputs.at(0)).shape)};
  const Geometry geo = geometry(g, n);
  if (!geo.column) return {geo.outputs, guess(geo.count)};
  const int64_t width = geo.columns.is_const() ? std::min(p.tile, geo.columns.const_value()) : p.tile;
  Dim items = geo.outputs;
  if (std::optional<int64_t> t = tiles_per_row(geo, p.tile)) {
    Dim outer = 1;
    for (size_t j = 0; j + 1 < geo.groups.size(); ++j)
      if (!geo.groups[j].reduced) outer = outer * geo.groups[j].extent;
    items = outer * Dim(*t);
  }
  return {items, guess(geo.count) * width};
}

ReducePlan plan_reduction(const Graph& g, const Node& n) {
  ReducePlan p;
  int64_t longest = 0;  // the chunked extent, when it is a constant
  if (n.op == OpKind::CrossEntropy) {
    Dim positions = 1;
    for (const Dim& d : g.type(n.inputs.at(1)).shape) positions = positions * d;
    if (positions.is_const()) longest = positions.const_value();
  } else {
    const Geometry geo = geometry(g, n);
    if (geo.column) p.tile = kTile;
    for (size_t j = 0, r = 0; j < geo.groups.size(); ++j)
      if (geo.groups[j].reduced && r++ == geo.chunked && geo.groups[j].extent.is_const()) longest = geo.groups[j].extent.const_value();
  }
  const auto [items, work] = one_phase_items(g, n, p);
  // A column reduction's tiles split their rows whatever their number: a tile that walked
  // every row would read one cache line per row, a row apart (measured: 2.4x slower than
  // chunks of rows for 128 tiles of [8192, 2048] rows).
  if (!items.is_const() || (items.const_value() >= kFewItems && p.tile == 1) || work < 2 * kChunk) return p;
  p.chunks = std::clamp<int64_t>(work / kChunk, 2, kMaxChunks);
  if (longest > 0) p.chunks = std::min(p.chunks, longest);
  if (p.chunks < 2) {
    p.chunks = 1;
    return p;
  }
  const int64_t outputs = n.op == OpKind::CrossEntropy ? 1 : estimate(n.outputs.at(0).shape);
  p.scratch_type = n.op != OpKind::CrossEntropy && g.type(n.inputs.at(0)).dtype == DType::I32 ? DType::I32 : DType::F32;
  // cross_entropy's partials are a sum and a count of positions, each an f64.
  p.scratch_elements = outputs * p.chunks * (sums_f64(g, n) ? 2 : 1) * (n.op == OpKind::CrossEntropy ? 2 : 1);
  return p;
}

ReduceWork reduction_work(const Graph& g, const Node& n, const ReducePlan& p, ReducePhase phase) {
  ReduceWork w;
  const int64_t chunks = p.chunks;
  if (phase == ReducePhase::Finish) {
    w.extent = n.op == OpKind::CrossEntropy ? Dim(1) : [&] { Dim c = 1; for (const Dim& d : n.outputs.at(0).shape) c = c * d; return c; }();
    w.grain = std::max<int64_t>(1, 16384 / chunks);
    return w;
  }
  auto [items, work] = one_phase_items(g, n, p);
  if (phase == ReducePhase::Partial) {
    items = items * Dim(chunks);
    work = std::max<int64_t>(1, work / chunks);
  }
  w.extent = items;
  w.grain = std::max<int64_t>(1, 16384 / work);
  // GPU: a block per work item for cross_entropy (a position per thread), for many elements
  // per work item, or for too few work items to fill the GPU with a thread each.
  if (n.op == OpKind::CrossEntropy) {
    const int64_t positions = estimate(g.type(n.inputs.at(1)).shape);
    w.gpu_elements = std::max<int64_t>(1, 4 * positions / (phase == ReducePhase::Partial ? chunks : 1));
    return w;
  }
  const Geometry geo = geometry(g, n);
  int64_t reduced = guess(geo.count);
  if (phase == ReducePhase::Partial) reduced = std::max<int64_t>(1, reduced / chunks);
  const int64_t outputs = guess(items);
  if (phase == ReducePhase::Partial || reduced >= 256 || outputs * 32 <= reduced) w.gpu_elements = work;
  return w;
}

}  // namespace modelc

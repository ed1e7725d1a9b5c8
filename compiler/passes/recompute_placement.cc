#include "compiler/passes/recompute_placement.h"

#include "compiler/ir/op_registry.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace modelc {

double node_flops(const Graph& g, NodeId id, const std::map<std::string, int64_t>& dims) {
  try {
    std::optional<int64_t> v = op_flops(g, id).evaluate(dims);
    return v ? static_cast<double>(*v) : 0.0;
  } catch (const DimOverflow&) {
    return 0.0;
  }
}

namespace {

// The FLOPs the clones of a drop set add to the step (a dropped node no backward node needs
// gets no clone, and costs nothing).
double clone_flops(const Graph& step, const std::vector<NodeId>& drop, const std::map<std::string, int64_t>& dims) {
  double f = 0;
  for (const auto& [clone, original] : recompute(step, drop).original) f += node_flops(step, original, dims);
  return f;
}

std::vector<NodeId> merged(const std::vector<NodeId>& a, const std::vector<NodeId>& b) {
  std::set<NodeId> s(a.begin(), a.end());
  s.insert(b.begin(), b.end());
  return {s.begin(), s.end()};
}

}  // namespace

// Long by design: one algorithm read top to bottom: the greedy search and its give-back phase share their state.
RecomputePlacement place_recomputation(const Graph& step, const PlacementOptions& o) {
  RecomputePlacement r;
  for (NodeId id = 0; id < step.nodes.size(); ++id) r.step_flops += node_flops(step, id, o.dims);
  const std::vector<NodeId> base = o.annotations ? annotated_drop(step) : std::vector<NodeId>{};
  auto finish = [&](const std::vector<NodeId>& drop) {
    r.drop = merged(drop, {});
    r.recompute_flops = clone_flops(step, r.drop, o.dims);
  };
  auto peak = [&](const std::vector<NodeId>& drop) {
    ++r.evaluations;
    return o.peak(recompute(step, drop).graph);
  };
  r.algorithm = o.annotations ? "@checkpoint" : "none";
  if (!o.budget) {
    finish(base);
    return r;
  }
  const int64_t budget = *o.budget;
  r.peak_before = peak({});
  if (o.algorithm == RecomputeAlgorithm::SqrtN) {
    r.algorithm = "sqrt(n)";
    std::vector<NodeId> drop = merged(base, sqrt_n_drop(step, bytes_under(o.dims)));
    r.peak_after = peak(drop);
    r.fits = r.peak_after <= budget;
    finish(drop);
    return r;
  }
  r.algorithm = "greedy";
  const StepParts parts = split_step(step);
  const ByteSize bytes = bytes_under(o.dims);
  // Candidates by bytes freed per recomputed FLOP (ties: larger first, then earlier).
  struct Candidate {
    NodeId id;
    double bytes, flops;
  };
  std::vector<Candidate> cands;
  std::map<NodeId, double> flops_of;
  for (NodeId id : parts.saved) {
    double b = 0;
    for (const TensorType& t : step.nodes[id].outputs) b += static_cast<double>(bytes(t));
    cands.push_back({id, b, node_flops(step, id, o.dims)});
    flops_of[id] = cands.back().flops;
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    double sa = a.bytes / std::max(a.flops, 1.0), sb = b.bytes / std::max(b.flops, 1.0);
    if (sa != sb) return sa > sb;
    return a.bytes > b.bytes;
  });
  const std::set<NodeId> forced(base.begin(), base.end());
  // Plans compare by what finish() reports: the FLOPs of the clones they create.
  auto cost = [&](const std::vector<NodeId>& d) { return clone_flops(step, d, o.dims); };

  // From one start: add candidates in ranked order, each that does not raise the peak,
  // until it fits; then give back, most expensive first, what the budget does not need.
  struct Result {
    std::vector<NodeId> drop;
    int64_t peak;
  };
  auto descend = [&](std::vector<NodeId> cur) {
    int64_t pcur = peak(cur);
    for (size_t i = 0; pcur > budget && i < cands.size(); ++i) {
      if (std::binary_search(cur.begin(), cur.end(), cands[i].id)) continue;
      std::vector<NodeId> trial = merged(cur, {cands[i].id});
      int64_t pt = peak(trial);
      if (pt > pcur) continue;
      cur = std::move(trial);
      pcur = pt;
    }
    if (pcur <= budget) {
      std::vector<NodeId> order;
      for (NodeId id : cur)
        if (!forced.count(id)) order.push_back(id);
      std::stable_sort(order.begin(), order.end(), [&](NodeId a, NodeId b) { return flops_of[a] > flops_of[b]; });
      constexpr size_t kMaxTries = 16;  // the few most expensive hold most of the cost
      for (size_t i = 0; i < order.size() && i < kMaxTries; ++i) {
        std::vector<NodeId> trial;
        for (NodeId id : cur)
          if (id != order[i]) trial.push_back(id);
        int64_t pt = peak(trial);
        if (pt <= budget) {
          cur = std::move(trial);
          pcur = pt;
        }
      }
    }
    return Result{cur, pcur};
  };

  // Starts: the forced set alone, and the forced set with Chen's segmentation into k
  // parts for k = sqrt(n) / 2, sqrt(n), 2 sqrt(n) (so the sqrt(n) placement itself is one of
  // them: the result never recomputes more than it when it fits). The fitting result that recomputes the
  // fewest FLOPs wins; without one, the lowest peak.
  std::vector<std::vector<NodeId>> starts{base};
  const auto root = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(parts.saved.size()))));
  const std::set<int64_t> ks{std::max<int64_t>(2, root / 2), root, 2 * root};
  for (int64_t k : ks) starts.push_back(merged(base, segment_drop(step, bytes, k)));
  std::optional<Result> best;
  for (const std::vector<NodeId>& s0 : starts) {
    Result res = descend(s0);
    auto better = [&](const Result& a, const Result& b) {
      bool fa = a.peak <= budget, fb = b.peak <= budget;
      if (fa != fb) return fa;
      if (!fa) return a.peak < b.peak;
      double ca = cost(a.drop), cb = cost(b.drop);
      return ca != cb ? ca < cb : a.peak < b.peak;
    };
    if (!best || better(res, *best)) best = std::move(res);
  }
  r.peak_after = best->peak;
  r.fits = best->peak <= budget;
  finish(best->drop);
  return r;
}

}  // namespace modelc

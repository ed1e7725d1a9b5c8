#include "compiler/passes/checkpoint.h"

#include <algorithm>
#include <set>

namespace modelc {

double node_flops(const Graph& g, NodeId id, const std::map<std::string, int64_t>& dims) {
  try {
    std::optional<int64_t> v = recompute_flops(g, id).evaluate(dims);
    return v ? static_cast<double>(*v) : 0.0;
  } catch (const DimOverflow&) {
    return 0.0;
  }
}

namespace {

std::vector<NodeId> merged(const std::vector<NodeId>& a, const std::vector<NodeId>& b) {
  std::set<NodeId> s(a.begin(), a.end());
  s.insert(b.begin(), b.end());
  return {s.begin(), s.end()};
}

}  // namespace

CheckpointPlacement place_checkpoints(const Graph& step, const CheckpointOptions& o) {
  CheckpointPlacement r;
  for (NodeId id = 0; id < step.nodes.size(); ++id) r.step_flops += node_flops(step, id, o.dims);
  const std::vector<NodeId> base = annotated_drop(step);
  auto finish = [&](std::vector<NodeId> drop) {
    r.drop = merged(drop, {});
    Recomputed rc = recompute(step, r.drop);
    r.recompute_flops = 0;
    for (const auto& [clone, original] : rc.original) r.recompute_flops += node_flops(step, original, o.dims);
    return rc;
  };
  auto peak = [&](const std::vector<NodeId>& drop) {
    ++r.evaluations;
    return o.peak(recompute(step, drop).graph);
  };
  r.algorithm = "@checkpoint";
  if (!o.budget) {
    finish(base);
    return r;
  }
  const int64_t budget = *o.budget;
  r.peak_before = peak({});
  if (o.algorithm == CheckpointAlgorithm::SqrtN) {
    r.algorithm = "sqrt(n)";
    std::vector<NodeId> drop = merged(base, sqrt_n_drop(step, bytes_under(o.dims)));
    r.peak_after = peak(drop);
    r.fits = r.peak_after <= budget;
    finish(drop);
    return r;
  }
  r.algorithm = "greedy";
  std::vector<NodeId> cur = base;
  int64_t pcur = base.empty() ? r.peak_before : peak(base);
  if (pcur > budget) {
    // Candidates by bytes freed per recomputed FLOP (ties: larger first, then earlier).
    const StepParts parts = split_step(step);
    const ByteSize bytes = bytes_under(o.dims);
    const std::set<NodeId> in_base(base.begin(), base.end());
    struct Candidate {
      NodeId id;
      double bytes, flops;
    };
    std::vector<Candidate> cands;
    for (NodeId id : parts.saved) {
      if (in_base.count(id)) continue;
      double b = 0;
      for (const TensorType& t : step.nodes[id].outputs) b += static_cast<double>(bytes(t));
      cands.push_back({id, b, node_flops(step, id, o.dims)});
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
      double sa = a.bytes / std::max(a.flops, 1.0), sb = b.bytes / std::max(b.flops, 1.0);
      if (sa != sb) return sa > sb;
      return a.bytes > b.bytes;
    });
    // Take each candidate whose recomputation does not raise the peak. (Dropping more is
    // not always better: a dropped value whose inputs are dropped too is recomputed from
    // further back, and a whole recomputed chain is live at once in the backward.)
    std::vector<Candidate> chosen;
    for (const Candidate& c : cands) {
      std::vector<NodeId> trial = merged(cur, {c.id});
      int64_t pt = peak(trial);
      if (pt > pcur) continue;
      cur = std::move(trial);
      pcur = pt;
      chosen.push_back(c);
      if (pcur <= budget) break;
    }
    if (pcur <= budget) {
      // Give back what the budget does not need, the most expensive recomputation first (a
      // bounded number of tries: each is one evaluation of the oracle).
      std::stable_sort(chosen.begin(), chosen.end(), [](const Candidate& a, const Candidate& b) { return a.flops > b.flops; });
      constexpr size_t kMaxTries = 32;
      for (size_t i = 0; i < chosen.size() && i < kMaxTries; ++i) {
        std::vector<NodeId> trial;
        for (NodeId id : cur)
          if (id != chosen[i].id) trial.push_back(id);
        int64_t pt = peak(trial);
        if (pt <= budget) {
          cur = std::move(trial);
          pcur = pt;
        }
      }
    }
  }
  r.peak_after = pcur;
  r.fits = pcur <= budget;
  finish(cur);
  return r;
}

}  // namespace modelc

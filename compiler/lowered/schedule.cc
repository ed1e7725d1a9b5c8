// Stream scheduling: dependencies, list scheduling onto streams, minimal events.
#include "compiler/lowered/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "runtime/execution/streams.h"

namespace modelc {

std::vector<std::vector<uint32_t>> instruction_deps(const rt::Program& p, const rt::Function& fn) {
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  const size_t nb = p.buffers.size();
  std::vector<uint32_t> writer(nb, kNone);
  std::vector<std::vector<uint32_t>> readers(nb);  // since the last write
  std::vector<std::vector<uint32_t>> deps(fn.instrs.size());
  for (uint32_t i = 0; i < fn.instrs.size(); ++i) {
    const rt::Instr& in = fn.instrs[i];
    std::vector<uint32_t>& d = deps[i];
    auto writes = [&](uint32_t b) { return std::find(in.outputs.begin(), in.outputs.end(), b) != in.outputs.end(); };
    for (uint32_t b : in.inputs) {
      if (b == rt::kNoBuffer || b >= nb || writes(b)) continue;
      if (writer[b] != kNone) d.push_back(writer[b]);  // read after write
      readers[b].push_back(i);
    }
    for (uint32_t b : in.outputs) {
      if (b >= nb || writer[b] == i) continue;
      if (writer[b] != kNone) d.push_back(writer[b]);            // write after write (or in place: after write)
      for (uint32_t r : readers[b]) d.push_back(r);              // write after read
      readers[b].clear();
      writer[b] = i;
    }
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    if (!d.empty() && d.back() == i) d.pop_back();  // read then written by itself: no dependency
  }
  return deps;
}

// Long by design: one algorithm (list scheduling, then the events) over shared tables.
ScheduleStats schedule_streams(const rt::Program& p, rt::Function& fn, uint32_t streams) {
  streams = std::max<uint32_t>(streams, 1);
  const auto n = static_cast<uint32_t>(fn.instrs.size());
  const auto deps = instruction_deps(p, fn);
  ScheduleStats stats;
  for (const auto& d : deps) stats.dependencies += d.size();
  for (rt::Instr& in : fn.instrs) {
    in.stream = 0;
    in.waits.clear();
    in.records.clear();
  }
  fn.streams = 1;
  fn.events = 0;
  if (streams == 1 || n == 0) return stats;

  // Streams: list scheduling with unit costs.
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::vector<int64_t> finish(n, 0), avail(streams, 0);
  std::vector<uint32_t> tail(streams, kNone);
  uint32_t used = 1;
  for (uint32_t i = 0; i < n; ++i) {
    int64_t ready = 0;
    for (uint32_t d : deps[i]) ready = std::max(ready, finish[d]);
    uint32_t best = 0;
    int64_t best_start = std::numeric_limits<int64_t>::max();
    bool best_chain = false;
    for (uint32_t s = 0; s < streams; ++s) {
      int64_t start = std::max(avail[s], ready);
      bool chain = tail[s] != kNone && std::binary_search(deps[i].begin(), deps[i].end(), tail[s]);
      if (start < best_start || (start == best_start && chain && !best_chain)) {
        best = s;
        best_start = start;
        best_chain = chain;
      }
    }
    fn.instrs[i].stream = best;
    finish[i] = best_start + 1;
    avail[best] = finish[i];
    tail[best] = i;
    used = std::max(used, best + 1);
  }
  fn.streams = used;

  // Events: for each instruction, its dependencies on other streams, latest first, each
  // waited for only when the order so far (its stream's previous instruction and the
  // waits already chosen, transitively) does not already imply it.
  const size_t words = (n + 63) / 64;
  std::vector<uint64_t> reach(static_cast<size_t>(n) * words, 0);  // row i: what finishes before i starts
  auto has = [&](const std::vector<uint64_t>& row, uint32_t a) { return row[a / 64] >> (a % 64) & 1; };
  auto merge = [&](std::vector<uint64_t>& row, uint32_t a) {
    const uint64_t* from = &reach[static_cast<size_t>(a) * words];
    for (size_t w = 0; w <= a / 64; ++w) row[w] |= from[w];
    row[a / 64] |= uint64_t{1} << (a % 64);
  };
  std::vector<uint32_t> event_of(n, kNone);
  std::vector<uint32_t> prev_on(used, kNone);
  std::vector<uint64_t> cover(words);
  for (uint32_t i = 0; i < n; ++i) {
    rt::Instr& in = fn.instrs[i];
    std::fill(cover.begin(), cover.end(), 0);
    if (prev_on[in.stream] != kNone) merge(cover, prev_on[in.stream]);
    for (auto it = deps[i].rbegin(); it != deps[i].rend(); ++it) {
      const uint32_t d = *it;
      if (fn.instrs[d].stream == in.stream) continue;  // implied by stream order
      ++stats.cross;
      if (has(cover, d)) continue;
      if (event_of[d] == kNone) event_of[d] = fn.events++;
      in.waits.push_back(event_of[d]);
      merge(cover, d);
    }
    std::copy(cover.begin(), cover.end(), reach.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * words));
    prev_on[in.stream] = i;
  }
  // Number the events in the order of their recorders.
  std::vector<uint32_t> renumber(fn.events, kNone);
  uint32_t next = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (event_of[i] != kNone) {
      renumber[event_of[i]] = next;
      fn.instrs[i].records.push_back(next++);
    }
  for (rt::Instr& in : fn.instrs)
    for (uint32_t& e : in.waits) e = renumber[e];
  stats.streams = fn.streams;
  stats.events = fn.events;
  return stats;
}

std::string verify_schedule(const rt::Program& p, const rt::Function& fn, bool minimal) {
  if (std::string e = rt::check_stream_structure(fn); !e.empty()) return e;
  auto ordered = [&](const rt::Function& f) -> std::string {
    rt::StreamOrder order(f);
    const auto deps = instruction_deps(p, f);
    for (uint32_t i = 0; i < f.instrs.size(); ++i)
      for (uint32_t d : deps[i])
        if (!order.before(d, i))
          return fmt::format("instruction {} depends on instruction {}, but the schedule does not order them", i, d);
    return "";
  };
  if (std::string e = ordered(fn); !e.empty()) return e;
  if (!minimal) return "";
  rt::Function copy = fn;
  for (uint32_t i = 0; i < fn.instrs.size(); ++i)
    for (size_t k = 0; k < fn.instrs[i].waits.size(); ++k) {
      std::vector<uint32_t>& w = copy.instrs[i].waits;
      const uint32_t e = w[k];
      w.erase(w.begin() + static_cast<std::ptrdiff_t>(k));
      const bool needed = !ordered(copy).empty();
      w.insert(w.begin() + static_cast<std::ptrdiff_t>(k), e);
      if (!needed) return fmt::format("instruction {} waits for event {}, but every dependency is ordered without it", i, e);
    }
  return "";
}

}  // namespace modelc

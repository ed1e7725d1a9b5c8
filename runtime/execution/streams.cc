// Streams and events of a Function: structure and race checks, happens-before, arena hazards.
#include "runtime/execution/streams.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace modelc::rt {

std::string check_stream_structure(const Function& fn) {
  if (fn.streams == 0) return "the function has 0 streams";
  constexpr uint32_t kNone = UINT32_MAX;
  std::vector<uint32_t> recorder(fn.events, kNone);
  const auto n = static_cast<uint32_t>(fn.instrs.size());
  for (uint32_t i = 0; i < n; ++i) {
    const Instr& in = fn.instrs[i];
    if (in.stream >= fn.streams)
      return fmt::format("instruction {} runs on stream {}, but the function has {} streams", i, in.stream, fn.streams);
    for (uint32_t e : in.records) {
      if (e >= fn.events)
        return fmt::format("instruction {} records event {}, but the function has {} events", i, e, fn.events);
      if (recorder[e] != kNone)
        return fmt::format("event {} is recorded twice (instructions {} and {})", e, recorder[e], i);
      recorder[e] = i;
    }
  }
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t e : fn.instrs[i].waits) {
      if (e >= fn.events)
        return fmt::format("instruction {} waits for event {}, but the function has {} events", i, e, fn.events);
      if (recorder[e] == kNone) return fmt::format("instruction {} waits for event {}, which no instruction records", i, e);
      if (recorder[e] >= i)
        return fmt::format("instruction {} waits for event {}, which instruction {} records {}", i, e, recorder[e],
                           recorder[e] == i ? "itself" : "after it");
    }
  return "";
}

StreamOrder::StreamOrder(const Function& fn, const std::vector<std::pair<uint32_t, uint32_t>>& extra) {
  n_ = fn.instrs.size();
  words_ = (n_ + 63) / 64;
  bits_.assign(n_ * words_, 0);
  std::vector<uint32_t> recorder(fn.events, UINT32_MAX);
  for (uint32_t i = 0; i < n_; ++i)
    for (uint32_t e : fn.instrs[i].records) recorder.at(e) = i;
  std::vector<std::vector<uint32_t>> more(n_);
  for (const auto& [a, b] : extra)
    if (a < b && b < n_) more[b].push_back(a);
  std::vector<uint32_t> tail(fn.streams, UINT32_MAX);  // the last instruction of each stream so far
  for (uint32_t b = 0; b < n_; ++b) {
    const Instr& in = fn.instrs[b];
    uint64_t* row = &bits_[static_cast<size_t>(b) * words_];
    auto add = [&](uint32_t a) {
      if (a >= b) return;
      const uint64_t* from = &bits_[static_cast<size_t>(a) * words_];
      for (size_t w = 0; w <= a / 64; ++w) row[w] |= from[w];
      row[a / 64] |= uint64_t{1} << (a % 64);
    };
    if (in.stream < tail.size() && tail[in.stream] != UINT32_MAX) add(tail[in.stream]);
    for (uint32_t e : in.waits)
      if (e < recorder.size() && recorder[e] != UINT32_MAX) add(recorder[e]);
    for (uint32_t a : more[b]) add(a);
    if (in.stream < tail.size()) tail[in.stream] = b;
  }
}

std::string check_stream_races(const Program& p, const Function& fn, const StreamOrder& order) {
  constexpr uint32_t kNone = UINT32_MAX;
  const size_t nb = p.buffers.size();
  std::vector<uint32_t> writer(nb, kNone);
  std::vector<std::vector<uint32_t>> readers(nb);  // since the last write
  auto name = [&](uint32_t b) { return b < nb ? p.buffers[b].name : std::string("?"); };
  auto race = [&](uint32_t a, uint32_t i, uint32_t b, const char* what) {
    return fmt::format("instructions {} and {} are not ordered, but {} buffer {} ('{}'): one may run while the other does",
                       a, i, what, b, name(b));
  };
  for (uint32_t i = 0; i < fn.instrs.size(); ++i) {
    const Instr& in = fn.instrs[i];
    auto writes = [&](uint32_t b) { return std::find(in.outputs.begin(), in.outputs.end(), b) != in.outputs.end(); };
    for (uint32_t b : in.inputs) {
      if (b == kNoBuffer || b >= nb || writes(b)) continue;
      if (writer[b] != kNone && writer[b] != i && !order.before(writer[b], i))
        return race(writer[b], i, b, "the first writes what the second reads,");
      readers[b].push_back(i);
    }
    for (uint32_t b : in.outputs) {
      if (b == kNoBuffer || b >= nb || writer[b] == i) continue;
      if (writer[b] != kNone && !order.before(writer[b], i)) return race(writer[b], i, b, "both write");
      for (uint32_t r : readers[b])
        if (r != i && !order.before(r, i)) return race(r, i, b, "the second overwrites what the first reads,");
      readers[b].clear();
      writer[b] = i;
    }
  }
  return "";
}

std::vector<std::pair<uint32_t, uint32_t>> arena_hazards(const Function& fn, const ArenaPlan& plan,
                                                         const StreamOrder& order) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  if (fn.streams <= 1 || plan.lives.empty()) return out;
  // The instructions that touch each arena buffer.
  std::map<uint32_t, std::vector<uint32_t>> touch;
  for (const BufferLife& l : plan.lives) touch[l.buffer];
  for (uint32_t i = 0; i < fn.instrs.size(); ++i) {
    const Instr& in = fn.instrs[i];
    for (const auto* list : {&in.inputs, &in.outputs})
      for (uint32_t b : *list)
        if (auto it = touch.find(b); it != touch.end() && (it->second.empty() || it->second.back() != i))
          it->second.push_back(i);
  }
  // By (later, stream of earlier): the latest earlier instruction that is not yet ordered.
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> need;
  for (const BufferLife& x : plan.lives) {
    const int64_t xo = plan.offset.at(x.buffer);
    for (const BufferLife& y : plan.lives) {
      if (x.last >= y.first) continue;  // y does not start after x ended
      const int64_t yo = plan.offset.at(y.buffer);
      if (!(xo < yo + y.bytes && yo < xo + x.bytes)) continue;  // no shared bytes
      const uint32_t w = y.first;
      for (uint32_t a : touch[x.buffer]) {
        if (order.before(a, w)) continue;
        auto [it, fresh] = need.try_emplace({w, fn.instrs[a].stream}, a);
        if (!fresh) it->second = std::max(it->second, a);
      }
    }
  }
  for (const auto& [key, a] : need) out.emplace_back(a, key.first);
  std::sort(out.begin(), out.end());
  return out;
}

StreamEvents with_extra_waits(const Function& fn, const std::vector<std::pair<uint32_t, uint32_t>>& extra) {
  StreamEvents ev;
  ev.events = fn.events;
  const size_t n = fn.instrs.size();
  ev.waits.resize(n);
  ev.records.resize(n);
  for (size_t i = 0; i < n; ++i) {
    ev.waits[i] = fn.instrs[i].waits;
    ev.records[i] = fn.instrs[i].records;
  }
  for (const auto& [a, b] : extra) {
    if (a >= b || b >= n) continue;  // not an ordering a later wait can give
    if (ev.records[a].empty()) ev.records[a].push_back(ev.events++);
    uint32_t e = ev.records[a].front();
    if (std::find(ev.waits[b].begin(), ev.waits[b].end(), e) == ev.waits[b].end()) ev.waits[b].push_back(e);
  }
  return ev;
}

}  // namespace modelc::rt

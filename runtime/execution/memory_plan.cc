#include "runtime/execution/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "runtime/base/error.h"

namespace modelc::rt {

int64_t buffer_bytes(const Program& p, uint32_t b, std::span<const int64_t> symbols) {
  const BufferDesc& d = p.buffers.at(b);
  int64_t bytes = static_cast<int64_t>(dtype_bytes(d.type));
  for (const SizeExpr& e : d.shape) {
    int64_t n = 0;
    try {
      n = e.eval(symbols);
    } catch (const std::exception& ex) {
      throw RuntimeError(fmt::format("buffer '{}': {}", d.name, ex.what()));
    }
    if (n < 0) throw RuntimeError(fmt::format("buffer '{}' has a negative dim ({})", d.name, n));
    if (__builtin_mul_overflow(bytes, n, &bytes)) throw RuntimeError(fmt::format("buffer '{}' is too large", d.name));
  }
  return bytes;
}

namespace {

int64_t round_up(int64_t bytes) {
  int64_t units = std::max<int64_t>(1, (bytes + kArenaAlignment - 1) / kArenaAlignment);
  return units * kArenaAlignment;
}

bool overlaps(const BufferLife& a, const BufferLife& b) { return a.first <= b.last && b.first <= a.last; }

}  // namespace

std::vector<BufferLife> buffer_lives(const Program& p, const Function& fn, std::span<const int64_t> symbols) {
  const size_t nb = p.buffers.size();
  const auto n = static_cast<uint32_t>(fn.instrs.size());
  constexpr uint32_t kNever = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> first(nb, kNever), last(nb, 0);
  auto in_arena = [&](uint32_t b) {
    if (b == kNoBuffer || b >= nb) return false;
    BufferRole r = p.buffers[b].role;
    return r == BufferRole::Temp || r == BufferRole::Output;
  };
  for (uint32_t i = 0; i < n; ++i) {
    const Instr& in = fn.instrs[i];
    for (uint32_t b : in.inputs)
      if (in_arena(b)) last[b] = std::max(last[b], i);
    for (uint32_t b : in.outputs)
      if (in_arena(b)) {
        first[b] = std::min(first[b], i);
        last[b] = std::max(last[b], i);
      }
  }
  for (const auto& [name, b] : fn.outputs)
    if (in_arena(b)) last[b] = n;
  for (const auto& [from, to] : fn.updates)
    if (in_arena(from)) last[from] = n;
  std::vector<BufferLife> lives;
  for (uint32_t b = 0; b < nb; ++b) {
    if (first[b] == kNever) continue;
    lives.push_back({b, round_up(buffer_bytes(p, b, symbols)), first[b], std::max(first[b], last[b])});
  }
  return lives;
}

namespace {

// Places the buffers in `order`, each at the best-fitting gap among the placed buffers
// whose lives overlap its own (the smallest gap it fits in), else on top of them. Returns
// the offsets (by index into `lives`) and the arena size.
std::pair<std::vector<int64_t>, int64_t> place(const std::vector<BufferLife>& lives, const std::vector<size_t>& order) {
  std::vector<size_t> placed;  // indices into lives, kept sorted by offset
  std::vector<int64_t> at(lives.size(), -1);
  int64_t size = 0;
  for (size_t k : order) {
    const BufferLife& l = lives[k];
    int64_t best = -1, best_gap = std::numeric_limits<int64_t>::max(), top = 0;
    int64_t cursor = 0;
    for (size_t j : placed) {
      if (!overlaps(l, lives[j])) continue;
      int64_t gap = at[j] - cursor;
      if (gap >= l.bytes && gap < best_gap) {
        best = cursor;
        best_gap = gap;
      }
      cursor = std::max(cursor, at[j] + lives[j].bytes);
      top = std::max(top, cursor);
    }
    if (best < 0) best = top;
    at[k] = best;
    size = std::max(size, best + l.bytes);
    auto pos = std::upper_bound(placed.begin(), placed.end(), best, [&](int64_t off, size_t j) { return off < at[j]; });
    placed.insert(pos, k);
  }
  return {std::move(at), size};
}

}  // namespace

ArenaPlan plan_arena(std::vector<BufferLife> lives, size_t buffer_count, uint32_t instr_count) {
  ArenaPlan plan;
  plan.offset.assign(buffer_count, -1);
  plan.live_bytes.assign(static_cast<size_t>(instr_count) + 1, 0);
  for (const BufferLife& l : lives)
    for (uint32_t i = l.first; i <= l.last && i <= instr_count; ++i) plan.live_bytes[i] += l.bytes;
  for (uint32_t i = 0; i <= instr_count; ++i)
    if (plan.live_bytes[i] > plan.lower_bound) {
      plan.lower_bound = plan.live_bytes[i];
      plan.peak_instr = i;
    }
  std::sort(lives.begin(), lives.end(), [](const BufferLife& a, const BufferLife& b) { return a.buffer < b.buffer; });

  // Three orders, the smallest arena wins (ties: the earlier): greedy by size (largest
  // first, then the longer life); by "breadth" (bytes x instructions live); and by size
  // class (powers of two, largest first), then schedule order, which packs the many
  // same-sized activations and recomputed values of a deep step in the order they come and
  // go. On char_gpt with its @checkpoint blocks the three give +18 %, +18 % and +1 % over
  // the lower bound; on other steps greedy by size is often the best. Stable sorts over the
  // buffer-id order keep the plan deterministic.
  auto length = [](const BufferLife& x) { return static_cast<int64_t>(x.last - x.first) + 1; };
  auto size_class = [](int64_t b) { return 63 - __builtin_clzll(static_cast<unsigned long long>(b)); };
  std::vector<size_t> by_size(lives.size());
  for (size_t i = 0; i < by_size.size(); ++i) by_size[i] = i;
  std::vector<size_t> by_breadth = by_size, by_class = by_size;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
    const BufferLife &x = lives[a], &y = lives[b];
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    return length(x) > length(y);
  });
  std::stable_sort(by_breadth.begin(), by_breadth.end(), [&](size_t a, size_t b) {
    const BufferLife &x = lives[a], &y = lives[b];
    double bx = static_cast<double>(x.bytes) * static_cast<double>(length(x));
    double by = static_cast<double>(y.bytes) * static_cast<double>(length(y));
    if (bx != by) return bx > by;
    return x.bytes > y.bytes;
  });
  std::stable_sort(by_class.begin(), by_class.end(), [&](size_t a, size_t b) {
    const BufferLife &x = lives[a], &y = lives[b];
    if (size_class(x.bytes) != size_class(y.bytes)) return size_class(x.bytes) > size_class(y.bytes);
    return x.first < y.first;
  });
  auto [at, size] = place(lives, by_size);
  for (const auto* order : {&by_breadth, &by_class}) {
    auto [at2, size2] = place(lives, *order);
    if (size2 < size) {
      at = std::move(at2);
      size = size2;
    }
  }
  plan.size = size;
  for (size_t i = 0; i < lives.size(); ++i) plan.offset.at(lives[i].buffer) = at[i];
  plan.lives = std::move(lives);
  return plan;
}

ArenaPlan plan_function_memory(const Program& p, const Function& fn, std::span<const int64_t> symbols) {
  return plan_arena(buffer_lives(p, fn, symbols), p.buffers.size(), static_cast<uint32_t>(fn.instrs.size()));
}

std::string check_arena(const ArenaPlan& plan) {
  const auto& L = plan.lives;
  for (size_t a = 0; a < L.size(); ++a) {
    int64_t oa = plan.offset.at(L[a].buffer);
    if (oa < 0 || oa % kArenaAlignment || oa + L[a].bytes > plan.size)
      return fmt::format("buffer {} at offset {} ({} bytes) lies outside the arena of {} bytes", L[a].buffer, oa,
                         L[a].bytes, plan.size);
    for (size_t b = a + 1; b < L.size(); ++b) {
      if (!overlaps(L[a], L[b])) continue;
      int64_t ob = plan.offset.at(L[b].buffer);
      if (oa < ob + L[b].bytes && ob < oa + L[a].bytes)
        return fmt::format("buffers {} and {} are live together (instructions {}-{} and {}-{}) but overlap in memory",
                           L[a].buffer, L[b].buffer, L[a].first, L[a].last, L[b].first, L[b].last);
    }
  }
  return "";
}

}  // namespace modelc::rt

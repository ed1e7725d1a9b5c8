// Shared by the streams tests: host kernels that read across elements (so a race shows as a
// wrong value, and ThreadSanitizer sees it), random DAG programs over them, a random valid
// schedule (random streams, an event for every cross-stream dependency), and a runner.
// Links only the runtime, so the binary builds cheaply with ThreadSanitizer (MODELC_TSAN).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "runtime/execution/cpu/executor.h"
#include "tests/runtime/program_builder.h"
#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

// sizes[0] = n (elements). out[j] = a[j] / 2 + b[(7j + 3) mod n] / 4 + 1/8
inline void k_mix(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  auto* x = static_cast<const float*>(b[0]);
  auto* y = static_cast<const float*>(b[1]);
  auto* out = static_cast<float*>(b[2]);
  const int64_t n = s[0];
  for (int64_t j = begin; j < end; ++j) out[j] = x[j] * 0.5f + y[(7 * j + 3) % n] * 0.25f + 0.125f;
}

// out[j] = tanh(a[(j + 1) mod n]) + a[j] / 2
inline void k_unary(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  auto* x = static_cast<const float*>(b[0]);
  auto* out = static_cast<float*>(b[1]);
  const int64_t n = s[0];
  for (int64_t j = begin; j < end; ++j) out[j] = std::tanh(x[(j + 1) % n]) + x[j] * 0.5f;
}

// In place: p[j] -= g[(5j + 1) mod n] / 10 (buffers: p, g, then p again as the output)
inline void k_update(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  auto* p = static_cast<float*>(b[2]);
  auto* g = static_cast<const float*>(b[1]);
  const int64_t n = s[0];
  for (int64_t j = begin; j < end; ++j) p[j] -= g[(5 * j + 1) % n] * 0.1f;
}

// out[j] = a[n - 1 - j] (overwrites a buffer written before: write after write)
inline void k_reverse(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  auto* x = static_cast<const float*>(b[0]);
  auto* out = static_cast<float*>(b[1]);
  const int64_t n = s[0];
  for (int64_t j = begin; j < end; ++j) out[j] = x[n - 1 - j];
}

// A random DAG over f32[N] buffers: input x, params p0..p2, temps and outputs written by
// k_mix / k_unary, params updated in place (k_update), temps overwritten (k_reverse).
struct RandomDag {
  ProgramBuilder b;
  uint32_t x = 0;
  std::vector<uint32_t> params;
};

inline RandomDag random_dag(int instrs) {
  RandomDag d;
  ProgramBuilder& b = d.b;
  d.x = b.buffer("x", BufferRole::Input, {b.dim("N")});
  for (int k = 0; k < 3; ++k) d.params.push_back(b.buffer("p" + std::to_string(k), BufferRole::Param, {b.dim("N")}));
  const uint32_t km = b.kernel("mix", k_mix), ku = b.kernel("unary", k_unary), kp = b.kernel("update", k_update),
                 kr = b.kernel("reverse", k_reverse);
  Function& f = b.function("step");
  f.feeds.push_back({"x", 0, d.x});
  std::vector<uint32_t> values{d.x, d.params[0], d.params[1], d.params[2]}, temps;
  auto pick = [&](const std::vector<uint32_t>& v) { return v[static_cast<size_t>(rnd(0, static_cast<int64_t>(v.size()) - 1))]; };
  auto fresh = [&](bool output) {
    uint32_t id = b.buffer("t" + std::to_string(b.p.buffers.size()), output ? BufferRole::Output : BufferRole::Temp,
                           {b.dim("N")});
    values.push_back(id);
    if (output) f.outputs.emplace_back(b.p.buffers[id].name, id);
    else temps.push_back(id);
    return id;
  };
  const SizeExpr n = b.dim("N");
  for (int i = 0; i < instrs; ++i) {
    const int64_t what = rnd(0, 9);
    const bool last = i + 1 == instrs;
    if (!last && what == 0) {  // in-place update of a parameter
      uint32_t p = pick(d.params), g = p;
      while (g == p) g = pick(values);
      f.instrs.push_back(ProgramBuilder::kernel_call(kp, {p, g}, {p}, {n}, n, 64));
    } else if (!last && what == 1 && !temps.empty()) {  // overwrite a temp
      uint32_t t = pick(temps), a = t;
      while (a == t) a = pick(values);
      f.instrs.push_back(ProgramBuilder::kernel_call(kr, {a}, {t}, {n}, n, 64));
    } else if (what <= 4) {
      uint32_t a = pick(values);
      f.instrs.push_back(ProgramBuilder::kernel_call(ku, {a}, {fresh(last || rnd(0, 4) == 0)}, {n}, n, 64));
    } else {
      uint32_t a = pick(values), c = pick(values);
      f.instrs.push_back(ProgramBuilder::kernel_call(km, {a, c}, {fresh(last || rnd(0, 4) == 0)}, {n}, n, 64));
    }
  }
  return d;
}

// The direct dependencies of each instruction from its buffer accesses (read after write,
// write after read, write after write): the test's own, independent of the compiler's.
inline std::vector<std::vector<uint32_t>> test_deps(const Function& f, size_t nbuf) {
  std::vector<int64_t> writer(nbuf, -1);
  std::vector<std::vector<uint32_t>> readers(nbuf), deps(f.instrs.size());
  for (uint32_t i = 0; i < f.instrs.size(); ++i) {
    const Instr& in = f.instrs[i];
    for (uint32_t b : in.inputs) {
      if (std::count(in.outputs.begin(), in.outputs.end(), b)) continue;
      if (writer[b] >= 0) deps[i].push_back(static_cast<uint32_t>(writer[b]));
      readers[b].push_back(i);
    }
    for (uint32_t b : in.outputs) {
      if (writer[b] >= 0) deps[i].push_back(static_cast<uint32_t>(writer[b]));
      for (uint32_t r : readers[b]) deps[i].push_back(r);
      readers[b].clear();
      writer[b] = i;
    }
  }
  return deps;
}

// Random streams in [0, streams), and an event for every dependency across streams (one
// event per recording instruction): valid, not minimal.
inline void random_schedule(Function& f, size_t nbuf, uint32_t streams) {
  const auto deps = test_deps(f, nbuf);
  f.streams = streams;
  f.events = 0;
  std::vector<int64_t> event(f.instrs.size(), -1);
  for (Instr& in : f.instrs) {
    in.stream = static_cast<uint32_t>(rnd(0, streams - 1));
    in.waits.clear();
    in.records.clear();
  }
  for (uint32_t i = 0; i < f.instrs.size(); ++i)
    for (uint32_t d : deps[i]) {
      if (f.instrs[d].stream == f.instrs[i].stream) continue;
      if (event[d] < 0) {
        event[d] = f.events++;
        f.instrs[d].records.push_back(static_cast<uint32_t>(event[d]));
      }
      auto e = static_cast<uint32_t>(event[d]);
      if (!std::count(f.instrs[i].waits.begin(), f.instrs[i].waits.end(), e)) f.instrs[i].waits.push_back(e);
    }
}

// The bytes of every output and every parameter after `runs` runs of `fn`, each fed `x`.
struct RunResult {
  std::map<std::string, HostTensor> outputs;
  std::vector<HostTensor> params;
};

inline bool same_bytes(const HostTensor& a, const HostTensor& b) { return a.shape == b.shape && a.bytes == b.bytes; }

}  // namespace modelc::rt::test

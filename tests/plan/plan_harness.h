// Shared by the .plan tests: random batches for a Program's inputs, a few train steps
// through the runtime's Session, and an independent writer of the plan envelope (as
// docs/plan-format.md describes it) for crafting damaged plans. Runtime headers only: the
// runtime-only runner (tests/plan_wall) includes it too.
#pragma once

#include <zlib.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/program.h"
#include "runtime/session/session.h"
#include "runtime/base/tensor.h"

namespace modelc::plantest {

// One batch of `batch` examples for every input of "eval": f32 inputs normal(0, 1), i32
// inputs uniform in [0, 10) (valid class labels and token ids for the example models).
inline std::map<std::string, rt::HostTensor> random_batch(const rt::Program& p, int64_t batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::map<std::string, rt::HostTensor> out;
  const rt::Function* eval = p.function("eval");
  for (const rt::Feed& f : eval->feeds) {
    const rt::BufferDesc& d = p.buffers.at(f.buffer);
    std::vector<int64_t> shape;
    for (size_t k = 0; k < d.shape.size(); ++k) shape.push_back(k == 0 ? batch : d.shape[k].eval({}));
    rt::HostTensor t(d.type, shape);
    if (d.type == rt::ElemType::F32) {
      std::normal_distribution<float> n(0.f, 1.f);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = n(rng);
    } else {
      for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = static_cast<int32_t>(rng() % 10);
    }
    out[f.name] = std::move(t);
  }
  return out;
}

struct StepResult {
  std::vector<float> losses;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> persistent;  // params, buffers, then state
  std::map<std::string, rt::HostTensor> eval;
};

// `steps` train steps on batches from seeds 1..steps, then one eval on batch seed 99.
inline StepResult run_steps(std::shared_ptr<const rt::Program> p, int steps, int64_t batch, int threads = 2) {
  rt::SessionOptions so;
  so.threads = threads;
  so.seed = 5;
  so.total_steps = steps;
  rt::Session s(p, so);
  StepResult r;
  for (int i = 0; i < steps; ++i) r.losses.push_back(s.train_step(random_batch(*p, batch, static_cast<uint64_t>(i + 1))));
  for (const std::string& n : s.param_names()) r.persistent.emplace_back(n, s.param(n).bytes);
  for (const std::string& n : s.buffer_names()) r.persistent.emplace_back(n, s.buffer(n).bytes);
  for (const std::string& n : s.state_names()) r.persistent.emplace_back(n, s.state(n).bytes);
  r.eval = s.eval(random_batch(*p, batch, 99));
  return r;
}

inline uint32_t crc(const std::string& s) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(s.data()), s.size()));
}
inline void put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}
inline void put64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}
inline uint32_t get32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}
inline uint64_t get64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

struct Section {
  uint32_t kind;
  std::string bytes;
  int64_t offset = -1;  // -1: the next 16-byte boundary
};

struct Envelope {
  uint32_t version = 3, flags = 0, reserved = 0;  // rt::kPlanVersion
  std::vector<Section> sections;
  std::string trailing;  // bytes after the last section
};

// The plan's bytes as docs/plan-format.md specifies them, written without runtime/session/plan.cc.
inline std::string make_plan(const Envelope& e) {
  const size_t n = e.sections.size();
  std::string table(n * 32, '\0');
  size_t pos = 48 + table.size();
  std::vector<size_t> offsets;
  for (size_t i = 0; i < n; ++i) {
    const Section& s = e.sections[i];
    pos = s.offset >= 0 ? static_cast<size_t>(s.offset) : (pos + 15) / 16 * 16;
    offsets.push_back(pos);
    put32(table, i * 32, s.kind);
    put64(table, i * 32 + 8, pos);
    put64(table, i * 32 + 16, s.bytes.size());
    put32(table, i * 32 + 24, crc(s.bytes));
    pos += s.bytes.size();
  }
  size_t total = 48 + table.size();
  for (size_t i = 0; i < n; ++i) total = std::max(total, offsets[i] + e.sections[i].bytes.size());
  std::string out(total, '\0');
  std::memcpy(out.data(), "MODELCPL", 8);
  put32(out, 8, e.version);
  put32(out, 12, e.flags);
  put32(out, 16, static_cast<uint32_t>(n));
  put32(out, 20, crc(table));
  put64(out, 24, 48);
  put64(out, 32, total);
  put32(out, 40, e.reserved);
  put32(out, 44, crc(out.substr(0, 44)));
  out.replace(48, table.size(), table);
  for (size_t i = 0; i < n; ++i) out.replace(offsets[i], e.sections[i].bytes.size(), e.sections[i].bytes);
  return out + e.trailing;
}

// The sections of a well-formed plan, by table order.
inline std::vector<Section> sections_of(const std::string& plan) {
  std::vector<Section> out;
  const uint32_t n = get32(plan, 16);
  for (uint32_t i = 0; i < n; ++i) {
    const size_t e = 48 + size_t{i} * 32;
    Section s{get32(plan, e), plan.substr(get64(plan, e + 8), get64(plan, e + 16)), static_cast<int64_t>(get64(plan, e + 8))};
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace modelc::plantest

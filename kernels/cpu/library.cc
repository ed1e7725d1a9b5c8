// The library-op table (kernels/library_ops.def's names and CPU kernels) and the checks
// every op shares.
#include "runtime/base/tensor.h"
#include "kernels/cpu/library.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

namespace modelc::kernels {

// The CPU kernels of the table, declared by it.
#define MODELC_LIBRARY_OP(name, cpu, cuda) void cpu(const LibCall& c);
#include "kernels/library_ops.def"

namespace {

using rt::shape_str;

const std::map<std::string, LibraryFn>& table() {
  static const std::map<std::string, LibraryFn> t = {
#define MODELC_LIBRARY_OP(name, cpu, cuda) {#name, cpu},
#include "kernels/library_ops.def"
  };
  return t;
}

}  // namespace

void LibCall::fail(const std::string& msg) const {
  throw rt::RuntimeError(fmt::format("{} at {}: {}", op, where.empty() ? "<unknown location>" : where, msg));
}

const std::vector<int64_t>& LibCall::ints_attr(const std::string& name) const {
  if (ints) {
    auto it = ints->find(name);
    if (it != ints->end()) return it->second;
  }
  fail(fmt::format("missing attribute '{}'", name));
}

std::vector<int64_t> LibCall::ints_or(const std::string& name, std::vector<int64_t> fallback) const {
  if (ints) {
    auto it = ints->find(name);
    if (it != ints->end()) return it->second;
  }
  return fallback;
}

int64_t LibCall::int_attr(const std::string& name) const {
  const auto& v = ints_attr(name);
  if (v.size() != 1) fail(fmt::format("attribute '{}' must hold one integer, got {}", name, shape_str(v)));
  return v[0];
}

int64_t LibCall::int_or(const std::string& name, int64_t fallback) const {
  if (!ints || !ints->count(name)) return fallback;
  return int_attr(name);
}

double LibCall::float_attr(const std::string& name) const {
  if (floats) {
    auto it = floats->find(name);
    if (it != floats->end()) return it->second;
  }
  fail(fmt::format("missing attribute '{}'", name));
}

std::pair<int64_t, int64_t> LibCall::pair_attr(const std::string& name, std::pair<int64_t, int64_t> fallback) const {
  std::vector<int64_t> v = ints_or(name, {});
  if (v.empty()) return fallback;
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() == 2) return {v[0], v[1]};
  fail(fmt::format("attribute '{}' must have 1 or 2 entries, got {}", name, shape_str(v)));
}

void LibCall::expect_arity(size_t in_min, size_t in_max, size_t out_min, size_t out_max) const {
  if (inputs.size() < in_min || inputs.size() > in_max)
    fail(fmt::format("expects {} input{}, got {}", in_min == in_max ? std::to_string(in_min)
                     : fmt::format("{} to {}", in_min, in_max), in_max == 1 ? "" : "s", inputs.size()));
  if (outputs.size() < out_min || outputs.size() > out_max)
    fail(fmt::format("expects {} output{}, got {}", out_min == out_max ? std::to_string(out_min)
                     : fmt::format("{} to {}", out_min, out_max), out_max == 1 ? "" : "s", outputs.size()));
}

const TensorArg& LibCall::in(size_t i) const {
  if (i >= inputs.size() || !inputs[i].present()) fail(fmt::format("input {} is missing", i));
  return inputs[i];
}

const TensorArg& LibCall::out(size_t i) const {
  if (i >= outputs.size() || !outputs[i].present()) fail(fmt::format("output {} is missing", i));
  return outputs[i];
}

void LibCall::expect_type(const TensorArg& t, ElemType type, const char* role) const {
  if (t.type != type)
    fail(fmt::format("{} must be {}, got {}{}", role, dtype_name(type), dtype_name(t.type), shape_str(t.shape)));
}

void LibCall::expect_rank(const TensorArg& t, int rank, const char* role) const {
  if (t.rank() != rank)
    fail(fmt::format("{} must have rank {}, got {}{}", role, rank, dtype_name(t.type), shape_str(t.shape)));
}

LibraryFn find_library_op(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::string> library_op_names() {
  std::vector<std::string> names;
  for (const auto& [n, f] : table()) names.push_back(n);
  return names;
}

// Integer forms of the conversions (as the compiler's kernels, compiler/codegen/
// low_float.cc), inline and branch-free so that the widening loops vectorize: _Float16's
// conversions are libgcc calls on a CPU without F16C code generation.
float low_to_f32(uint16_t bits, ElemType t) {
  const uint32_t h = bits;
  if (t == ElemType::BF16) return std::bit_cast<float>(h << 16);
  uint32_t o = (h & 0x7fffu) << 13;
  const uint32_t exp = o & 0x0f800000u;
  o += 0x38000000u;  // rebias 15 -> 127
  const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(o + 0x00800000u) - std::bit_cast<float>(0x38800000u));
  o = exp == 0x0f800000u ? o + 0x38000000u : exp == 0 ? sub : o;  // inf/NaN; zero and subnormals
  return std::bit_cast<float>(o | (h & 0x8000u) << 16);
}

uint16_t f32_to_low(float v, ElemType t) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  if (t == ElemType::BF16) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  const uint32_t sign = u & 0x80000000u, f = u ^ sign;
  uint32_t r;
  if (f >= 0x47800000u) r = f > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN; inf and overflow
  else if (f < 0x38800000u)  // an f16 subnormal or zero: the f32 add rounds at 2^-24
    r = std::bit_cast<uint32_t>(std::bit_cast<float>(f) + 0.5f) - 0x3f000000u;
  else r = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(r | sign >> 16);
}

bool run_widened(const LibCall& c, LibraryFn f32_op) {
  bool any = false;
  for (const auto* list : {&c.inputs, &c.outputs})
    for (const TensorArg& t : *list) any |= t.present() && is_low_float(t.type);
  if (!any) return false;
  LibCall w = c;
  std::vector<std::vector<float>> temps;
  temps.reserve(c.inputs.size() + c.outputs.size());
  auto widen = [&](TensorArg& t, bool read) {
    if (!t.present() || !is_low_float(t.type)) return;
    const int64_t n = t.numel();
    temps.emplace_back(static_cast<size_t>(n));
    float* dst = temps.back().data();
    if (read) {
      const auto* src = static_cast<const uint16_t*>(t.data);
      const ElemType type = t.type;
      c.pool->parallel_for(n, 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = low_to_f32(src[i], type);
      });
    }
    t.data = dst;
    t.type = ElemType::F32;
  };
  for (TensorArg& t : w.inputs) widen(t, true);
  for (TensorArg& t : w.outputs) widen(t, false);
  f32_op(w);
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const TensorArg& t = c.outputs[k];
    if (!t.present() || !is_low_float(t.type)) continue;
    const float* src = w.outputs[k].f32();
    auto* dst = static_cast<uint16_t*>(t.data);
    const ElemType type = t.type;
    c.pool->parallel_for(t.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = f32_to_low(src[i], type);
    });
  }
  return true;
}

}  // namespace modelc::kernels

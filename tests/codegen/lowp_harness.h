// Shared by the f16 / bf16 tests: RefTensors to and from the bits of those types, host
// tensors for the runtime, and graph building for small Programs.
#pragma once

#include <bit>

#include "compiler/pipeline.h"
#include "runtime/session/session.h"
#include "tests/codegen/jit_harness.h"

namespace modelc::test {

inline bool low(DType t) { return t == DType::F16 || t == DType::BF16; }
inline double ulp_tol(DType t) { return t == DType::BF16 ? 1.0 / 256 : t == DType::F16 ? 1.0 / 2048 : 1e-5; }

// The bits of a value representable in t (round_to_dtype's result), and back.
inline uint16_t to_bits(double v, DType t) {
  if (t == DType::F16) return std::bit_cast<uint16_t>(static_cast<_Float16>(static_cast<float>(v)));
  float f = static_cast<float>(v);
  if (std::isnan(f)) return 0x7fc0;
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
}
inline double from_bits(uint16_t b, DType t) {
  if (t == DType::F16) return static_cast<double>(static_cast<float>(std::bit_cast<_Float16>(b)));
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline rt::HostTensor to_host(const RefTensor& t) {
  rt::ElemType e = t.dtype == DType::F16 ? rt::ElemType::F16 : t.dtype == DType::BF16 ? rt::ElemType::BF16 : rt::ElemType::F32;
  rt::HostTensor h(e, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (low(t.dtype)) reinterpret_cast<uint16_t*>(h.bytes.data())[i] = to_bits(t[i], t.dtype);
    else h.f32()[i] = static_cast<float>(t[i]);
  }
  return h;
}

inline RefTensor to_ref(const rt::HostTensor& h) {
  DType d = h.type == rt::ElemType::F16 ? DType::F16 : h.type == rt::ElemType::BF16 ? DType::BF16 : DType::F32;
  RefTensor t(d, h.shape);
  for (int64_t i = 0; i < h.numel(); ++i)
    t[i] = low(d) ? from_bits(reinterpret_cast<const uint16_t*>(h.bytes.data())[i], d) : h.f32()[i];
  return t;
}

inline Value add_input(Graph& g, const std::string& name, TensorType t) {
  Node n;
  n.op = OpKind::Input;
  n.name = name;
  n.outputs = {std::move(t)};
  NodeId id = g.add(std::move(n));
  g.inputs.push_back(id);
  return Value{id, 0};
}

inline Value emit_op(Graph& g, OpKind k, std::vector<Value> in, Attrs a = {}) {
  InferFailure f;
  auto id = add_op(g, k, std::move(in), std::move(a), {}, &f);
  if (!id) throw InternalError("test graph: " + f.message);
  return Value{*id, 0};
}

// The eval outputs of a Program lowered from forward graph g (fusion on or off).
inline std::map<std::string, RefTensor> run_program(const Graph& g, const std::map<std::string, RefTensor>& feeds, bool fusion) {
  LowerOptions lo;
  lo.fusion = fusion;
  auto prog = lower_program(g, nullptr, nullptr, lo);
  rt::SessionOptions so;
  so.threads = 2;
  rt::Session s(prog, so);
  std::map<std::string, rt::HostTensor> in;
  for (const auto& [name, v] : feeds) in[name] = to_host(v);
  std::map<std::string, RefTensor> out;
  for (const auto& [name, t] : s.eval(in)) out[name] = to_ref(t);
  return out;
}

}  // namespace modelc::test

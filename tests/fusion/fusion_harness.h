// Shared by the fusion tests: the example models' folder and the fusion plan of a graph as
// lowering makes it (code generation's can-emit predicate).
#pragma once

#include <string>

#include "compiler/codegen/codelets.h"
#include "compiler/compile.h"
#include "compiler/passes/fusion.h"
#include "compiler/pipeline.h"
#include "runtime/session/session.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {

inline const std::string kModels = std::string(MODELC_SOURCE_DIR) + "/models/";

inline FusionPlan plan(const Graph& g, bool enabled = true) {
  FusionOptions o;
  o.enabled = enabled;
  o.can_emit = [](const Graph& gr, NodeId id) { return CodeletCompiler::handles(gr, id); };
  return plan_fusion(g, o);
}

// char_gpt at a size the tests compile quickly (T = 8, C = 24).
inline CompileOptions small_char_gpt() {
  CompileOptions o;
  o.defines = {{"T", "8"}, {"C", "24"}, {"L", "2"}};  // two blocks: one block feeding another
  return o;
}

inline rt::HostTensor to_host(const RefTensor& t) {
  rt::HostTensor h(t.dtype == DType::I32 ? rt::ElemType::I32 : rt::ElemType::F32, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype == DType::I32) h.i32()[i] = static_cast<int32_t>(t[i]);
    else h.f32()[i] = static_cast<float>(t[i]);
  }
  return h;
}

inline RefTensor to_ref(const rt::HostTensor& h) {
  RefTensor t(h.type == rt::ElemType::I32 ? DType::I32 : DType::F32, h.shape);
  for (int64_t i = 0; i < h.numel(); ++i) t[i] = h.type == rt::ElemType::I32 ? h.i32()[i] : h.f32()[i];
  return t;
}

inline std::shared_ptr<rt::Program> lower(const Graph& forward, const Graph* step, bool fusion) {
  LowerOptions lo;
  lo.fusion = fusion;
  return lower_program(forward, step, nullptr, lo);
}

inline size_t kernel_instrs(const rt::Program& p, const std::string& fn) {
  size_t n = 0;
  for (const rt::Instr& in : p.function(fn)->instrs) n += in.kind == rt::Instr::Kind::Codelet;
  return n;
}

}  // namespace modelc::test

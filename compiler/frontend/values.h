// Values during elaboration: compile-time numbers, strings, lists, dtypes, and tensors
// (IR values). Error is a value too: an expression that failed has reported its error and
// evaluates to Error, which every later operation passes on silently (no cascades).
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace modelc {

struct SVal {
  enum class Kind { Error, None, Int, Float, Bool, Str, DType, List, Tuple, Tensor };
  Kind kind = Kind::None;
  Dim i;              // Int (a compile-time integer, possibly symbolic: B, 4*C)
  double f = 0;       // Float
  bool b = false;     // Bool
  std::string s;      // Str
  DType dt{};         // DType
  std::vector<SVal> items;  // List, Tuple
  Value t;            // Tensor
  SourceLoc loc;      // where the expression was written
  std::string name;   // the variable it was read from, if any
  SourceLoc decl;     // and that variable's declaration

  static SVal error() { return SVal{Kind::Error}; }
  static SVal integer(Dim v, SourceLoc l = {}) { SVal r{Kind::Int}; r.i = std::move(v); r.loc = l; return r; }
  static SVal real(double v, SourceLoc l = {}) { SVal r{Kind::Float}; r.f = v; r.loc = l; return r; }
  static SVal boolean(bool v, SourceLoc l = {}) { SVal r{Kind::Bool}; r.b = v; r.loc = l; return r; }
  static SVal tensor(Value v, SourceLoc l = {}) { SVal r{Kind::Tensor}; r.t = v; r.loc = l; return r; }
  bool is_error() const { return kind == Kind::Error; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double number() const { return kind == Kind::Int ? static_cast<double>(i.const_value()) : kind == Kind::Bool ? (b ? 1.0 : 0.0) : f; }
};

// True for values known at compile time (no tensors inside).
inline bool is_compile_time(const SVal& v) {
  if (v.kind == SVal::Kind::Tensor || v.kind == SVal::Kind::Tuple || v.kind == SVal::Kind::None) return false;
  for (const SVal& item : v.items)
    if (!is_compile_time(item)) return false;
  return true;
}

// "a tensor", "an integer", ... for messages.
std::string describe_kind(SVal::Kind k);
// "f32[B,3]" for tensors, "integer 3", "float 0.5", ...
std::string describe_value(const SVal& v, const Graph& g);

}  // namespace modelc

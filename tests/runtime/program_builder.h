// A small builder of hand-made Programs for the executor and session tests: buffers,
// host kernels written in C++ with the HostCodeletFn ABI, library calls and functions.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/program.h"

namespace modelc::rt::test {

struct ProgramBuilder {
  Program p;

  uint32_t sym(const std::string& name) {
    if (auto id = p.symbol_id(name)) return *id;
    p.symbols.push_back(name);
    return static_cast<uint32_t>(p.symbols.size() - 1);
  }
  // A dim: a number, or a symbol name (bound at run time).
  SizeExpr dim(int64_t v) { return SizeExpr::constant(v); }
  SizeExpr dim(const std::string& s) { return SizeExpr::symbol(sym(s)); }
  // coef * symbol
  SizeExpr scaled(int64_t coef, const std::string& s) {
    SizeExpr e;
    e.terms.push_back({coef, {sym(s)}});
    return e;
  }

  uint32_t buffer(const std::string& name, BufferRole role, std::vector<SizeExpr> shape, ElemType t = ElemType::F32,
                  Init init = {}) {
    BufferDesc d;
    d.name = name;
    d.role = role;
    d.shape = std::move(shape);
    d.type = t;
    d.init = init;
    p.buffers.push_back(d);
    return static_cast<uint32_t>(p.buffers.size() - 1);
  }

  uint32_t kernel(const std::string& name, HostCodeletFn fn) {
    p.codelets.push_back({name, fn, ""});
    return static_cast<uint32_t>(p.codelets.size() - 1);
  }

  Function& function(const std::string& name) {
    p.functions.push_back({});
    p.functions.back().name = name;
    return p.functions.back();
  }

  static Instr kernel_call(uint32_t k, std::vector<uint32_t> in, std::vector<uint32_t> out, std::vector<SizeExpr> sizes,
                           SizeExpr extent, int64_t grain = 1, const std::string& where = "t.model:3:5") {
    Instr i;
    i.kind = Instr::Kind::Codelet;
    i.codelet = k;
    i.inputs = std::move(in);
    i.outputs = std::move(out);
    i.sizes = std::move(sizes);
    i.extent = std::move(extent);
    i.grain = grain;
    i.where = where;
    return i;
  }

  static Instr library(const std::string& op, std::vector<uint32_t> in, std::vector<uint32_t> out,
                       std::map<std::string, std::vector<int64_t>> ints = {}, std::map<std::string, double> floats = {},
                       const std::string& where = "t.model:7:9") {
    Instr i;
    i.kind = Instr::Kind::Library;
    i.op = op;
    i.inputs = std::move(in);
    i.outputs = std::move(out);
    i.ints = std::move(ints);
    i.floats = std::move(floats);
    i.where = where;
    return i;
  }
};

}  // namespace modelc::rt::test

// Runs one-op graphs through the kernel compiler (compiler/codegen/codelets.h) and the
// reference interpreter, for the code generation tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "compiler/codegen/codelets.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {

// A node compiled alone: its kernel, size table and extent.
struct Compiled {
  SymbolTable symbols;
  EmittedCodelet codelet{};
  std::vector<rt::CodeletDesc> descs;
  std::shared_ptr<void> code;
};

inline std::unique_ptr<Compiled> compile_node(const Graph& g, NodeId id) {
  auto c = std::make_unique<Compiled>();
  CodeletCompiler kc(c->symbols);
  c->codelet = kc.emit(g, id);
  c->descs = kc.finish(c->code);
  return c;
}

// The values of a compiler's symbols: `dims` by name, then $seed and $step.
inline std::vector<int64_t> symbol_values(const SymbolTable& symbols, const std::map<std::string, int64_t>& dims,
                                          uint64_t seed = 0, uint64_t step = 0) {
  std::vector<int64_t> symvals;
  for (const std::string& name : symbols.names()) {
    if (name == "$seed") symvals.push_back(static_cast<int64_t>(seed));
    else if (name == "$step") symvals.push_back(static_cast<int64_t>(step));
    else symvals.push_back(dims.at(name));
  }
  return symvals;
}

// The raw buffers of one kernel run: the inputs (nullptr where an optional input is
// absent), then the outputs (NaN-filled); f32 as float, i32 as int32, bool as one byte.
// Each starts `misalign` bytes past a 16-byte boundary.
struct RawBuffers {
  std::vector<std::vector<unsigned char>> storage;
  std::vector<void*> ptrs;
  std::vector<RefTensor> outs;
  size_t inputs = 0;

  RawBuffers(const std::vector<const RefTensor*>& ins, const std::vector<TensorType>& out_types,
             const std::map<std::string, int64_t>& dims, size_t misalign = 0) {
    storage.reserve(ins.size() + out_types.size());
    inputs = ins.size();
    for (const RefTensor* t : ins) ptrs.push_back(t ? raw(*t, misalign) : nullptr);
    for (const TensorType& t : out_types) {
      outs.emplace_back(t.dtype, concrete_shape(t.shape, dims), std::nan(""));
      ptrs.push_back(raw(outs.back(), misalign));
    }
  }
  RawBuffers(const RawBuffers&) = delete;
  RawBuffers& operator=(const RawBuffers&) = delete;

  // The outputs as RefTensors of their dtype.
  std::vector<RefTensor> read_outputs() {
    for (size_t k = 0; k < outs.size(); ++k) {
      RefTensor& t = outs[k];
      const unsigned char* p0 = static_cast<const unsigned char*>(ptrs[inputs + k]);
      size_t w = static_cast<size_t>(dtype_bytes(t.dtype));
      for (int64_t i = 0; i < t.numel(); ++i) {
        const unsigned char* p = p0 + w * static_cast<size_t>(i);
        if (t.dtype == DType::F32) { float f; std::memcpy(&f, p, 4); t[i] = f; }
        else if (t.dtype == DType::I32) { int32_t v; std::memcpy(&v, p, 4); t[i] = v; }
        else t[i] = *p;
      }
    }
    return outs;
  }

 private:
  void* raw(const RefTensor& t, size_t misalign) {
    size_t w = static_cast<size_t>(dtype_bytes(t.dtype));
    std::vector<unsigned char> bytes(w * static_cast<size_t>(t.numel()) + 32);  // never empty; room to align
    auto addr = reinterpret_cast<uintptr_t>(bytes.data());
    unsigned char* p0 = bytes.data() + ((16 - addr % 16) % 16) + misalign;
    for (int64_t i = 0; i < t.numel(); ++i) {
      unsigned char* p = p0 + w * static_cast<size_t>(i);
      if (t.dtype == DType::F32) { float f = static_cast<float>(t[i]); std::memcpy(p, &f, 4); }
      else if (t.dtype == DType::I32) {
        // An output's NaN fill (never a valid i32) becomes INT32_MIN: converting NaN is undefined.
        auto v = std::isnan(t[i]) ? INT32_MIN : static_cast<int32_t>(t[i]);
        std::memcpy(p, &v, 4);
      }
      else *p = t[i] != 0 ? 1 : 0;
    }
    storage.push_back(std::move(bytes));
    return p0;
  }
};

// Runs host kernel `kernel` (of `descs`) over its whole extent in random chunks [begin, end).
inline void run_chunks(const std::vector<rt::CodeletDesc>& descs, uint32_t kernel, const std::vector<rt::SizeExpr>& table,
                       const rt::SizeExpr& extent_expr, const std::vector<int64_t>& symvals, void* const* buffers) {
  std::vector<int64_t> sizes;
  for (const rt::SizeExpr& s : table) sizes.push_back(s.eval(symvals));
  const int64_t extent = extent_expr.eval(symvals);
  rt::HostCodeletFn fn = descs.at(kernel).host;
  for (int64_t begin = 0; begin < extent;) {
    int64_t end = std::min(extent, begin + rnd(1, std::max<int64_t>(1, extent / 3 + 1)));
    fn(buffers, sizes.data(), begin, end);
    begin = end;
  }
}

// Runs an emitted kernel with the buffers `io` (inputs, then outputs); a two-phase
// reduction's Partial kernel first, into a NaN-filled scratch buffer between the inputs
// and the outputs of the second kernel.
inline void run_emitted(const std::vector<rt::CodeletDesc>& descs, const EmittedCodelet& k,
                        const std::vector<int64_t>& symvals, RawBuffers& io) {
  if (!k.partial) return run_chunks(descs, k.codelet, k.sizes, k.extent, symvals, io.ptrs.data());
  std::vector<float> scratch(static_cast<size_t>(k.partial->scratch_elements), std::nanf(""));  // f32 or i32 words
  std::vector<void*> first(io.ptrs.begin(), io.ptrs.begin() + static_cast<std::ptrdiff_t>(io.inputs));
  first.push_back(scratch.data());
  run_chunks(descs, k.partial->codelet, k.partial->sizes, k.partial->extent, symvals, first.data());
  std::vector<void*> second = first;
  second.insert(second.end(), io.ptrs.begin() + static_cast<std::ptrdiff_t>(io.inputs), io.ptrs.end());
  run_chunks(descs, k.codelet, k.sizes, k.extent, symvals, second.data());
}

// Runs a compiled kernel over its whole extent in random chunks [begin, end), with the
// inputs (in node order; nullptr where an optional input is absent) and the symbol values
// `dims` (+ $seed, $step). Returns the outputs as RefTensors of their dtype.
inline std::vector<RefTensor> run_kernel(const Compiled& c, const Node& n, const std::vector<const RefTensor*>& ins,
                                         const std::map<std::string, int64_t>& dims, uint64_t seed = 0,
                                         uint64_t step = 0) {
  std::vector<int64_t> symvals = symbol_values(c.symbols, dims, seed, step);
  RawBuffers io(ins, n.outputs, dims);
  run_emitted(c.descs, c.codelet, symvals, io);
  return io.read_outputs();
}

// The reference run of op's graph on `inputs` (in input order), and the node's inputs as the
// reference computed them (nullptr for an absent optional input), for a kernel to read.
struct OpReference {
  InterpResult result;
  std::vector<const RefTensor*> inputs;  // point into result.values
};
inline OpReference op_reference(const OneOp& o, const std::vector<RefTensor>& inputs, const InterpOptions& opts) {
  std::map<std::string, RefTensor> feeds;
  size_t k = 0;
  for (NodeId id : o.g.inputs) feeds[o.g.node(id).name] = inputs.at(k++);
  OpReference r{interpret(o.g, feeds, opts), {}};
  for (const Value& v : o.g.node(o.node).inputs)
    r.inputs.push_back(v.valid() ? &r.result.values.at(v.node).at(v.index) : nullptr);
  return r;
}

// Compiles op's node, runs it on `inputs` (absent optional inputs as nullopt in build_op and
// skipped here, as run_op does) and compares with the reference within `tol` (relative,
// expect_near's). Returns the kernel's output.
inline RefTensor check_op(const OneOp& o, const std::vector<RefTensor>& inputs, double tol,
                          const InterpOptions& opts = {}, const std::string& what = "") {
  OpReference r = op_reference(o, inputs, opts);
  const InterpResult& ref = r.result;
  const std::vector<const RefTensor*>& ins = r.inputs;
  const Node& n = o.g.node(o.node);
  auto c = compile_node(o.g, o.node);
  RefTensor got = run_kernel(*c, n, ins, ref.dims, opts.seed, opts.step).at(0);
  const RefTensor& want = ref.outputs.at("out0");
  std::string label = what + " " + std::string(op_name(n.op)) + " out " + want.shape_str();
  for (const RefTensor* t : ins) label += t ? " in " + t->shape_str() : " in none";
  expect_near(got, want, tol, label);
  return got;
}

}  // namespace modelc::test

// Helpers of the hand-kernel tests: the seeded generator (MODELC_TEST_SEED replays a run; the
// seed is printed on first use), random tensors of every element type, byte comparison, and
// the message of a RuntimeError.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/run_op.h"
#include "runtime/base/error.h"
#include "runtime/base/tensor.h"

namespace modelc::kernels::cuda::test {

using rt::ElemType;
using rt::HostTensor;

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen = [] {
    uint64_t seed = 0;
    const char* env = std::getenv("MODELC_TEST_SEED");
    if (env && *env) seed = std::strtoull(env, nullptr, 10);
    else seed = std::random_device{}();
    std::cerr << "cuda_kernels tests: random seed " << seed << " (set MODELC_TEST_SEED=" << seed << " to replay)\n";
    return std::mt19937_64(seed);
  }();
  return gen;
}

// Uniform in [lo, hi], both included.
inline int64_t rnd(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng()); }

inline std::vector<int64_t> random_shape(int64_t rank, int64_t lo = 1, int64_t hi = 5) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < rank; ++i) s.push_back(rnd(lo, hi));
  return s;
}

// Random bytes of any type (bool: 0 or 1); f32 as uniform values in [-1, 1).
inline HostTensor random_tensor(ElemType t, std::vector<int64_t> shape) {
  HostTensor x(t, std::move(shape));
  if (t == ElemType::F32) {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = d(rng());
  } else {
    for (uint8_t& b : x.bytes) b = static_cast<uint8_t>(t == ElemType::Bool ? rnd(0, 1) : rnd(0, 255));
  }
  return x;
}

inline const ElemType kAllTypes[] = {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I32, ElemType::Bool};

// A tensor of the same type and shape as `t`, filled with a byte pattern (so that an element
// the op forgets to write shows).
inline HostTensor like(ElemType type, std::vector<int64_t> shape, uint8_t fill = 0xa5) {
  HostTensor r(type, std::move(shape));
  if (!r.bytes.empty()) std::memset(r.bytes.data(), fill, r.bytes.size());
  return r;
}

// The RuntimeError message of f(), or "" when it throws none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const rt::RuntimeError& e) {
    return e.what();
  }
  return "";
}

// Runs `op` emulated (the GPU kernels' launches on the host) and by the CPU twin on the same
// inputs and fresh copies of `outputs`; expects identical bytes, or the identical error.
inline void expect_same(const std::string& op, const std::vector<const HostTensor*>& inputs, const std::vector<HostTensor>& outputs,
                        const OpInts& ints = {}, const OpFloats& floats = {}, const std::string& what = "") {
  std::vector<HostTensor> emu = outputs, cpu = outputs;
  for (HostTensor& t : emu)
    if (!t.bytes.empty()) std::memset(t.bytes.data(), 0x5a, t.bytes.size());
  const std::string e1 = error_of([&] { run_emulated_op(op, inputs, emu, ints, floats); });
  const std::string e2 = error_of([&] { run_cpu_op(op, inputs, cpu, ints, floats); });
  ASSERT_EQ(e1, e2) << op << " " << what;
  if (!e1.empty()) return;
  for (size_t k = 0; k < emu.size(); ++k) {
    ASSERT_EQ(emu[k].bytes.size(), cpu[k].bytes.size());
    size_t bad = 0;
    for (size_t b = 0; b < emu[k].bytes.size(); ++b)
      if (emu[k].bytes[b] != cpu[k].bytes[b] && ++bad <= 3)
        ADD_FAILURE() << op << " " << what << ": output " << k << " byte " << b << " differs: emulated "
                      << int(emu[k].bytes[b]) << ", CPU " << int(cpu[k].bytes[b]);
    ASSERT_EQ(bad, 0u) << op << " " << what << ": output " << k << " " << emu[k].shape_str();
  }
}

// As expect_same, for a call that must fail: both ways, with the same message, which
// contains `part`.
inline void expect_same_error(const std::string& op, const std::vector<const HostTensor*>& inputs,
                              const std::vector<HostTensor>& outputs, const OpInts& ints, const OpFloats& floats,
                              const std::string& part) {
  std::vector<HostTensor> emu = outputs, cpu = outputs;
  const std::string e1 = error_of([&] { run_emulated_op(op, inputs, emu, ints, floats); });
  const std::string e2 = error_of([&] { run_cpu_op(op, inputs, cpu, ints, floats); });
  EXPECT_EQ(e1, e2) << op;
  EXPECT_NE(e1.find(part), std::string::npos) << op << ": '" << e1 << "' lacks '" << part << "'";
  EXPECT_EQ(e1.rfind(op + " at test.model:1:1: ", 0), 0u) << e1;
}

}  // namespace modelc::kernels::cuda::test

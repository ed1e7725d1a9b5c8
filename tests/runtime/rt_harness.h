// Shared helpers of the runtime tests: the seeded generator (MODELC_TEST_SEED replays a
// run; the seed is printed on first use), random tensors and shapes, a one-call runner for
// library ops and tolerance checks against double-precision references. Runtime-side
// twin of tests/ir/op_harness.h, which the runtime tests cannot link.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/library.h"
#include "runtime/device/cpu/thread_pool.h"
#include "runtime/base/tensor.h"

namespace modelc::rt::test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen = [] {
    uint64_t seed = 0;
    const char* env = std::getenv("MODELC_TEST_SEED");
    if (env && *env) {
      char* end = nullptr;
      seed = std::strtoull(env, &end, 10);
      if (*end != '\0' || *env == '-') {
        std::cerr << "runtime tests: MODELC_TEST_SEED=" << env << " is not an unsigned integer\n";
        std::abort();
      }
    } else {
      seed = std::random_device{}();
    }
    std::cerr << "runtime tests: random seed " << seed << " (set MODELC_TEST_SEED=" << seed << " to replay)\n";
    return std::mt19937_64(seed);
  }();
  return gen;
}

// Uniform in [lo, hi], both included.
inline int64_t rnd(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng()); }

inline std::vector<int64_t> random_shape(int64_t rank, int64_t lo = 1, int64_t hi = 4) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < rank; ++i) s.push_back(rnd(lo, hi));
  return s;
}

// An f32 tensor of uniform values in [-1, 1).
inline HostTensor random_f32(std::vector<int64_t> shape) {
  HostTensor t(ElemType::F32, std::move(shape));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng());
  return t;
}

inline HostTensor filled_f32(std::vector<int64_t> shape, float v) {
  HostTensor t(ElemType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = v;
  return t;
}

inline kernels::TensorArg arg(HostTensor* t) {
  kernels::TensorArg a;
  if (!t) return a;
  a.data = t->bytes.empty() ? static_cast<void*>(t) : t->bytes.data();  // non-null even when empty
  a.type = t->type;
  a.shape = t->shape;
  return a;
}

using Ints = std::map<std::string, std::vector<int64_t>>;
using Floats = std::map<std::string, double>;

// Runs library op `op` (through `fn` when given, else the table) at location "test.model:1:1".
inline void run_op(const std::string& op, std::vector<HostTensor*> ins, std::vector<HostTensor*> outs,
                   const Ints& ints = {}, const Floats& floats = {}, ThreadPool* pool = nullptr,
                   kernels::LibraryFn fn = nullptr) {
  static ThreadPool default_pool(3);
  kernels::LibCall c;
  c.op = op;
  c.where = "test.model:1:1";
  for (HostTensor* t : ins) c.inputs.push_back(arg(t));
  for (HostTensor* t : outs) c.outputs.push_back(arg(t));
  c.ints = &ints;
  c.floats = &floats;
  c.pool = pool ? pool : &default_pool;
  if (!fn) fn = kernels::find_library_op(op);
  ASSERT_NE(fn, nullptr) << op;
  fn(c);
}

// Every element within atol + rtol * scale[i] of the reference (scale: |ref| by default, or
// the sum of the absolute values of the terms that made it).
inline void expect_close(const HostTensor& got, const std::vector<double>& ref, double rtol, double atol,
                         const std::vector<double>* scale = nullptr, const std::string& what = "") {
  ASSERT_EQ(static_cast<size_t>(got.numel()), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double s = scale ? (*scale)[i] : std::abs(ref[i]);
    double g = got.f32()[i];
    if (!(std::abs(g - ref[i]) <= atol + rtol * s)) {
      if (++bad <= 5) ADD_FAILURE() << what << " element " << i << ": got " << g << ", expected " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements out of tolerance";
}

// Expects `f` to throw RuntimeError whose message contains every one of `parts`.
template <class F>
void expect_error(F f, std::vector<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.at(0) << "'";
  } catch (const RuntimeError& e) {
    std::string m = e.what();
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "message '" << m << "' lacks '" << p << "'";
  }
}

}  // namespace modelc::rt::test

// One random batch of a program's train-step inputs, for tests that run compiled models:
// f32 values uniform in [-1, 1), i32 values (labels, tokens) in [0, classes). `sym` gives the
// symbol values (Program::symbols order) the inputs' shapes are evaluated under; each input
// holds all of the step's micro-batches.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/program.h"
#include "runtime/base/tensor.h"

namespace modelc::test {

inline std::map<std::string, rt::HostTensor> random_train_batch(const rt::Program& p, const std::vector<int64_t>& sym,
                                                                int64_t classes, std::mt19937_64& rng) {
  std::map<std::string, rt::HostTensor> b;
  const rt::Function& fn = *p.function("train_step");
  for (const rt::Feed& f : fn.feeds) {
    if (f.name[0] == '$' || b.count(f.name)) continue;
    const rt::BufferDesc& d = p.buffers[f.buffer];
    std::vector<int64_t> shape;
    for (const rt::SizeExpr& e : d.shape) shape.push_back(e.eval(sym));
    shape[0] *= fn.micro_batches;
    rt::HostTensor t(d.type, shape);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (d.type == rt::ElemType::I32) t.i32()[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(classes));
      else t.f32()[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
    }
    b[f.name] = std::move(t);
  }
  return b;
}

}  // namespace modelc::test

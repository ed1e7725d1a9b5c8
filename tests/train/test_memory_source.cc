// An application's own data through the embedding API, without files: Dataset::from_tensors
// batched by the TrainLoader (a fresh permutation each epoch from the seed, a worker thread
// ahead) into Session::train_step. The masked regression (tests/arrays/masked.model: features,
// a bool mask and a float target by name) learns from arrays made in memory to the error
// only the mask allows, and the batches are the tensors' rows at the loader's permutation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/pipeline.h"
#include "runtime/session/data/file_io.h"
#include "runtime/session/data/loader.h"
#include "runtime/session/session.h"

using namespace modelc;

namespace {

struct Made {
  rt::Dataset::Tensors tensors;
  std::vector<float> x, y;
  std::vector<uint8_t> mask;
};

Made make(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const float w[8] = {1, -2, 0.5f, 1.5f, -1, 2, -0.5f, 1};
  Made m;
  rt::HostTensor x(rt::ElemType::F32, {n, 8}), mask(rt::ElemType::Bool, {n, 8}), y(rt::ElemType::F32, {n});
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t j = 0; j < 8; ++j) {
      x.f32()[i * 8 + j] = normal(rng);
      mask.bytes[static_cast<size_t>(i * 8 + j)] = static_cast<uint8_t>(rng() & 1);
      if (mask.bytes[static_cast<size_t>(i * 8 + j)]) s += w[j] * x.f32()[i * 8 + j];
    }
    y.f32()[i] = s;
  }
  m.x.assign(x.f32(), x.f32() + n * 8);
  m.y.assign(y.f32(), y.f32() + n);
  m.mask = mask.bytes;
  m.tensors = {{"x", x}, {"mask", mask}, {"y", y}};
  return m;
}

TEST(MemorySource, TrainsTheMaskedRegressionFromTensorsMadeInMemory) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Compilation c(CompileOptions{});
  ProgramOptions po;
  auto program = compile_program(c, std::string(MODELC_SOURCE_DIR) + "/tests/arrays/masked.model", po);
  ASSERT_TRUE(program) << c.diags().render();
  Made m = make(1000, seed);
  auto ds = rt::Dataset::from_tensors(m.tensors, seed, 0.2);
  EXPECT_EQ(ds->size(rt::Split::Train), 800);
  rt::Session s(program);
  rt::TrainLoader loader(ds, 32, {}, seed);
  for (int step = 0; step < 300; ++step) {
    rt::Batch b = loader.next();
    ASSERT_EQ(b.named.size(), 3u);
    if (step == 0) {  // the first batch: rows of the tensors at epoch 0's permutation
      const std::vector<int64_t> perm = rt::shuffled_indices(800, seed, 0);
      for (int64_t r = 0; r < 32; ++r) {
        const auto i = static_cast<size_t>(ds->indices(rt::Split::Train)[static_cast<size_t>(perm[static_cast<size_t>(r)])]);
        EXPECT_EQ(b.named[2].second.f32()[r], m.y[i]);
        EXPECT_EQ(b.named[0].second.f32()[r * 8 + 3], m.x[i * 8 + 3]);
        EXPECT_EQ(b.named[1].second.bytes[static_cast<size_t>(r * 8 + 5)], m.mask[i * 8 + 5]);
      }
    }
    std::map<std::string, rt::HostTensor> feed;
    for (auto& [name, t] : b.named) feed[name] = std::move(t);
    s.train_step(feed);
  }
  rt::EvalLoader held(ds, rt::Split::Heldout, 50, {});
  double mae = 0;
  int64_t n = 0;
  while (auto b = held.next()) {
    const int64_t size = b->size();
    std::map<std::string, rt::HostTensor> feed;
    for (auto& [name, t] : b->named) feed[name] = std::move(t);
    auto out = s.eval(feed);
    mae += static_cast<double>(out.at("mae").f32()[0]) * static_cast<double>(size);
    n += size;
  }
  EXPECT_EQ(n, 200);
  // Applying the mask the error goes to ~0; ignoring it leaves ~1.1.
  EXPECT_LT(mae / static_cast<double>(n), 0.05);
}

TEST(MemorySource, BadTensorsAreRefused) {
  Made m = make(10, 1);
  rt::Dataset::Tensors t = m.tensors;
  t[2].second = rt::HostTensor(rt::ElemType::F32, {9});
  try {
    rt::Dataset::from_tensors(t, 1, 0.2);
    ADD_FAILURE() << "mismatched example counts were accepted";
  } catch (const rt::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'y': 9 examples, but tensor 'x' has 10"), std::string::npos) << e.what();
  }
  t = m.tensors;
  t[0].second.bytes.pop_back();
  EXPECT_THROW(rt::Dataset::from_tensors(t, 1, 0.2), rt::DataError);
  t = m.tensors;
  t[1].second = rt::HostTensor(rt::ElemType::Bool, {});
  EXPECT_THROW(rt::Dataset::from_tensors(t, 1, 0.2), rt::DataError);
  rt::Dataset::Tensors test = m.tensors;
  test.pop_back();
  EXPECT_THROW(rt::Dataset::from_tensors(m.tensors, 1, 0.2, test), rt::DataError);
}

}  // namespace

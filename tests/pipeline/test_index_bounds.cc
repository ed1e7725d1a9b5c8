// The index limits the compiler records on integer inputs (compiler/lowered/index_bounds.h,
// rt::BufferDesc::index_limit): through value movers, the tightest of several uses, none
// through arithmetic, and a note naming the op and the parameter the limit is a dim of.
#include <gtest/gtest.h>

#include <fstream>

#include "compiler/pipeline.h"
#include "tests/data/data_test_util.h"

namespace modelc {
namespace {

struct Bound {
  int64_t limit = 0;
  std::string note;
};

// The limit of every input of every function of the model in `source` (the same in all).
std::map<std::string, Bound> bounds_of(const std::string& source) {
  rt::testing::TempDir dir;
  const std::string path = dir / "m.model";
  std::ofstream(path) << source;
  Compilation c(CompileOptions{});
  std::shared_ptr<rt::Program> p = compile_program(c, path, ProgramOptions{});
  if (!p) throw std::runtime_error(c.diags().render());
  std::map<std::string, Bound> out;
  for (const rt::Function& f : p->functions)
    for (const rt::Feed& fd : f.feeds) {
      const rt::BufferDesc& d = p->buffers.at(fd.buffer);
      auto [it, fresh] = out.try_emplace(fd.name, Bound{d.index_limit, d.index_note});
      if (!fresh) {
        EXPECT_EQ(it->second.limit, d.index_limit) << fd.name << " in " << f.name;
      }
    }
  return out;
}

const char* kTrain = "train m {\n  batch = 4\n  optimizer = sgd(lr = 0.1)\n  steps = 1\n}\n";

TEST(IndexBounds, ThroughMoversToTheTightestUse) {
  auto b = bounds_of(std::string(R"(model m(B) {
  input ids: i32[B, 6]
  input labels: i32[B, 6]
  param table: f32[50, 8] = normal(std = 0.1)
  param small: f32[20, 8] = normal(std = 0.1)
  e = embedding(reshape(ids, [B * 6]), table)
  f = embedding(slice(ids, 1, 0, 3), small)
  logits = reshape(e, [B, 6, 8])
  loss = cross_entropy(logits, labels) + mean(f)
  output loss
}
)") + kTrain);
  EXPECT_EQ(b.at("ids").limit, 20) << "the smaller table, reached through slice";
  // The source manager names the file as it was given (here the temporary directory's path).
  auto has = [](const std::string& note, const std::string& part) {
    EXPECT_NE(note.find(part), std::string::npos) << "'" << part << "' not in: " << note;
  };
  has(b.at("ids").note, "the rows of the table of embedding at ");
  has(b.at("ids").note, "m.model:7:7; 20 is a dim of parameter 'small' f32[20,8] declared at ");
  has(b.at("ids").note, "m.model:5:9");
  EXPECT_EQ(b.at("labels").limit, 8);
  has(b.at("labels").note, "the classes (the last dim of the logits) of cross_entropy at ");
  has(b.at("labels").note, "m.model:9:10; 8 is a dim of parameter 'table' f32[50,8] declared at ");
}

TEST(IndexBounds, NoneThroughArithmeticOrForFloatInputs) {
  auto b = bounds_of(std::string(R"(model m(B) {
  input ids: i32[B]
  input x: f32[B, 3]
  input labels: i32[B]
  param table: f32[10, 3] = normal(std = 0.1)
  e = embedding(ids + 1, table)
  loss = cross_entropy(x + e, labels)
  output loss
}
)") + kTrain);
  EXPECT_EQ(b.at("ids").limit, 0) << "ids + 1 has limits of its own: " << b.at("ids").note;
  EXPECT_EQ(b.at("x").limit, 0);
  EXPECT_EQ(b.at("labels").limit, 3);
}

}  // namespace
}  // namespace modelc

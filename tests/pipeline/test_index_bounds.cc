// The index limits the compiler records on integer inputs (compiler/lowered/index_bounds.h,
// rt::BufferDesc::index_limit): through value movers, the tightest of several uses, none
// through arithmetic, and a note naming the op and the parameter the limit is a dim of.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>

#include "compiler/pipeline.h"
#include "tests/data/data_test_util.h"

namespace modelc {
namespace {

struct Bound {
  int64_t limit = 0;
  std::string note;
  std::optional<int64_t> ignore;
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
      auto [it, fresh] = out.try_emplace(fd.name, Bound{d.index_limit, d.index_note, d.index_ignore});
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

// cross_entropy and nll_loss accept their ignore_index (-100 by default) as a label, in every
// form (the one kernel, the composite with a weight or smoothing); an ignore_index inside the
// range needs nothing recorded; a use that ignores nothing (an embedding of the same
// input) or another value makes every value outside the range an error.
TEST(IndexBounds, IgnoredLabels) {
  auto model = [](const std::string& loss) {
    return std::string(R"(model m(B) {
  input x: f32[B, 5]
  input labels: i32[B]
  input more: i32[B]
  param table: f32[7, 5] = normal(std = 0.1)
  param cw: f32[5] = normal(mean = 1.0, std = 0.1)
  )") + loss + R"(
  output loss
}
)" + kTrain;
  };
  struct Case {
    std::string loss;
    std::optional<int64_t> labels, more;
  };
  const Case cases[] = {
      {"loss = cross_entropy(x, labels) + cross_entropy(x, more, ignore_index = -1)", -100, -1},
      {"loss = cross_entropy(x, labels, label_smoothing = 0.1) + nll_loss(log_softmax(x), more, reduction = \"sum\")",
       -100, -100},
      {"loss = cross_entropy(x, labels, ignore_index = 2) + cross_entropy(x, reshape(more, [B]), weight = cw)",
       std::nullopt, -100},
      {"loss = cross_entropy(x, labels) + mean(embedding(labels, table)) + cross_entropy(x, more) + "
       "nll_loss(x, more, ignore_index = -7)", std::nullopt, std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.loss);
    auto b = bounds_of(model(c.loss));
    EXPECT_EQ(b.at("labels").limit, 5);
    EXPECT_EQ(b.at("labels").ignore, c.labels);
    EXPECT_EQ(b.at("more").limit, 5);
    EXPECT_EQ(b.at("more").ignore, c.more);
  }
}

}  // namespace
}  // namespace modelc

// End to end: each example model compiles in process, trains a few steps on real data
// through the runtime's Session and loaders, and its loss falls; a run interrupted by a
// checkpoint resumes with bit-identical losses.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/pipeline.h"
#include "runtime/session/checkpoint.h"
#include "runtime/session/data/dataset.h"
#include "runtime/session/data/loader.h"
#include "runtime/session/session.h"

namespace fs = std::filesystem;
using namespace modelc;

namespace {

const std::string kModels = std::string(MODELC_SOURCE_DIR) + "/models/";

std::shared_ptr<rt::Program> build(const std::string& file, std::vector<std::pair<std::string, std::string>> defines = {}) {
  CompileOptions o;
  o.defines = std::move(defines);
  Compilation c(o);
  auto p = compile_program(c, kModels + file);
  EXPECT_TRUE(p) << c.diags().render();
  return p;
}

struct ModelRun {
  std::shared_ptr<rt::Program> program;
  std::shared_ptr<const rt::Dataset> data;
  std::string features, labels;
  std::vector<int64_t> example_shape;
};

ModelRun prepare(std::shared_ptr<rt::Program> p) {
  ModelRun r;
  r.program = p;
  const rt::Function* eval = p->function("eval");
  r.features = eval->feeds.at(0).name;
  r.labels = eval->feeds.at(1).name;
  const rt::BufferDesc& f = p->buffers[eval->feeds[0].buffer];
  for (size_t k = 1; k < f.shape.size(); ++k) r.example_shape.push_back(f.shape[k].eval({}));
  r.data = rt::Dataset::open(*p->train.data, kModels, static_cast<uint64_t>(p->train.seed), p->train.validation);
  return r;
}

std::vector<float> train(const ModelRun& r, rt::Session& s, rt::TrainLoader& loader, int steps) {
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    rt::Batch b = loader.next();
    losses.push_back(s.train_step({{r.features, b.features}, {r.labels, b.labels}}));
  }
  return losses;
}

float mean_tail(const std::vector<float>& v, size_t n) {
  float sum = 0;
  for (size_t i = v.size() - n; i < v.size(); ++i) sum += v[i];
  return sum / static_cast<float>(n);
}

// Trains `steps` steps from the model's own initialisation and checks that every loss is
// finite and that the mean of the last five is below `ratio` times the first loss.
void expect_loss_falls(const ModelRun& r, int steps, float ratio) {
  rt::SessionOptions so;
  so.threads = 2;
  so.total_steps = steps;
  rt::Session s(r.program, so);
  rt::TrainLoader loader(r.data, r.program->train.batch, r.example_shape, static_cast<uint64_t>(r.program->train.seed));
  std::vector<float> losses = train(r, s, loader, steps);
  for (float l : losses) ASSERT_TRUE(std::isfinite(l));
  std::string all;
  for (float l : losses) all += std::to_string(l) + " ";
  EXPECT_LT(mean_tail(losses, 5), ratio * losses.front()) << "losses: " << all;
}

}  // namespace

TEST(Train, FashionMlpLossFalls) {
  auto p = build("fashion_mlp.model");
  ASSERT_TRUE(p);
  expect_loss_falls(prepare(p), 40, 0.5f);
}

TEST(Train, FashionCnnLossFalls) {
  auto p = build("fashion_cnn.model");
  ASSERT_TRUE(p);
  p->train.batch = 32;
  expect_loss_falls(prepare(p), 25, 0.7f);
}

TEST(Train, CharGptLossFalls) {
  // A small corpus with structure to learn (words from a short list), and a small model.
  fs::path dir = fs::temp_directory_path() / ("modelc_train_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::mt19937 rng(7);
  const char* words[] = {"the ", "lord ", "said ", "unto ", "moses ", "and ", "in ", "beginning "};
  {
    std::ofstream out(dir / "corpus.txt");
    for (int i = 0; i < 6000; ++i) out << words[rng() % 8];
  }
  auto p = build("char_gpt.model", {{"T", "32"}, {"C", "48"}, {"L", "2"}});
  ASSERT_TRUE(p);
  p->train.data->strs["path"] = (dir / "corpus.txt").string();
  p->train.batch = 8;
  p->train.schedule.warmup = 0;
  p->train.schedule.lr = 3e-3;
  expect_loss_falls(prepare(p), 30, 0.8f);
  fs::remove_all(dir);
}

// Six steps in one go, and three steps + checkpoint + a fresh session resumed from it + three
// steps, give the same six losses bit for bit.
TEST(Train, ResumeIsBitIdentical) {
  auto p = build("fashion_mlp.model");
  ASSERT_TRUE(p);
  ModelRun r = prepare(p);
  rt::SessionOptions so;
  so.threads = 2;
  so.total_steps = 6;
  auto seed = static_cast<uint64_t>(p->train.seed);

  rt::Session a(p, so);
  rt::TrainLoader la(r.data, p->train.batch, r.example_shape, seed);
  std::vector<float> straight = train(r, a, la, 6);

  rt::Session b(p, so);
  rt::TrainLoader lb(r.data, p->train.batch, r.example_shape, seed);
  std::vector<float> resumed = train(r, b, lb, 3);
  fs::path ckpt = fs::temp_directory_path() / ("modelc_resume_" + std::to_string(::getpid()) + ".safetensors");
  rt::NamedTensors tensors;
  for (const auto& n : b.param_names()) tensors.emplace_back(n, b.param(n));
  for (const auto& n : b.state_names()) tensors.emplace_back(n, b.state(n));
  std::map<std::string, std::string> md{{"step", std::to_string(b.step())}};
  rt::put_position(md, lb.position());
  rt::save_checkpoint(ckpt.string(), tensors, md);

  rt::Session c(p, so);
  rt::Checkpoint loaded = rt::load_checkpoint(ckpt.string());
  for (const auto& n : c.param_names()) c.set_param(n, *loaded.find(n));
  for (const auto& n : c.state_names()) c.set_state(n, *loaded.find(n));
  c.set_step(std::stoll(loaded.metadata.at("step")));
  rt::TrainLoader lc(r.data, p->train.batch, r.example_shape, seed, rt::get_position(loaded.metadata, ckpt.string()));
  std::vector<float> rest = train(r, c, lc, 3);
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  fs::remove(ckpt);
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(straight[i], resumed[i]) << "step " << i;
}

// A checkpoint of another shape is refused with the file and tensor named.
TEST(Train, MismatchedCheckpointNamesFileAndTensor) {
  auto mlp = build("fashion_mlp.model");
  auto narrow = build("fashion_mlp.model", {{"H", "128"}});
  ASSERT_TRUE(mlp && narrow);
  rt::Session wide(mlp, {});
  rt::Session small(narrow, {});
  fs::path ckpt = fs::temp_directory_path() / ("modelc_mismatch_" + std::to_string(::getpid()) + ".safetensors");
  rt::NamedTensors tensors;
  for (const auto& n : small.param_names()) tensors.emplace_back(n, small.param(n));
  rt::save_checkpoint(ckpt.string(), tensors);
  std::vector<rt::TensorSpec> want;
  for (const auto& n : wide.param_names()) {
    rt::HostTensor t = wide.param(n);
    want.push_back({n, t.type, t.shape});
  }
  try {
    rt::check_against(rt::load_checkpoint(ckpt.string()), want);
    ADD_FAILURE() << "a checkpoint with H = 128 was accepted for H = 256";
  } catch (const rt::CheckpointError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(ckpt.string()), std::string::npos) << what;
    EXPECT_NE(what.find("linear.0.w"), std::string::npos) << what;
  }
  fs::remove(ckpt);
}

// Elaboration through the compile API: the example models run through the reference
// interpreter against computations written here, parameter naming, -D bindings, dropout
// keys, and the documentation of every registered op.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "compiler/compile.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/op_registry.h"
#include "compiler/ir/verifier.h"

namespace modelc {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = MODELC_SOURCE_DIR;

struct Compiled {
  std::unique_ptr<Compilation> c;
  Elaborated r;
};

Compiled compile(const fs::path& path, CompileOptions opts = {}) {
  Compiled out{std::make_unique<Compilation>(std::move(opts)), {}};
  if (out.c->load(path.string())) out.r = out.c->elaborate();
  return out;
}

Compiled compile_text(const std::string& text, CompileOptions opts = {}) {
  fs::path p = fs::temp_directory_path() / ("modelc-elab-" + std::to_string(std::random_device{}()) + ".model");
  std::ofstream(p) << text;
  Compiled c = compile(p, std::move(opts));
  fs::remove(p);
  return c;
}

std::mt19937& gen() {
  static std::mt19937 g(std::random_device{}());
  return g;
}

RefTensor random(DType t, std::vector<int64_t> shape, double lo, double hi) {
  RefTensor x(t, std::move(shape));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& v : x.data) v = t == DType::I32 ? std::floor(u(gen())) : u(gen());
  return x;
}

// Random values for every param of a graph (shapes are known).
std::map<std::string, RefTensor> random_params(const Graph& g, double scale) {
  std::map<std::string, RefTensor> feeds;
  for (NodeId id : g.params) {
    const Node& n = g.node(id);
    feeds[n.name] = random(n.outputs[0].dtype, concrete_shape(n.outputs[0].shape, {}), -scale, scale);
  }
  return feeds;
}

TEST(Elaborate, ExampleModelsCompileCleanlyAndVerify) {
  for (const char* m : {"fashion_mlp", "fashion_cnn", "char_gpt"}) {
    Compiled c = compile(kRoot / "models" / (std::string(m) + ".model"));
    ASSERT_TRUE(c.r.graph) << c.c->diags().render();
    EXPECT_EQ(c.c->diags().render(), "") << m;
    EXPECT_TRUE(verify_graph(*c.r.graph).empty()) << m;
    EXPECT_TRUE(c.r.train.has_value()) << m;
  }
}

TEST(Elaborate, FashionMlpForwardMatchesAHandWrittenMlp) {
  Compiled c = compile(kRoot / "models/fashion_mlp.model");
  ASSERT_TRUE(c.r.graph);
  const Graph& g = *c.r.graph;
  std::uniform_int_distribution<int64_t> bdist(1, 5);
  const int64_t B = bdist(gen());
  auto feeds = random_params(g, 0.1);
  feeds["images"] = random(DType::F32, {B, 784}, 0, 1);
  feeds["labels"] = random(DType::I32, {B}, 0, 10);
  InterpResult r = interpret(g, feeds);
  EXPECT_EQ(r.dims.at("B"), B);

  const RefTensor &w0 = feeds["linear.0.w"], &b0 = feeds["linear.0.b"];
  const RefTensor &w1 = feeds["linear.1.w"], &b1 = feeds["linear.1.b"];
  double loss = 0;
  for (int64_t i = 0; i < B; ++i) {
    std::vector<double> h(256), z(10);
    for (int j = 0; j < 256; ++j) {
      double s = b0[j];
      for (int k = 0; k < 784; ++k) s += feeds["images"][i * 784 + k] * w0[k * 256 + j];
      h[static_cast<size_t>(j)] = std::max(s, 0.0);
    }
    for (int j = 0; j < 10; ++j) {
      double s = b1[j];
      for (int k = 0; k < 256; ++k) s += h[static_cast<size_t>(k)] * w1[k * 10 + j];
      z[static_cast<size_t>(j)] = s;
      EXPECT_NEAR(r.outputs.at("logits")[i * 10 + j], s, 1e-10 * (1 + std::fabs(s)));
    }
    double m = *std::max_element(z.begin(), z.end()), se = 0;
    for (double v : z) se += std::exp(v - m);
    loss += m + std::log(se) - z[static_cast<size_t>(feeds["labels"][i])];
  }
  EXPECT_NEAR(r.outputs.at("loss")[0], loss / static_cast<double>(B), 1e-10);
}

TEST(Elaborate, CharGptForwardGivesAnUntrainedLossNearLogV) {
  // With tiny weights the logits are nearly equal, so the loss is close to log(V).
  CompileOptions opts;
  opts.defines = {{"T", "8"}, {"C", "24"}};
  Compiled c = compile(kRoot / "models/char_gpt.model", opts);
  ASSERT_TRUE(c.r.graph) << c.c->diags().render();
  const Graph& g = *c.r.graph;
  auto feeds = random_params(g, 1e-3);
  feeds["tokens"] = random(DType::I32, {2, 8}, 0, 96);
  feeds["targets"] = random(DType::I32, {2, 8}, 0, 96);
  double loss = interpret(g, feeds).outputs.at("loss")[0];
  EXPECT_NEAR(loss, std::log(96.0), 0.01);
}

TEST(Elaborate, ParameterNamesAreHierarchicalAndStable) {
  Compiled c = compile(kRoot / "models/char_gpt.model");
  ASSERT_TRUE(c.r.graph);
  const Graph& g = *c.r.graph;
  for (const char* name : {"wte", "wpe", "block.0.norm.0.g", "block.2.attention.0.linear.0.w",
                           "block.3.mlp.0.linear.1.b", "norm.0.b"})
    EXPECT_TRUE(g.find_param(name)) << name;
  EXPECT_EQ(g.params.size(), 2u + 4u * 12u + 2u);
  // Parameters are never marked for recomputation, activations inside @checkpoint are.
  for (NodeId id : g.params) EXPECT_FALSE(g.node(id).checkpoint);
  bool any = false;
  for (const Node& n : g.nodes) any |= n.checkpoint && n.scope.starts_with("block.");
  EXPECT_TRUE(any);
}

// `if` on constants: an optional bias (a bool argument), a branch on a dim, else-if chains;
// only the branch taken is elaborated, so the other may name params and shapes that do not
// exist, and names bound in the branch are visible after it.
TEST(Elaborate, CompileTimeIfTakesOneBranch) {
  const char* text =
      "def linear(x: f32[..., I], O: int, bias: bool = true) {\n"
      "  param w: f32[I, O] = zeros()\n"
      "  y = x @ w\n"
      "  if bias {\n    param b: f32[O] = zeros()\n    y = y + b\n  }\n"
      "  return y\n}\n"
      "model m(B, H = 4) {\n  input x: f32[B, 3]\n"
      "  h = linear(x, H)\n  z = linear(h, 2, bias = false)\n"
      "  if H > 8 {\n    out = z * undefined_name\n  } else if H == 4 {\n    out = z * 2.0\n  } else {\n    out = z\n  }\n"
      "  output out\n}\n";
  Compiled c = compile_text(text);
  ASSERT_TRUE(c.r.graph) << c.c->diags().render();
  const Graph& g = *c.r.graph;
  EXPECT_TRUE(g.find_param("linear.0.b"));
  EXPECT_FALSE(g.find_param("linear.1.b"));
  EXPECT_EQ(g.params.size(), 3u);
  bool doubled = false;  // the else-if branch: out = z * 2
  for (const Node& n : g.nodes)
    if (n.op == OpKind::Constant) doubled |= n.attrs.f("value") == 2.0;
  EXPECT_TRUE(doubled);
  // -D H=16 takes the first branch, whose name is unknown: an error there, not before.
  CompileOptions big;
  big.defines = {{"H", "16"}};
  Compiled e = compile_text(text, big);
  EXPECT_FALSE(e.r.graph);
  EXPECT_NE(e.c->diags().render().find("undefined_name"), std::string::npos) << e.c->diags().render();
}

TEST(Elaborate, DefinesBindDimensionsAndOverrideConstants) {
  const char* text =
      "let K = 3\n"
      "model m(B, T = 4) {\n  input x: f32[B, T]\n  y = x * K\n  output y\n}\n";
  CompileOptions opts;
  opts.defines = {{"B", "7"}, {"K", "2.5"}};
  Compiled c = compile_text(text, opts);
  ASSERT_TRUE(c.r.graph) << c.c->diags().render();
  const Graph& g = *c.r.graph;
  EXPECT_EQ(g.type(g.outputs[0].value).str(), "f32[7,4]");
  bool found = false;
  for (const Node& n : g.nodes)
    if (n.op == OpKind::Constant) found |= n.attrs.f("value") == 2.5;
  EXPECT_TRUE(found);

  CompileOptions bad;
  bad.defines = {{"Q", "1"}};
  Compiled e = compile_text(text, bad);
  EXPECT_FALSE(e.r.graph);
  EXPECT_NE(e.c->diags().render().find("-D Q=1: model 'm' has no dimension or constant named 'Q'"), std::string::npos);
}

TEST(Elaborate, DropoutKeysDependOnPlaceNotOnCompilation) {
  const char* text =
      "def drop(x: f32[N]) { return dropout(x, p = 0.5) }\n"
      "model m(B) {\n  input x: f32[B]\n  y = drop(drop(x))\n  output y\n}\n";
  Compiled a = compile_text(text), b = compile_text(text);
  ASSERT_TRUE(a.r.graph && b.r.graph);
  std::vector<int64_t> ka, kb;
  for (const Node& n : a.r.graph->nodes)
    if (n.op == OpKind::Dropout) ka.push_back(n.attrs.i("key"));
  for (const Node& n : b.r.graph->nodes)
    if (n.op == OpKind::Dropout) kb.push_back(n.attrs.i("key"));
  ASSERT_EQ(ka.size(), 2u);
  EXPECT_EQ(ka, kb);
  EXPECT_NE(ka[0], ka[1]);
}

TEST(Elaborate, NumbersFoldAndAdoptTheTensorDtype) {
  const char* text = "model m(B) {\n  input x: f16[B]\n  y = x * (1.0 / sqrt(4)) + 2\n  output y\n}\n";
  Compiled c = compile_text(text);
  ASSERT_TRUE(c.r.graph) << c.c->diags().render();
  const Graph& g = *c.r.graph;
  std::vector<double> constants;
  for (const Node& n : g.nodes) {
    if (n.op != OpKind::Constant) continue;
    EXPECT_EQ(n.outputs[0].dtype, DType::F16);
    constants.push_back(n.attrs.f("value"));
  }
  EXPECT_EQ(constants, (std::vector<double>{0.5, 2.0}));
}

TEST(Elaborate, EveryRegisteredOpHasASummary) {
  // docs/ops.md is generated from the summaries (the golden test docs.ops_reference).
  for (const OpInfo& op : OpRegistry::get().all()) EXPECT_FALSE(op.summary.empty()) << op.name;
}

}  // namespace
}  // namespace modelc

// Whole-model gradient checks: the example models, elaborated with small dimensions,
// differentiated with append_gradients (the result must verify) and compared with
// central differences at random elements of every parameter. fashion_cnn's dropout runs
// in training mode with a fixed seed and step: the same key draws the same mask in the
// forward, the backward and every finite-difference evaluation.
#include <filesystem>

#include "compiler/frontend/parser.h"
#include "compiler/frontend/sema.h"
#include "tests/grad/grad_check.h"

namespace modelc::test {
namespace {

namespace fs = std::filesystem;

// Parses and elaborates a model through the front end (grad_tests links the passes and
// the front end, not the compile API); the example models import nothing.
struct Model {
  SourceManager sm;
  std::unique_ptr<DiagnosticEngine> diags = std::make_unique<DiagnosticEngine>(sm);
  Elaborated r;
  std::string errors() const { return diags->render(); }
};

std::unique_ptr<Model> compile_model(const char* name, std::vector<std::pair<std::string, std::string>> defines) {
  auto m = std::make_unique<Model>();
  std::string path = (fs::path(MODELC_SOURCE_DIR) / "models" / (std::string(name) + ".model")).string();
  auto file = load_source(path, m->sm, *m->diags);
  if (!file) return m;
  auto module = parse_module(*file, m->sm, *m->diags);
  if (m->diags->has_errors()) return m;
  m->r = elaborate({module.get()}, ElaborateOptions{"", std::move(defines)}, m->sm, *m->diags);
  return m;
}

// Random values of magnitude `scale` for every param; returns their names.
std::vector<std::string> feed_params(const Graph& g, std::map<std::string, RefTensor>& feeds, double scale) {
  std::map<std::string, int64_t> dims;
  for (const DimDecl& d : g.dims)
    if (d.value) dims[d.name] = *d.value;
  std::vector<std::string> names;
  for (NodeId id : g.params) {
    const Node& n = g.node(id);
    feeds[n.name] = rand_f(concrete_shape(n.outputs[0].shape, dims), -scale, scale);
    names.push_back(n.name);
  }
  return names;
}

TEST(GradModels, FashionMlp) {
  auto m = compile_model("fashion_mlp", {{"H", std::to_string(rnd(4, 12))}});
  ASSERT_TRUE(m->r.graph) << m->errors();
  const Graph& g = *m->r.graph;
  std::map<std::string, RefTensor> feeds;
  auto names = feed_params(g, feeds, 0.1);
  int64_t B = rnd(1, 3);
  feeds["images"] = rand_f({B, 784}, 0, 1);
  feeds["labels"] = rand_ids({B}, 10);
  check_graph_grads(g, "loss", feeds, names, {}, kGradEps, kGradTol, 6);
}

TEST(GradModels, FashionCnnWithDropoutInTraining) {
  auto m = compile_model("fashion_cnn", {});
  ASSERT_TRUE(m->r.graph) << m->errors();
  const Graph& g = *m->r.graph;
  std::map<std::string, RefTensor> feeds;
  auto names = feed_params(g, feeds, 0.1);
  feeds["images"] = rand_f({1, 1, 28, 28}, 0, 1);
  feeds["labels"] = rand_ids({1}, 10);
  InterpOptions train{true, static_cast<uint64_t>(rnd(0, 1 << 20)), static_cast<uint64_t>(rnd(0, 100))};
  check_graph_grads(g, "loss", feeds, names, train, kGradEps, kGradTol, 3);
}

TEST(GradModels, CharGptWithSmallDimensions) {
  // heads = 6 is fixed by the model, so C is a multiple of 6.
  int64_t T = rnd(2, 5), C = 6 * rnd(1, 2), V = rnd(3, 9);
  auto m = compile_model("char_gpt", {{"T", std::to_string(T)}, {"C", std::to_string(C)}, {"V", std::to_string(V)}});
  ASSERT_TRUE(m->r.graph) << m->errors();
  const Graph& g = *m->r.graph;
  std::map<std::string, RefTensor> feeds;
  auto names = feed_params(g, feeds, 0.5);
  int64_t B = rnd(1, 2);
  feeds["tokens"] = rand_ids({B, T}, V);
  feeds["targets"] = rand_ids({B, T}, V);
  check_graph_grads(g, "loss", feeds, names, {}, kGradEps, kGradTol, 2);
}

}  // namespace
}  // namespace modelc::test

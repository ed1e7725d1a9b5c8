// modelrun bench --compare-fusion: see fusion_bench.h.
#include "tools/modelrun/fusion_bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "compiler/pipeline.h"
#include "runtime/execution/memory_plan.h"
#include "runtime/base/train_rules.h"
#include "runtime/session/session.h"

namespace modelrun {

namespace fs = std::filesystem;
using namespace modelc;
using Clock = std::chrono::steady_clock;

namespace {

// An error already explained to the user (diagnostics printed): exit status 1.
struct Reported {};

constexpr int64_t kUnbound = std::numeric_limits<int64_t>::min();
constexpr int64_t kTriadFloats = int64_t{64} << 20 >> 2;  // 64 MiB per array
constexpr int kTriadRepetitions = 10;
constexpr int64_t kNoIndexBound = 2;  // i32 inputs that index nothing: values in [0, 2)

// The symbol a dim binds: a single symbol with coefficient 1 (as the executor binds them).
std::optional<uint32_t> binding_symbol(const rt::SizeExpr& e) {
  if (e.terms.size() == 1 && e.terms[0].coef == 1 && e.terms[0].symbols.size() == 1) return e.terms[0].symbols[0];
  return std::nullopt;
}

bool bound(const rt::SizeExpr& e, std::span<const int64_t> vals) {
  for (const rt::SizeExpr::Term& t : e.terms)
    if (std::any_of(t.symbols.begin(), t.symbols.end(), [&](uint32_t s) { return s >= vals.size() || vals[s] == kUnbound; })) return false;
  return true;
}

std::vector<int64_t> buffer_shape(const rt::Program& p, uint32_t b, std::span<const int64_t> vals) {
  const rt::BufferDesc& d = p.buffers.at(b);
  std::vector<int64_t> shape;
  for (const rt::SizeExpr& e : d.shape) {
    if (!bound(e, vals))
      throw std::runtime_error(fmt::format("the shape of buffer '{}' depends on a symbol no input binds ({})", d.name,
                                           e.str(p.symbols)));
    shape.push_back(e.eval(vals));
  }
  return shape;
}

double bytes_of(const rt::Program& p, uint32_t b, std::span<const int64_t> vals) {
  buffer_shape(p, b, vals);  // names an unbound symbol clearly
  return static_cast<double>(rt::buffer_bytes(p, b, vals));
}

// The input tensors the benchmark feeds: one per input name, with the caller's shape (the
// whole batch of a step; the session splits it into micro-batches).
struct InputSpec {
  std::string name;
  rt::ElemType type = rt::ElemType::F32;
  std::vector<int64_t> shape;
  int64_t index_bound = 0;  // i32: values in [0, index_bound)
};

// Symbol values of one call of `fn` fed tensors of `shapes` (input name -> the caller's
// shape), bound the way the executor binds them, plus "$seed" and "$step".
std::vector<int64_t> bind_symbols(const rt::Program& p, const rt::Function& fn,
                                  const std::map<std::string, std::vector<int64_t>>& shapes, uint64_t seed) {
  std::vector<int64_t> vals(p.symbols.size(), kUnbound);
  if (auto s = p.symbol_id("$seed")) vals[*s] = static_cast<int64_t>(seed);
  if (auto s = p.symbol_id("$step")) vals[*s] = 0;
  int64_t mb = std::max<int64_t>(fn.micro_batches, 1);
  for (const rt::Feed& f : fn.feeds) {
    auto it = shapes.find(f.name);
    if (it == shapes.end()) continue;
    std::vector<int64_t> s = it->second;
    if (!s.empty()) s[0] /= mb;
    const rt::BufferDesc& d = p.buffers.at(f.buffer);
    for (size_t k = 0; k < d.shape.size() && k < s.size(); ++k)
      if (auto sym = binding_symbol(d.shape[k]); sym && vals[*sym] == kUnbound) vals[*sym] = s[k];
  }
  return vals;
}

// The exclusive bound of the values an i32 input may take: the tightest index limit the
// compiler recorded on the buffers it feeds (rt::BufferDesc::index_limit: an embedding's
// rows, cross_entropy's classes); kNoIndexBound when it indexes nothing.
int64_t index_bound(const rt::Program& p, const std::string& input) {
  int64_t best = std::numeric_limits<int64_t>::max();
  for (const rt::Function& fn : p.functions)
    for (const rt::Feed& f : fn.feeds)
      if (const int64_t l = p.buffers.at(f.buffer).index_limit; f.name == input && l > 0) best = std::min(best, l);
  return best == std::numeric_limits<int64_t>::max() ? kNoIndexBound : best;
}

std::vector<InputSpec> input_specs(const rt::Program& p, const std::string& file) {
  const rt::Function& fn = *p.function("train_step");
  int64_t mb = std::max<int64_t>(fn.micro_batches, 1);
  std::vector<int64_t> vals(p.symbols.size(), kUnbound);
  // Dim 0 of every input is the batch: a symbol there is bound to the micro-batch, the
  // step's batch over its micro-batches (docs/language.md).
  for (const rt::Feed& f : fn.feeds) {
    const rt::BufferDesc& d = p.buffers.at(f.buffer);
    if (f.name.starts_with("$") || d.shape.empty()) continue;
    if (auto s = binding_symbol(d.shape[0]); s && vals[*s] == kUnbound) vals[*s] = p.train.batch / mb;
  }
  std::vector<InputSpec> specs;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const rt::Feed& f : fn.feeds) {
    if (f.name.starts_with("$") || shapes.count(f.name)) continue;
    const rt::BufferDesc& d = p.buffers.at(f.buffer);
    InputSpec s{f.name, d.type, {}, 0};
    for (const rt::SizeExpr& e : d.shape) {
      if (!bound(e, vals))
        throw std::runtime_error(fmt::format("{}: input '{}' has a size other than the batch that is not known ({}); bind it "
                                             "with -D", file, f.name, e.str(p.symbols)));
      s.shape.push_back(e.eval(vals));
    }
    if (!s.shape.empty()) s.shape[0] *= mb;
    if (d.type == rt::ElemType::F16 || d.type == rt::ElemType::BF16)
      throw std::runtime_error(fmt::format("{}: input '{}' is {}; --compare-fusion feeds f32, i32 and bool inputs", file,
                                           f.name, dtype_name(d.type)));
    shapes[f.name] = s.shape;
    specs.push_back(std::move(s));
  }
  for (InputSpec& s : specs)
    if (s.type == rt::ElemType::I32) s.index_bound = index_bound(p, s.name);
  return specs;
}

using Batch = std::map<std::string, rt::HostTensor>;

// f32: standard normal; i32: uniform in [0, index_bound); bool: 0 or 1.
Batch random_batch(const std::vector<InputSpec>& specs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch b;
  for (const InputSpec& s : specs) {
    rt::HostTensor t(s.type, s.shape);
    int64_t n = t.numel();
    if (s.type == rt::ElemType::F32) {
      for (int64_t i = 0; i < n; ++i) t.f32()[i] = normal(rng);
    } else if (s.type == rt::ElemType::I32) {
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(std::max<int64_t>(s.index_bound, 1) - 1));
      for (int64_t i = 0; i < n; ++i) t.i32()[i] = pick(rng);
    } else {
      std::uniform_int_distribution<int> pick(0, 1);
      for (int64_t i = 0; i < n; ++i) t.bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(pick(rng));
    }
    b.emplace(s.name, std::move(t));
  }
  return b;
}

double element(const rt::HostTensor& t, int64_t i) {
  size_t k = static_cast<size_t>(i);
  uint16_t h = 0;
  switch (t.type) {
    case rt::ElemType::F32: return t.f32()[i];
    case rt::ElemType::I32: return t.i32()[i];
    case rt::ElemType::Bool: return t.bytes[k];
    case rt::ElemType::BF16: {
      std::memcpy(&h, t.bytes.data() + 2 * k, 2);
      uint32_t u = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case rt::ElemType::F16: {
      std::memcpy(&h, t.bytes.data() + 2 * k, 2);
      int e = (h >> 10) & 31, m = h & 1023;
      double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(m + 1024, e - 25);
      return h >> 15 ? -v : v;
    }
  }
  return NAN;
}

// The largest absolute and relative differences seen, and where. Relative is per tensor:
// its largest |a - b| over its largest magnitude max(|a|, |b|) (a scalar: over its own), so
// that values near zero, such as a bias after a few small steps, do not dominate.
struct Diff {
  double abs = 0, rel = 0;
  std::string abs_at, rel_at;

  void record(const std::string& what, double d, double scale) {
    double r = d == 0 ? 0 : std::isinf(d) || scale == 0 ? INFINITY : d / scale;
    if (d > abs) abs = d, abs_at = what;
    if (r > rel) rel = r, rel_at = what;
  }
  void value(const std::string& what, double a, double b) {
    if (a == b || (std::isnan(a) && std::isnan(b))) return;
    bool finite = std::isfinite(a) && std::isfinite(b);
    record(what, finite ? std::fabs(a - b) : INFINITY, std::max(std::fabs(a), std::fabs(b)));
  }
  void tensor(const std::string& what, const rt::HostTensor& a, const rt::HostTensor& b) {
    if (a.type != b.type || a.shape != b.shape)
      throw std::runtime_error(fmt::format("'{}' is {}[{}] in the fused program but {}[{}] in the unfused one", what,
                                           dtype_name(a.type), fmt::join(a.shape, ","), dtype_name(b.type),
                                           fmt::join(b.shape, ",")));
    double d = 0, scale = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      double x = element(a, i), y = element(b, i);
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
      if (std::isfinite(y)) scale = std::max(scale, std::fabs(y));
      if (x == y || (std::isnan(x) && std::isnan(y))) continue;
      d = std::max(d, std::isfinite(x) && std::isfinite(y) ? std::fabs(x - y) : INFINITY);
    }
    record(what, d, scale);
  }
};

// One table row: a model's function under one variant.
struct Row {
  std::string model, fn, variant;
  int64_t batch = 0;
  double ms = 0;  // median
  FunctionCost cost;
  bool fused = false;
  double speedup = NAN;            // fused rows: unfused ms / fused ms
  Diff diff;                       // fused rows
};

struct Variant {
  bool fusion = true;
  std::shared_ptr<rt::Program> program;
  std::unique_ptr<rt::Session> session;
};

std::shared_ptr<rt::Program> compile_variant(const BenchOptions& o, const std::string& file, bool fusion) {
  CompileOptions opts;
  opts.model = o.common.model;
  for (const std::string& d : o.common.defines) {
    auto eq = d.find('=');
    if (eq == std::string::npos || eq == 0) throw std::runtime_error(fmt::format("-D expects NAME=VALUE, got '{}'", d));
    opts.defines.emplace_back(d.substr(0, eq), d.substr(eq + 1));
  }
  Compilation comp(opts);
  ProgramOptions po;
  po.train = true;
  po.fusion = fusion;
  std::shared_ptr<rt::Program> p = compile_program(comp, file, po);
  if (fusion || !p) std::cerr << comp.diags().render();  // the warnings once
  if (!p) throw Reported{};
  if (!p->function("train_step"))
    throw std::runtime_error(fmt::format("{}: model '{}' has no train section (--compare-fusion times its train step)", file,
                                         p->model));
  if (o.common.batch) {
    p->train.batch = *o.common.batch;
    if (auto e = rt::check_batch_split(p->train.batch, p->function("train_step")->micro_batches))
      throw std::runtime_error(fmt::format("--batch {}: {}", p->train.batch, *e));
  }
  if (o.common.seed) p->train.seed = *o.common.seed;
  return p;
}

double median_ms(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t.empty() ? NAN : 1e3 * t[t.size() / 2];
}

// Compiles one model twice, runs both, and returns its rows (step fused/unfused, then fwd).
// Long by design: one benchmark in the order it runs: compile each variant, time it, tabulate.
std::vector<Row> bench_model(const BenchOptions& o, const std::string& file) {
  bool talk = !o.common.quiet;
  if (talk) fmt::print(stderr, "{}: compiling with fusion on and off\n", file);
  Variant v[2];
  v[0].fusion = true;
  v[1].fusion = false;
  for (Variant& x : v) x.program = compile_variant(o, file, x.fusion);
  const rt::Program& p = *v[0].program;
  std::vector<InputSpec> specs = input_specs(p, file);
  if (talk) {
    std::string s;
    for (const InputSpec& x : specs) {
      s += fmt::format("{}{} {}[{}]", s.empty() ? "" : ", ", x.name, dtype_name(x.type), fmt::join(x.shape, ","));
      if (x.type == rt::ElemType::I32) s += fmt::format(" in [0, {})", x.index_bound);
    }
    fmt::print(stderr, "{}: model {}, random inputs: {}\n", file, p.model, s.empty() ? std::string("none") : s);
  }
  int64_t total = o.warmup + o.steps;
  std::vector<Batch> batches;
  for (int64_t i = 0; i < std::min<int64_t>(total, 4); ++i)
    batches.push_back(random_batch(specs, static_cast<uint64_t>(p.train.seed) * 1000003u + static_cast<uint64_t>(i)));
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const InputSpec& s : specs) shapes[s.name] = s.shape;
  int64_t batch = specs.empty() || specs[0].shape.empty() ? p.train.batch : specs[0].shape[0];

  for (Variant& x : v) {
    rt::SessionOptions so;
    so.threads = o.common.threads;
    so.flush_subnormals = o.common.subnormals == "flush";
    so.seed = static_cast<uint64_t>(x.program->train.seed);
    so.total_steps = total;
    x.session = std::make_unique<rt::Session>(x.program, so);
  }
  if (v[0].session->param_names() != v[1].session->param_names() ||
      v[0].session->state_names() != v[1].session->state_names() ||
      v[0].session->buffer_names() != v[1].session->buffer_names())
    throw std::runtime_error(fmt::format("{}: the fused and unfused programs have different parameters, buffers or state", file));

  std::vector<Row> rows;
  // Each step runs on both sessions, alternating which goes first, so that a change in the
  // machine's load falls on both alike; both see the same batches in the same order.
  auto measure = [&](const std::string& fn_name, auto&& call) {
    Row r[2];
    std::vector<double> times[2];
    for (int64_t i = 0; i < total; ++i) {
      const Batch& b = batches[static_cast<size_t>(i) % batches.size()];
      for (int k = 0; k < 2; ++k) {
        int which = static_cast<int>((i + k) % 2);
        auto t0 = Clock::now();
        call(which, b, i);
        double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        if (i >= o.warmup) times[which].push_back(dt);
      }
    }
    for (int k = 0; k < 2; ++k) {
      const rt::Program& q = *v[k].program;
      const rt::Function& fn = *q.function(fn_name);
      r[k].model = q.model;
      r[k].fn = fn_name == "eval" ? "fwd" : "step";
      r[k].variant = v[k].fusion ? "fused" : "unfused";
      r[k].batch = batch;
      r[k].ms = median_ms(times[k]);
      r[k].cost = function_cost(q, fn, bind_symbols(q, fn, shapes, static_cast<uint64_t>(q.train.seed)));
      r[k].fused = v[k].fusion;
    }
    r[0].speedup = r[1].ms / r[0].ms;
    return std::make_pair(r[0], r[1]);
  };

  if (talk) fmt::print(stderr, "{}: {} train steps on each ({} warm-up)\n", file, total, o.warmup);
  float loss[2] = {0, 0};
  Diff step_diff;
  auto [sf, su] = measure("train_step", [&](int which, const Batch& b, int64_t i) {
    loss[which] = v[which].session->train_step(b);
    if (which == (i + 1) % 2) step_diff.value(fmt::format("loss of step {}", i + 1), loss[0], loss[1]);
  });
  for (const std::string& n : v[0].session->param_names())
    step_diff.tensor(n, v[0].session->param(n), v[1].session->param(n));
  for (const std::string& n : v[0].session->state_names())
    step_diff.tensor(n, v[0].session->state(n), v[1].session->state(n));
  for (const std::string& n : v[0].session->buffer_names())
    step_diff.tensor(n, v[0].session->buffer(n), v[1].session->buffer(n));
  sf.diff = step_diff;
  rows.push_back(sf);
  rows.push_back(su);

  if (p.function("eval") && v[1].program->function("eval")) {
    if (talk) fmt::print(stderr, "{}: {} forward passes (eval) on each\n", file, total);
    std::map<std::string, rt::HostTensor> out[2];
    Diff fwd_diff;
    auto [ff, fu] = measure("eval", [&](int which, const Batch& b, int64_t i) {
      out[which] = v[which].session->eval(b);
      if (which != (i + 1) % 2) return;  // compare once both ran
      for (const auto& [name, t] : out[0]) {
        auto it = out[1].find(name);
        if (it == out[1].end()) throw std::runtime_error(fmt::format("{}: output '{}' is missing unfused", file, name));
        fwd_diff.tensor(name, t, it->second);
      }
    });
    ff.diff = fwd_diff;
    rows.push_back(ff);
    rows.push_back(fu);
  }
  return rows;
}

std::vector<std::string> model_files(const BenchOptions& o) {
  std::vector<std::string> args{o.common.file};
  args.insert(args.end(), o.more_files.begin(), o.more_files.end());
  std::vector<std::string> out;
  for (const std::string& a : args) {
    std::error_code ec;
    if (fs::path(a).extension() == ".plan")
      throw std::runtime_error(fmt::format("{}: --compare-fusion compiles each model from its source twice; a .plan is "
                                           "already compiled", a));
    if (fs::is_directory(a, ec)) {
      std::vector<std::string> found;
      for (const fs::directory_entry& e : fs::directory_iterator(a, ec))
        if (e.path().extension() == ".model" && !e.is_directory()) found.push_back(e.path().string());
      if (ec) throw std::runtime_error(fmt::format("{}: {}", a, ec.message()));
      if (found.empty()) throw std::runtime_error(fmt::format("{}: the directory holds no .model files", a));
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else if (!fs::exists(a, ec)) {
      throw std::runtime_error(fmt::format("{}: no such file or directory", a));
    } else {
      out.push_back(a);
    }
  }
  return out;
}

// tools/torch_fusion_bench.py --json: {"torch": VERSION, "threads": N, "results": [{"model":
// NAME, "fn": "step"|"fwd", "eager_ms": X, "compile_ms": Y or null}, ...]}.
struct TorchTimes {
  std::string version;
  int threads = 0;
  std::map<std::pair<std::string, std::string>, std::pair<std::optional<double>, std::optional<double>>> ms;
};

TorchTimes load_torch_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open", path));
  TorchTimes t;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    t.version = j.value("torch", std::string("?"));
    t.threads = j.value("threads", 0);
    for (const nlohmann::json& r : j.at("results")) {
      auto num = [&](const char* k) -> std::optional<double> {
        if (!r.contains(k) || r[k].is_null()) return std::nullopt;
        return r[k].get<double>();
      };
      t.ms[{r.at("model").get<std::string>(), r.at("fn").get<std::string>()}] = {num("eager_ms"), num("compile_ms")};
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not the JSON of tools/torch_fusion_bench.py --json ({})", path, rt::json_error_text(e)));
  }
  return t;
}

std::string fmt_ms(double ms) {
  if (std::isnan(ms)) return "-";
  return ms >= 100 ? fmt::format("{:.1f}", ms) : ms >= 1 ? fmt::format("{:.2f}", ms) : fmt::format("{:.3f}", ms);
}

std::string fmt_diff(double d) { return d == 0 ? "0" : fmt::format("{:.2e}", d); }

void print_table(const std::vector<Row>& rows, double triad, int threads, const BenchOptions& o,
                 const std::optional<TorchTimes>& torch) {
  fmt::print("# modelrun bench --compare-fusion: {} threads, median of {} steps after {} warm-up steps, random batches\n",
             threads, o.steps, o.warmup);
  fmt::print("# triad a[i] = b[i] + s*c[i] over 3 x 64 MiB f32, same thread count: {:.2f} GB/s (best of {} before and {} after "
             "the models, counting 3 x 4 bytes per element)\n", triad, kTriadRepetitions, kTriadRepetitions);
  std::string head = fmt::format("{:<28} {:<4} {:<7} {:>5} {:>9} {:>7} {:>7} {:>7} {:>4} {:>9} {:>7} {:>6} {:>9} {:>9}",
                                 "model", "fn", "variant", "batch", "ms/step", "speedup", "kernels", "nodes/k", "lib",
                                 "MB/step", "GB/s", "%triad", "max-abs", "max-rel");
  if (torch) head += fmt::format(" {:>9} {:>11}", "eager-ms", "inductor-ms");
  fmt::print("{}\n", head);
  for (const Row& r : rows) {
    double gbs = r.cost.bytes / (r.ms * 1e-3) / 1e9;
    std::string line = fmt::format(
        "{:<28} {:<4} {:<7} {:>5} {:>9} {:>7} {:>7} {:>7.2f} {:>4} {:>9.1f} {:>7.2f} {:>6.1f} {:>9} {:>9}", r.model, r.fn,
        r.variant, r.batch, fmt_ms(r.ms), r.fused ? fmt::format("{:.2f}x", r.speedup) : "-", r.cost.codelets,
        r.cost.codelets ? static_cast<double>(r.cost.codelet_nodes) / static_cast<double>(r.cost.codelets) : 0.0,
        r.cost.library_calls, r.cost.bytes / 1e6, gbs, 100 * gbs / triad, r.fused ? fmt_diff(r.diff.abs) : "-",
        r.fused ? fmt_diff(r.diff.rel) : "-");
    if (torch) {
      auto it = torch->ms.find({r.model, r.fn});
      bool have = r.fused && it != torch->ms.end();
      line += fmt::format(" {:>9} {:>11}", have && it->second.first ? fmt_ms(*it->second.first) : "-",
                          have && it->second.second ? fmt_ms(*it->second.second) : "-");
    }
    fmt::print("{}\n", line);
  }
  fmt::print(
      "# step: train_step (forward, backward, optimizer update); fwd: eval. kernels, lib: instructions per call; nodes/k: IR\n"
      "# nodes per kernel. MB/step: what a machine without caches moves (every operand of every instruction read or written\n"
      "# once, plus the update and output copies); GB/s = MB/step / ms/step, against the triad. speedup: unfused / fused.\n"
      "# max-abs, max-rel: fused vs unfused from the same initial state and batches (rel: a tensor's largest |a-b| over its\n"
      "# largest |a|, |b|); step: the loss of every step, then every parameter and optimizer state after the last; fwd:\n"
      "# every output of every call.\n");
  if (torch)
    fmt::print("# eager-ms, inductor-ms: PyTorch {} eager and torch.compile (Inductor, CPU) on {} threads, the same step "
               "(tools/torch_fusion_bench.py)\n", torch->version, torch->threads);
  for (const Row& r : rows)
    if (r.fused && r.diff.abs > 0)
      fmt::print("# {} {}: largest absolute difference in {}, largest relative in {}\n", r.model, r.fn, r.diff.abs_at,
                 r.diff.rel_at);
}

}  // namespace

FunctionCost function_cost(const rt::Program& p, const rt::Function& fn, std::span<const int64_t> symbol_values) {
  FunctionCost c;
  for (const rt::Instr& in : fn.instrs) {
    if (in.kind == rt::Instr::Kind::Codelet) {
      ++c.codelets;
      c.codelet_nodes += in.codelet < p.codelets.size() ? p.codelets[in.codelet].nodes : 1;
    } else {
      ++c.library_calls;
    }
    for (uint32_t b : in.inputs)
      if (b != rt::kNoBuffer) c.bytes += bytes_of(p, b, symbol_values);
    for (uint32_t b : in.outputs)
      if (b != rt::kNoBuffer) c.bytes += bytes_of(p, b, symbol_values);
  }
  for (const auto& [from, to] : fn.updates)
    if (from != to) c.bytes += 2 * bytes_of(p, to, symbol_values);
  for (const auto& [name, b] : fn.outputs) c.bytes += 2 * bytes_of(p, b, symbol_values);
  return c;
}

double triad_gbps(rt::ThreadPool& pool, int64_t n, int repetitions) {
  struct Free {
    void operator()(float* f) const { std::free(f); }
  };
  auto alloc = [&] {
    size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
    auto* f = static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64)));
    if (!f) throw std::runtime_error(fmt::format("out of memory allocating the triad's {} bytes", bytes));
    return std::unique_ptr<float, Free>(f);
  };
  auto a = alloc(), b = alloc(), c = alloc();
  float *pa = a.get(), *pb = b.get(), *pc = c.get();
  const int64_t grain = 1 << 14;
  pool.parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) pa[i] = 0, pb[i] = 1, pc[i] = 2;
  });
  const float s = 3;
  double best = INFINITY;
  for (int r = 0; r < std::max(repetitions, 1); ++r) {
    auto t0 = Clock::now();
    pool.parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
      float* __restrict x = pa;
      const float* __restrict y = pb;
      const float* __restrict z = pc;
      for (int64_t i = lo; i < hi; ++i) x[i] = y[i] + s * z[i];
    });
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (n > 0 && (pa[0] != 7 || pa[n - 1] != 7)) throw std::runtime_error("the triad computed a wrong result");
  return 3.0 * 4.0 * static_cast<double>(n) / best / 1e9;
}

int run_fusion_bench(const BenchOptions& o) {
  try {
    if (!o.common.data.empty())
      throw std::runtime_error("--compare-fusion feeds random batches: --data does not apply");
    std::vector<std::string> files = model_files(o);
    std::optional<TorchTimes> torch;
    if (!o.torch_json.empty()) torch = load_torch_json(o.torch_json);
    // The triad runs before and after the models (the better of the two counts), so that a
    // machine shared with other work is measured at its best, as the models' best steps are.
    int threads = 0;
    auto triad = [&] {
      rt::ThreadPool pool(o.common.threads);
      threads = pool.size();
      return triad_gbps(pool, kTriadFloats, kTriadRepetitions);
    };
    double before = triad();
    std::vector<Row> rows;
    for (const std::string& f : files) {
      std::vector<Row> r = bench_model(o, f);
      rows.insert(rows.end(), r.begin(), r.end());
    }
    double after = triad();
    if (!o.common.quiet) fmt::print(stderr, "triad on {} threads: {:.2f} GB/s before, {:.2f} after\n", threads, before, after);
    print_table(rows, std::max(before, after), threads, o, torch);
    return 0;
  } catch (const Reported&) {
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "modelrun: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace modelrun

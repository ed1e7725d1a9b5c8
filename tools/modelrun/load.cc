#include "tools/modelrun/load.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>

#include "compiler/lowered/memory_report.h"
#include "compiler/lowered/schedule.h"
#include "compiler/pipeline.h"
#include "runtime/base/bytes.h"
#include "runtime/base/train_rules.h"
#include "runtime/device/cuda/device.h"
#include "runtime/device/cuda/driver.h"
#include "runtime/session/plan.h"
#include "tools/modelrun/train_state.h"

namespace modelrun {

namespace fs = std::filesystem;
using namespace modelc;


bool is_plan(const std::string& file) { return fs::path(file).extension() == ".plan" || rt::is_plan_file(file); }

namespace {

// The GPU target to compile PTX for: the device's, when --device resolves to a CUDA device
// (the newest LLVM's NVPTX knows, sm_90, for a newer one: the driver JIT-compiles PTX
// forward), else "" (no GPU code; the session runs on the CPU and says why). An explicit
// --device cuda that cannot be used is an error here, before compiling.
std::string gpu_target(const CommonOptions& c) {
  const rt::cuda::DeviceSpec spec = rt::cuda::parse_device(c.device);
  if (spec.kind == rt::cuda::DeviceSpec::Kind::Cpu) return "";
  const rt::cuda::DeviceChoice choice = rt::cuda::choose_device(spec, rt::cuda::Driver::instance());
  if (!choice.cuda) return "";
  const int cc = choice.device->cc_major * 10 + choice.device->cc_minor;
  for (int sm : {90, 89, 87, 86, 80, 75})
    if (cc >= sm) return fmt::format("sm_{}", sm);
  throw std::runtime_error(fmt::format("{} is too old: modelc's GPU code needs sm_75 or later", choice.device->str()));
}

std::shared_ptr<rt::Program> compile_model(const CommonOptions& c, bool train,
                                           const std::optional<std::vector<std::string>>& predict) {
  CompileOptions opts;
  opts.model = c.model;
  for (const std::string& d : c.defines) {
    auto eq = d.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::runtime_error(fmt::format("-D expects NAME=VALUE, got '{}'", d));
    opts.defines.emplace_back(d.substr(0, eq), d.substr(eq + 1));
  }
  Compilation comp(opts);
  ProgramOptions po;
  po.train = train;
  po.predict = predict;
  if (!c.mem_budget.empty()) {
    po.mem_budget = parse_bytes(c.mem_budget);
    if (!po.mem_budget || *po.mem_budget <= 0)
      throw UsageError(fmt::format("--mem-budget {}: expected a size such as 8GiB, 512MiB or 1.5GB", c.mem_budget));
  }
  po.recompute = c.recompute != "none";
  po.annotations = !c.ignore_annotations;
  po.recompute_algorithm = c.recompute == "sqrtn" ? RecomputeAlgorithm::SqrtN : RecomputeAlgorithm::Greedy;
  po.batch = c.batch;
  po.streams = c.streams.value_or(1);
  po.precision = c.precision;
  po.ptx_target = gpu_target(c);
  auto program = compile_program(comp, c.file, po);
  std::cerr << comp.diags().render();
  if (!program) throw Reported{};
  return program;
}

// The inputs of an array source: every feed of the eval function by name, each a batch of
// examples of a shape known when it compiles.
Loaded bind_named(const CommonOptions& c, Loaded l) {
  const rt::Program& p = *l.program;
  const rt::Function& eval = *p.function("eval");
  if (eval.feeds.empty()) throw std::runtime_error(fmt::format("{}: model '{}' has no inputs to feed", c.file, p.model));
  for (const rt::Feed& f : eval.feeds) {
    const rt::BufferDesc& d = p.buffers[f.buffer];
    if (d.shape.empty())
      throw std::runtime_error(fmt::format("{}: input '{}' is a scalar; the data feeds a batch of examples to each input "
                                           "(give it a batch dim, e.g. f32[B, ...])", c.file, f.name));
    rt::InputSpec in{f.name, d.type, {}};
    for (size_t k = 1; k < d.shape.size(); ++k) {
      if (!d.shape[k].is_constant())
        throw std::runtime_error(fmt::format("{}: input '{}' has a size other than the batch that is not known ({}); bind it "
                                             "with -D", c.file, f.name, d.shape[k].str(p.symbols)));
      in.example_shape.push_back(d.shape[k].eval({}));
    }
    l.inputs.push_back(std::move(in));
  }
  l.features = l.inputs.front().name;
  l.labels = l.inputs.back().name;
  l.example_shape = l.inputs.front().example_shape;
  return l;
}

}  // namespace

Loaded compile(const CommonOptions& c, bool train, const std::optional<std::vector<std::string>>& predict) {
  Loaded l;
  if (is_plan(c.file)) {
    if (!c.defines.empty())
      throw UsageError(fmt::format("-D does not apply to {}: a .plan is already compiled (bind dimensions when "
                                   "compiling it: modelc -D NAME=VALUE FILE.model -o FILE.plan)", c.file));
    if (!c.model.empty())
      throw UsageError(fmt::format("--model does not apply to {}: a .plan holds one compiled model (choose it "
                                   "when compiling: modelc --model NAME FILE.model -o FILE.plan)", c.file));
    if (!c.mem_budget.empty() || c.recompute != "greedy" || c.ignore_annotations)
      throw UsageError(fmt::format("--mem-budget, --recompute and --ignore-annotations do not apply to {}: a .plan is already compiled "
                                   "(give them to modelc: modelc --mem-budget BYTES FILE.model -o FILE.plan)", c.file));
    if (c.precision)
      throw UsageError(fmt::format("--precision does not apply to {}: a .plan is already compiled (give it to "
                                   "modelc: modelc --precision {} FILE.model -o FILE.plan)", c.file, *c.precision));
    l.program = rt::read_plan(c.file);
    // A plan keeps the schedule modelc gave it unless --streams asks for another.
    if (c.streams)
      for (rt::Function& f : l.program->functions) schedule_streams(*l.program, f, *c.streams);
  } else {
    l.program = compile_model(c, train, predict);
  }
  l.prefetch = c.prefetch;
  l.workers = c.workers;
  fs::path dir = fs::path(c.file).parent_path();
  l.base_dir = dir.empty() ? fs::path(".").string() : dir.string();

  const rt::Program& p = *l.program;
  const rt::Function* eval = p.function("eval");
  if (eval) {
    bool has_loss = false;
    for (const auto& [name, buf] : eval->outputs) has_loss |= name == "loss";
    if (!has_loss) throw std::runtime_error(fmt::format("{}: model '{}' has no output named 'loss'", c.file, p.model));
    if (p.train.data && rt::is_array_source(p.train.data->kind)) return bind_named(c, std::move(l));
  }
  if (!eval || eval->feeds.size() != 2)
    throw std::runtime_error(fmt::format("{}: modelrun feeds models with two inputs (features, then labels or targets) "
                                         "from idx(), csv(), text() or tokens(), and any inputs by name from npy(), npz() "
                                         "or safetensors(); model '{}' has {}", c.file, p.model,
                                         eval ? eval->feeds.size() : 0));
  l.features = eval->feeds[0].name;
  l.labels = eval->feeds[1].name;
  const rt::BufferDesc& f = p.buffers[eval->feeds[0].buffer];
  // A -D that fixes the batch dim to another size than the batches the run feeds.
  const int64_t fed = c.batch.value_or(p.train.batch) / std::max<int64_t>(1, p.train.accumulate);
  if (!f.shape.empty() && f.shape[0].is_constant() && f.shape[0].eval({}) != fed)
    for (const std::string& d : c.defines)
      if (d.substr(d.find('=') + 1) == std::to_string(f.shape[0].eval({})))
        throw UsageError(fmt::format("-D {}: this fixes the batch dim of input '{}' to {}, but the run feeds batches of "
                                     "{}; set the batch with --batch {} instead", d, l.features, f.shape[0].eval({}),
                                     fed, f.shape[0].eval({})));
  for (size_t k = 1; k < f.shape.size(); ++k) {
    if (!f.shape[k].is_constant())
      throw std::runtime_error(fmt::format("{}: input '{}' has a size other than the batch that is not known ({}); bind it with -D",
                                           c.file, l.features, f.shape[k].str(p.symbols)));
    l.example_shape.push_back(f.shape[k].eval({}));
  }
  const rt::ElemType lt = p.buffers[eval->feeds[1].buffer].type;
  if (lt != rt::ElemType::I32 && lt != rt::ElemType::F32)
    throw std::runtime_error(fmt::format("{}: input '{}' must be i32 (class labels or target tokens) or f32 (regression "
                                         "targets from csv())", c.file, l.labels));
  return l;
}

namespace {

// --data NAME=VALUE of an array source: NAME an input ("input.NAME"), or path and test.
bool override_binding(rt::DataSpec& d, const std::string& name, const std::string& value) {
  auto it = d.strs.find("input." + name);
  if (it == d.strs.end()) return false;
  it->second = d.kind == "npy" && !value.empty() ? fs::absolute(value).string() : value;
  return true;
}

// VALUE of --data NAME=VALUE as the number argument NAME of data source `kind` takes.
template <class T>
T data_number(const std::string& arg, const std::string& kind, const std::string& name, const std::string& value) {
  if constexpr (std::is_integral_v<T>) {
    if (value == "true") return 1;  // a bool argument (normalize, header)
    if (value == "false") return 0;
  }
  T v{};
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size())
    throw UsageError(fmt::format("--data {}: {}()'s '{}' is {}, not '{}'", arg, kind, name,
                                 std::is_integral_v<T> ? "an integer (or true or false)" : "a number", value));
  return v;
}

// --data PATH sets the data's first file argument; --data NAME=VALUE any argument. A path
// given on the command line is relative to the current directory, as every command-line path
// is (a path written in the .model or .plan stays relative to that file's directory).
void override_data(rt::TrainSettings& t, const std::vector<std::string>& data) {
  if (data.empty()) return;
  if (!t.data) throw std::runtime_error("--data: the model's train section names no data source to override");
  for (const std::string& d : data) {
    auto eq = d.find('=');
    if (eq == std::string::npos) {
      if (t.data->kind == "npy")
        throw UsageError(fmt::format("--data {}: npy() binds a file per input; give --data INPUT=FILE.npy", d));
      const char* first = t.data->kind == "idx" ? "images" : "path";
      t.data->strs[first] = fs::absolute(d).string();
      continue;
    }
    std::string name = d.substr(0, eq), value = d.substr(eq + 1);
    if (override_binding(*t.data, name, value)) continue;
    if (t.data->strs.count(name)) t.data->strs[name] = value.empty() ? value : fs::absolute(value).string();
    else if (t.data->ints.count(name)) t.data->ints[name] = data_number<int64_t>(d, t.data->kind, name, value);
    else if (t.data->floats.count(name)) t.data->floats[name] = data_number<double>(d, t.data->kind, name, value);
    else throw std::runtime_error(fmt::format("--data: {}() has no argument '{}'", t.data->kind, name));
  }
}

}  // namespace

std::shared_ptr<const rt::Dataset> open_data(const Loaded& l, const rt::Standardization* stats) {
  const rt::TrainSettings& t = l.program->train;
  if (!t.data) throw std::runtime_error(fmt::format("model '{}' has no data source (train {{ data = ... }})", l.program->model));
  const rt::Function& e = *l.program->function("eval");
  if (l.named()) {
    auto ds = rt::Dataset::open_arrays(*t.data, l.base_dir, static_cast<uint64_t>(t.seed), t.validation, l.inputs);
    for (const rt::InputSpec& in : l.inputs) ds->check_indices(*l.program, in.name, false);
    return ds;
  }
  auto ds = rt::Dataset::open(*t.data, l.base_dir, static_cast<uint64_t>(t.seed), t.validation,
                              l.program->buffers[e.feeds[1].buffer].type, stats);
  ds->check_input(l.features, l.program->buffers[l.program->function("eval")->feeds[0].buffer].type, l.example_shape);
  // Labels and ids the model indexes with: checked once here, so that the error names the
  // file and the example (the session checks every batch again, by position).
  ds->check_indices(*l.program, l.features, false);
  ds->check_indices(*l.program, l.labels, true);
  return ds;
}

void check_input(const Loaded& l, const std::vector<std::string>& args) {
  const rt::Program& p = *l.program;
  const std::string kind = p.train.data ? p.train.data->kind : "no";
  if (kind == "csv" && (args.size() != 1 || args[0].find('=') != std::string::npos))
    throw UsageError(fmt::format("--input: model '{}' reads csv() data; give one .csv file", p.model));
  if (kind != "csv" && !l.named())
    throw UsageError(fmt::format("--input: model '{}' reads {}() data, which --input does not take (it takes csv and "
                                 "arrays); give other data of that kind with --data (and --split all)", p.model, kind));
}

std::shared_ptr<const rt::Dataset> open_input(const Loaded& l, const std::vector<std::string>& args,
                                              const rt::Standardization* stats) {
  const rt::Program& p = *l.program;
  check_input(l, args);
  if (p.train.data->kind == "csv") {
    int64_t features = 1;
    for (int64_t d : l.example_shape) features *= d;
    return rt::Dataset::open_csv_input(*p.train.data, fs::absolute(args[0]).string(), features,
                                       p.buffers[p.function("eval")->feeds[1].buffer].type, stats);
  }
  rt::DataSpec spec = *p.train.data;
  const bool one_file = args.size() == 1 && args[0].find('=') == std::string::npos;
  std::vector<std::string> names;
  for (const rt::InputSpec& in : l.inputs) names.push_back(in.name);
  if (one_file) {
    const std::string ext = fs::path(args[0]).extension().string();
    if (ext != ".npz" && ext != ".safetensors")
      throw UsageError(fmt::format("--input {}: give a .npz or .safetensors file of arrays, or INPUT=FILE.npy per input",
                                   args[0]));
    if (spec.kind == "npy")  // the model's files name no arrays: each input reads the array of its name
      for (const std::string& n : names) spec.strs["input." + n] = n;
    spec.kind = ext.substr(1);
    spec.strs["path"] = fs::absolute(args[0]).string();
  } else {
    spec = rt::DataSpec{"npy", {}, {}, {}};
    for (const std::string& a : args) {
      const auto eq = a.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == a.size())
        throw UsageError(fmt::format("--input {}: with several files, give INPUT=FILE.npy for each input", a));
      const std::string name = a.substr(0, eq);
      if (std::find(names.begin(), names.end(), name) == names.end())
        throw UsageError(fmt::format("--input {}: model '{}' has no input '{}' (its inputs: {})", a, p.model, name,
                                     fmt::join(names, ", ")));
      spec.strs["input." + name] = fs::absolute(a.substr(eq + 1)).string();
    }
  }
  std::vector<rt::InputSpec> wanted;
  const rt::Function& fn = *p.function("predict");
  for (rt::InputSpec in : l.inputs) {
    const bool read = std::any_of(fn.feeds.begin(), fn.feeds.end(), [&](const rt::Feed& f) { return f.name == in.name; });
    if (!read && in.name != l.labels) continue;
    in.optional = !read;
    if (spec.kind == "npy" && !read && !spec.strs.count("input." + in.name)) continue;
    wanted.push_back(std::move(in));
  }
  for (const rt::InputSpec& in : wanted)
    if (spec.kind == "npy" && !in.optional && !spec.strs.count("input." + in.name))
      throw UsageError(fmt::format("--input: the prediction reads input '{}'; give --input {}=FILE.npy", in.name, in.name));
  auto ds = rt::Dataset::open_arrays(spec, "", static_cast<uint64_t>(p.train.seed), 0.0, wanted, /*whole=*/true);
  for (const rt::InputSpec& in : wanted) ds->check_indices(p, in.name, false);
  return ds;
}

std::map<std::string, rt::HostTensor> feed(const Loaded& l, rt::Batch& b) {
  std::map<std::string, rt::HostTensor> m;
  if (l.named()) {
    for (auto& [name, t] : b.named) m[name] = std::move(t);
    return m;
  }
  m[l.features] = std::move(b.features);
  m[l.labels] = std::move(b.labels);
  return m;
}

std::map<std::string, rt::HostTensor> predict_inputs(const Loaded& l, const rt::Batch& b) {
  std::map<std::string, rt::HostTensor> m;
  for (const rt::Feed& f : l.program->function("predict")->feeds) {
    const rt::HostTensor* t = l.named() ? b.find(f.name) : f.name == l.features ? &b.features : nullptr;
    if (!t) throw std::runtime_error(fmt::format("the data gives no input '{}' to predict from", f.name));
    m[f.name] = *t;
  }
  return m;
}

const rt::HostTensor& batch_labels(const Loaded& l, const rt::Batch& b) {
  static const rt::HostTensor none;
  const rt::HostTensor* t = l.named() ? b.find(l.labels) : &b.labels;
  return t ? *t : none;
}

EvalResult evaluate(rt::Session& s, const Loaded& l, const std::shared_ptr<const rt::Dataset>& ds, int64_t batch) {
  return modelrun::evaluate(s, EvalFeeds{l.features, l.labels, l.example_shape, l.prefetch, l.workers}, ds, batch);
}

rt::NamedTensors persistent_tensors(const rt::Session& s, bool with_state) {
  rt::NamedTensors out;
  for (const std::string& n : s.param_names()) out.emplace_back(n, s.param(n));
  for (const std::string& n : s.buffer_names()) out.emplace_back(n, s.buffer(n));
  if (with_state)
    for (const std::string& n : s.state_names()) out.emplace_back(n, s.state(n));
  return out;
}

// The train step's peak memory as the memory plan predicts it at the program's batch: what
// Session::memory_usage().peak() measures (compiler/lowered/memory_report.h).
int64_t predicted_peak(const rt::Program& p) {
  return predict_memory(p, "train_step", {}, bind_symbols(p, "train_step", {})).peak;
}

// The session's threads and memory limit from the command line.
rt::SessionOptions session_options(const CommonOptions& c) {
  rt::SessionOptions so;
  so.threads = c.threads;
  so.device = c.device;
  so.allow_tf32 = c.tf32;
  so.flush_subnormals = c.subnormals == "flush";
  if (!c.memory_limit.empty()) {
    std::optional<int64_t> limit = parse_bytes(c.memory_limit);
    if (!limit || *limit <= 0)
      throw UsageError(fmt::format("--memory-limit {}: expected a size such as 8GiB, 512MiB or 1.5GB", c.memory_limit));
    so.memory_limit = static_cast<size_t>(*limit);
  }
  return so;
}

// The examples of one optimizer step, all micro-batches together: the train section's (or
// --batch's) batch, which must split evenly (a plan's accumulate is fixed when it compiles).
int64_t step_batch(const rt::TrainSettings& t, const rt::Function& step) {
  if (auto e = rt::check_batch_split(t.batch, std::max<int64_t>(1, step.micro_batches)))
    throw UsageError(fmt::format("--batch {}: {}", t.batch, *e));
  return t.batch;
}

// The examples of one micro-batch, and of one evaluation call: the forward pass runs at the
// size the memory plan assumed for it.
int64_t micro_batch(const rt::TrainSettings& t) { return t.batch / std::max<int64_t>(1, t.accumulate); }

// --memory-limit caps the CPU runtime's allocator; on CUDA the device's memory is the limit,
// which the user is told rather than left to believe (docs/memory.md).
void note_memory_limit(const rt::Session& s, const CommonOptions& c) {
  if (s.on_cuda() && !c.memory_limit.empty() && !c.quiet)
    fmt::print(stderr, "note: --memory-limit {} applies to the CPU runtime; on {} the device's memory is the limit\n",
               c.memory_limit, s.device());
}

void apply_common(rt::TrainSettings& t, const CommonOptions& c) {
  if (c.batch) t.batch = *c.batch;
  if (c.seed) t.seed = *c.seed;
  override_data(t, c.data);
}

rt::Checkpoint load_trained(rt::Session& s, const std::string& path) {
  rt::Checkpoint c = rt::load_checkpoint(path);
  const std::string& model = s.program().model;
  if (c.has("model") && c.text("model") != model)
    throw rt::CheckpointError(fmt::format("{}: a checkpoint of model '{}', not '{}'", path, c.text("model"), model));
  rt::check_against(c, persistent_specs(s, false), /*allow_extra=*/true);
  load_model_tensors(s, c);
  return c;
}

const rt::Feed& predict_feed(const Loaded& l, const std::string& file) {
  const rt::Program& p = *l.program;
  const rt::Function* fn = p.function("predict");
  if (!fn)
    throw std::runtime_error(fmt::format("{}: the plan has no predict function (compile it with modelc --inference, "
                                         "or --output NAME)", file));
  for (const rt::Feed& f : fn->feeds)
    if (!l.named() && f.name != l.features)
      throw std::runtime_error(fmt::format("model '{}': the values to predict read input '{}', which the data does not "
                                           "give (it gives '{}')", p.model, f.name, l.features));
  if (fn->feeds.empty()) throw std::runtime_error(fmt::format("model '{}': the values to predict read no input", p.model));
  return fn->feeds.front();
}

int guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const Reported&) {
    return 1;
  } catch (const UsageError& e) {
    std::cerr << "modelrun: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "modelrun: error: " << e.what() << "\n";
    return 1;
  }
}


}  // namespace modelrun

#include "compiler/lowered/lower.h"

#include <cmath>
#include <fmt/format.h>
#include <map>

#include "compiler/ir/op_registry.h"
#include "compiler/lowered/index_bounds.h"
#include "compiler/lowered/reduce_plan.h"
#include "compiler/passes/library_epilogue.h"

namespace modelc {

namespace {

// Builds the Program's buffers and functions; one instance per Program.
class Lowering {
 public:
  Lowering(Lowered& out, const std::function<std::string(SourceLoc)>& describe)
      : out_(out), p_(*out.program), syms_(out.symbols), describe_(describe) {}

  void lower_function(size_t index) {
    const LowerFunction& fn = out_.functions[index];
    index_ = index;
    g_ = fn.graph;
    plan_ = fn.plan;
    const Graph& g = *g_;
    const FusionPlan& plan = *plan_;
    rt::Function f;
    f.name = fn.name;
    f_ = &f;
    fn_ = fn.name;
    buf_.clear();
    lower_sources();
    std::vector<int> run_of(plan.groups.size(), -1);
    for (size_t r = 0; r < plan.horizontal.size(); ++r)
      for (size_t gi : plan.horizontal[r]) run_of.at(gi) = static_cast<int>(r);
    for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
      if (run_of[gi] < 0) lower_group(gi);
      else if (const size_t r = static_cast<size_t>(run_of[gi]); plan.horizontal[r].front() == gi) lower_horizontal(r);
    }
    for (const Graph::Output& o : g.outputs) {
      uint32_t b = buffer_of(o.value);
      // A graph output that is an input or a param is copied, so outputs never alias
      // what the caller feeds or what the session owns.
      if (p_.buffers[b].role != rt::BufferRole::Temp) {
        rt::Instr copy;
        copy.kind = rt::Instr::Kind::Library;
        copy.op = "copy";
        copy.inputs = {b};
        b = add_buffer(o.name, g.type(o.value), rt::BufferRole::Output, o.value);
        copy.outputs = {b};
        f.instrs.push_back(std::move(copy));
      }
      p_.buffers[b].role = rt::BufferRole::Output;
      p_.buffers[b].name = o.name;
      f.outputs.emplace_back(o.name, b);
    }
    for (const Graph::Update& u : g.updates)
      f.updates.emplace_back(buffer_of(u.value), persistent(g.nodes.at(u.target)));
    p_.functions.push_back(std::move(f));
  }

 private:
  uint32_t buffer_of(const Value& v) const {
    if (!v.valid()) return rt::kNoBuffer;
    auto it = buf_.find({v.node, v.index});
    if (it == buf_.end()) throw InternalError(fmt::format("lower: %{} is read before it is written", v.node));
    return it->second;
  }

  // Inputs (the function's feeds), params and states.
  void lower_sources() {
    const Graph& g = *g_;
    const std::map<NodeId, IndexBound> bounds = input_index_bounds(g, describe_);
    for (NodeId id = 0; id < g.nodes.size(); ++id) {
      const Node& n = g.nodes[id];
      if (n.op == OpKind::Param || n.op == OpKind::State) {
        buf_[{id, 0}] = persistent(n);
      } else if (n.op == OpKind::Input) {
        uint32_t b = add_buffer(n.name, n.outputs[0], rt::BufferRole::Input, Value{id, 0});
        p_.buffers[b].where = where(n);
        if (auto it = bounds.find(id); it != bounds.end() && n.outputs[0].dtype == DType::I32) {
          p_.buffers[b].index_limit = it->second.limit;
          p_.buffers[b].index_note = it->second.note;
          p_.buffers[b].index_ignore = it->second.ignore;
        }
        uint32_t micro = n.attrs.has("micro") ? static_cast<uint32_t>(n.attrs.i("micro")) : 0;
        f_->micro_batches = std::max(f_->micro_batches, micro + 1);
        f_->feeds.push_back({n.name, micro, b});
        buf_[{id, 0}] = b;
      }
    }
  }

  // A group's outputs: new temp buffers, except an in-place update, which writes over the
  // persistent buffer it read (plan_in_place); `base`: where the group's inputs start.
  void place_outputs(const std::vector<Value>& outs, const std::vector<int>& overwrites, size_t base, rt::Instr& in) {
    for (size_t o = 0; o < outs.size(); ++o) {
      const Value& v = outs[o];
      const int over = o < overwrites.size() ? overwrites[o] : -1;
      uint32_t b = over >= 0 ? in.inputs.at(base + static_cast<size_t>(over))
                             : add_buffer(fmt::format("%{}", v.node), g_->type(v), rt::BufferRole::Temp, v);
      buf_[{v.node, v.index}] = b;
      in.outputs.push_back(b);
    }
  }

  // Horizontal codelets (plan_horizontal): one instruction at the first group of each run,
  // reading every group's inputs and writing every group's outputs, in order.
  void lower_horizontal(size_t r) {
    const FusionPlan& plan = *plan_;
    const std::vector<size_t>& run = plan.horizontal[r];
    rt::Instr in;
    in.kind = rt::Instr::Kind::Codelet;
    in.where = where(g_->nodes[plan.groups[run.front()].root]);
    std::vector<size_t> input_base;
    for (size_t gi : run) {
      input_base.push_back(in.inputs.size());
      for (const Value& v : plan.groups[gi].inputs) in.inputs.push_back(buffer_of(v));
    }
    for (size_t k = 0; k < run.size(); ++k)
      place_outputs(plan.groups[run[k]].outputs, plan.groups[run[k]].overwrites, input_base[k], in);
    out_.sites.push_back({index_, f_->instrs.size(), std::nullopt, r, true});
    f_->instrs.push_back(std::move(in));
  }

  // A library call, or a codelet (two for a two-phase reduction).
  void lower_group(size_t gi) {
    const Graph& g = *g_;
    const FusionGroup& grp = plan_->groups[gi];
    const Node& root = g.nodes[grp.root];
    rt::Instr in;
    if (grp.kind == FusionGroup::Kind::Library) {
      // The group's op: its root unless it absorbed an epilogue (then root is later).
      const Node& lib = g.nodes[grp.anchor];
      in.where = where(lib);
      for (const Value& v : lib.inputs) in.inputs.push_back(buffer_of(v));
      if (grp.epilogue_bias.valid()) {
        // After every tensor parameter of the op, absent ones included (conv2d's bias).
        size_t own = 0;
        for (const ParamSpec& p : op_info(lib.op).params) own += p.kind == ParamKind::Tensor || p.kind == ParamKind::OptTensor;
        while (in.inputs.size() < own) in.inputs.push_back(rt::kNoBuffer);
        in.inputs.push_back(buffer_of(grp.epilogue_bias));
      }
      place_outputs(all_outputs(grp.root, root), {}, 0, in);
      in.kind = rt::Instr::Kind::Library;
      in.op = op_info(lib.op).name;
      library_attrs(lib, in);
      // An op that draws random numbers (sdpa's dropout) reads the run's seed and step
      // from its size table, as a codelet does (kernels::LibCall::sizes).
      if (op_info(lib.op).keyed)
        in.sizes = {rt::SizeExpr::symbol(syms_.id("$seed")), rt::SizeExpr::symbol(syms_.id("$step"))};
      library_epilogue(g, grp, in);
      f_->instrs.push_back(std::move(in));
      return;
    }
    in.where = where(root);
    for (const Value& v : grp.inputs) in.inputs.push_back(buffer_of(v));
    place_outputs(grp.outputs, grp.overwrites, 0, in);
    // A two-phase reduction (ReducePlan::chunks > 1) runs its Partial codelet first, from
    // the group's inputs into a scratch buffer, which this (Finish) codelet reads after
    // the group's inputs.
    in.kind = rt::Instr::Kind::Codelet;
    CodeletSite site{index_, 0, std::nullopt, gi, false};
    if (grp.kind == FusionGroup::Kind::Reduce) {
      if (const ReducePlan rp = plan_reduction(g, g.node(grp.anchor)); rp.chunks > 1) {
        rt::Instr part;
        part.where = in.where;
        part.kind = rt::Instr::Kind::Codelet;
        part.inputs = in.inputs;
        const TensorType scratch{rp.scratch_type, {Dim(rp.scratch_elements)}};
        part.outputs = {
            add_buffer(fmt::format("%{}.partials", grp.anchor), scratch, rt::BufferRole::Temp, Value{grp.anchor, 0})};
        in.inputs.push_back(part.outputs[0]);
        site.partial = f_->instrs.size();
        f_->instrs.push_back(std::move(part));
      }
    }
    site.instr = f_->instrs.size();
    out_.sites.push_back(site);
    f_->instrs.push_back(std::move(in));
  }

  // `v`: the value the buffer holds in the current function's graph (none for params
  // and states).
  uint32_t add_buffer(std::string name, const TensorType& t, rt::BufferRole role, Value v = {}) {
    rt::BufferDesc d;
    d.name = std::move(name);
    d.type = t.dtype;
    d.shape = syms_.shape(t.shape);
    d.role = role;
    p_.buffers.push_back(std::move(d));
    out_.buffer_values.emplace_back(v.valid() ? fn_ : std::string(), v);
    return static_cast<uint32_t>(p_.buffers.size() - 1);
  }

  // Params and states are shared by every function, by name.
  uint32_t persistent(const Node& n) {
    auto it = persistent_.find(n.name);
    if (it != persistent_.end()) {
      const rt::BufferDesc& d = p_.buffers[it->second];
      if (d.type != n.outputs[0].dtype || d.shape.size() != n.outputs[0].shape.size())
        throw InternalError(fmt::format("lower: '{}' has different types in the train step and the forward graph", n.name));
      return it->second;
    }
    // A model's buffers are state nodes marked `buffer` (graph.h), initialised as params are.
    const bool param = n.op == OpKind::Param, buffer = is_model_buffer(n);
    uint32_t b = add_buffer(n.name, n.outputs[0],
                            param ? rt::BufferRole::Param : buffer ? rt::BufferRole::Buffer : rt::BufferRole::State);
    if (param || buffer) p_.buffers[b].init = lower_init(n.attrs);
    if (param || buffer) p_.buffers[b].where = where(n);
    persistent_[n.name] = b;
    return b;
  }

  std::string where(const Node& n) const { return describe_ && n.loc.valid() ? describe_(n.loc) : ""; }

  static std::vector<Value> all_outputs(NodeId id, const Node& n) {
    std::vector<Value> v;
    for (uint32_t k = 0; k < n.outputs.size(); ++k) v.push_back({id, k});
    return v;
  }

  // runtime/base/program.h: ints["epilogue"] = {bias, activation} when the group absorbed one
  // (its bias is the input after the op's own).
  static void library_epilogue(const Graph& g, const FusionGroup& grp, rt::Instr& in) {
    if (grp.nodes.size() == 1) return;
    const rt::EpilogueActivation act = grp.epilogue_activation == kNoNode ? rt::EpilogueActivation::None
                                                                           : epilogue_activation(g, grp.epilogue_activation);
    in.ints["epilogue"] = {grp.epilogue_bias.valid() ? 1 : 0, static_cast<int64_t>(act)};
  }

  static void library_attrs(const Node& n, rt::Instr& in) {
    for (const auto& [k, v] : n.attrs.items()) {
      if (auto* i = std::get_if<int64_t>(&v)) in.ints[k] = {*i};
      else if (auto* is = std::get_if<Ints>(&v)) in.ints[k] = *is;
      else if (auto* b = std::get_if<bool>(&v)) in.ints[k] = {*b ? 1 : 0};
      else if (auto* d = std::get_if<double>(&v)) in.floats[k] = *d;
      // Shapes (reshape, broadcast_to, the *_grad ops' input shapes) are the output
      // buffer's shape, which the runtime knows; strings and dtypes are kernels' business.
    }
  }

  Lowered& out_;
  rt::Program& p_;
  SymbolTable& syms_;
  const std::function<std::string(SourceLoc)>& describe_;
  std::map<std::string, uint32_t> persistent_;
  // The function being lowered: its name, index, graph, plan, Function, and the buffer of
  // each node output.
  std::string fn_;
  size_t index_ = 0;
  const Graph* g_ = nullptr;
  const FusionPlan* plan_ = nullptr;
  rt::Function* f_ = nullptr;
  std::map<std::pair<NodeId, uint32_t>, uint32_t> buf_;
};

}  // namespace

rt::Init lower_init(const Attrs& a) {
  rt::Init init;
  const std::string kind = a.has("init") ? a.s("init") : "zeros";
  auto fan = [&](const char* which) { return static_cast<double>(a.i(which)); };
  if (kind == "zeros") {
    init.kind = rt::Init::Kind::Zeros;
  } else if (kind == "ones") {
    init.kind = rt::Init::Kind::Ones;
  } else if (kind == "constant") {
    init = {rt::Init::Kind::Constant, a.f("value"), 0.0};
  } else if (kind == "normal") {
    init = {rt::Init::Kind::Normal, a.f("mean"), a.f("std")};
  } else if (kind == "uniform") {
    init = {rt::Init::Kind::Uniform, a.f("low"), a.f("high")};
  } else if (kind == "kaiming_normal" || kind == "kaiming_uniform") {
    // torch.nn.init.kaiming_*: std = gain / sqrt(fan); uniform bound = sqrt(3) * std.
    double std = a.f("gain") / std::sqrt(fan(a.s("mode") == "fan_out" ? "fan_out" : "fan_in"));
    if (kind == "kaiming_normal") init = {rt::Init::Kind::Normal, 0.0, std};
    else init = {rt::Init::Kind::Uniform, -std::sqrt(3.0) * std, std::sqrt(3.0) * std};
  } else if (kind == "xavier_normal" || kind == "xavier_uniform") {
    // torch.nn.init.xavier_*: std = gain * sqrt(2 / (fan_in + fan_out)).
    double std = a.f("gain") * std::sqrt(2.0 / (fan("fan_in") + fan("fan_out")));
    if (kind == "xavier_normal") init = {rt::Init::Kind::Normal, 0.0, std};
    else init = {rt::Init::Kind::Uniform, -std::sqrt(3.0) * std, std::sqrt(3.0) * std};
  } else {
    throw InternalError(fmt::format("lower: unknown initializer '{}'", kind));
  }
  return init;
}

// A watch on a held-out metric (plateau, early_stopping) from its checked arguments:
// `delta` is the argument that holds its threshold; mode auto maximises accuracy only.
static rt::MetricWatch lower_watch(const Attrs& a, const char* delta) {
  rt::MetricWatch w;
  w.metric = a.s("metric");
  const std::string mode = a.s("mode");
  w.maximize = mode == "max" || (mode == "auto" && w.metric == "accuracy");
  w.patience = a.i("patience");
  w.threshold = a.f(delta);
  w.relative = a.has("threshold_mode") && a.s("threshold_mode") == "rel";
  return w;
}

rt::TrainSettings lower_train_settings(const TrainConfig& t) {
  rt::TrainSettings s;
  if (t.data) {
    rt::DataSpec d;
    d.kind = t.data->kind;
    for (const auto& [k, v] : t.data->args.items()) {
      if (auto* str = std::get_if<std::string>(&v)) d.strs[k] = *str;
      else if (auto* i = std::get_if<int64_t>(&v)) d.ints[k] = *i;
      else if (auto* b = std::get_if<bool>(&v)) d.ints[k] = *b ? 1 : 0;
      else if (auto* f = std::get_if<double>(&v)) d.floats[k] = *f;
    }
    s.data = std::move(d);
  }
  s.optimizer = t.optimizer ? t.optimizer->kind : "sgd";
  if (t.optimizer && t.optimizer->args.has("lr")) s.schedule.lr = t.optimizer->args.f("lr");
  if (t.schedule) {
    const Attrs& a = t.schedule->args;
    s.schedule.kind = t.schedule->kind;
    if (a.has("warmup")) s.schedule.warmup = a.i("warmup");
    if (a.has("every")) s.schedule.every = a.i("every");
    if (a.has("gamma")) s.schedule.gamma = a.f("gamma");
    if (a.has("min_lr")) s.schedule.min_lr = a.f("min_lr");
    if (a.has("end_factor")) s.schedule.end_factor = a.f("end_factor");
    if (a.has("power")) s.schedule.power = a.f("power");
    if (a.has("pct_start")) s.schedule.pct_start = a.f("pct_start");
    if (a.has("div_factor")) s.schedule.div_factor = a.f("div_factor");
    if (a.has("final_div_factor")) s.schedule.final_div_factor = a.f("final_div_factor");
    if (a.has("factor")) s.schedule.factor = a.f("factor");
    if (a.has("cooldown")) s.schedule.cooldown = a.i("cooldown");
    if (s.schedule.kind == "plateau") s.schedule.watch = lower_watch(a, "threshold");
    // onecycle's peak is max_lr, or the optimizer's lr when it is 0 (not given).
    if (a.has("max_lr") && a.f("max_lr") > 0) s.schedule.lr = a.f("max_lr");
  }
  if (t.batch) s.batch = *t.batch;
  if (t.epochs) s.epochs = *t.epochs;
  if (t.steps) s.steps = *t.steps;
  if (t.seed) s.seed = *t.seed;
  if (t.accumulate) s.accumulate = *t.accumulate;
  if (t.eval_every) s.eval_every = *t.eval_every;
  if (t.validation) s.validation = *t.validation;
  if (t.clip_grad_norm) s.clip_grad_norm = *t.clip_grad_norm;
  if (t.early_stopping) s.early_stopping = lower_watch(t.early_stopping->args, "min_delta");
  return s;
}

Lowered lower(const std::string& model, const std::vector<DimDecl>& dims, std::vector<LowerFunction> functions,
              const TrainConfig* train, const std::function<std::string(SourceLoc)>& describe) {
  Lowered out;
  out.program = std::make_shared<rt::Program>();
  out.program->model = model;
  for (const DimDecl& d : dims)
    if (!d.value) out.symbols.id(d.name);
  out.symbols.id("$seed");
  out.symbols.id("$step");
  out.functions = std::move(functions);
  Lowering l(out, describe);
  for (size_t k = 0; k < out.functions.size(); ++k) l.lower_function(k);
  out.program->symbols = out.symbols.names();
  if (train) out.program->train = lower_train_settings(*train);
  return out;
}

}  // namespace modelc

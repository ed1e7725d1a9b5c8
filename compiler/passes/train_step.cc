// The train step (train_step.h): the forward graph copied once per micro-batch, the mean
// of the micro-batch losses, its gradients (autodiff), the global gradient norm, clipping,
// and the optimizer's update of every param and its state, all in one graph.
#include "compiler/passes/train_step.h"

#include <fmt/format.h>

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "compiler/ir/op_registry.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/autocast.h"
#include "compiler/passes/autodiff.h"
#include "compiler/passes/mode.h"
#include "compiler/passes/optimizer_args.h"

namespace modelc {

namespace {

class StepBuilder {
 public:
  StepBuilder(const Graph& fwd, const TrainStepOptions& o) : f_(fwd), o_(o) {}

  Graph build() {
    for (NodeId id : f_.states)
      if (!is_model_buffer(f_.node(id)))
        throw InternalError(fmt::format("internal error: build_train_step on '{}', which is a train step already", f_.name));
    if (o_.accumulate < 1) throw UserError(fmt::format("accumulate must be at least 1, got {}", o_.accumulate));
    if (!(o_.clip_grad_norm >= 0))
      throw UserError(fmt::format("clip_grad_norm must be > 0 (or 0 for no clipping), got {}", o_.clip_grad_norm));
    args_ = read_optimizer(o_.optimizer, o_.optimizer_args);
    scaling_ = precision_dtype(o_.precision) == DType::F16;
    if (scaling_ && !(o_.loss_scale > 0 && std::isfinite(o_.loss_scale)))
      throw UserError(fmt::format("the initial loss scale must be a finite number > 0, got {}", o_.loss_scale));
    if (scaling_ && o_.growth_interval < 1)
      throw UserError(fmt::format("the loss scale's growth interval must be at least 1, got {}", o_.growth_interval));
    const Graph::Output* loss = nullptr;
    for (const Graph::Output& out : f_.outputs)
      if (out.name == "loss") loss = &out;
    if (!loss) throw UserError(fmt::format("model '{}' has no output named 'loss' to train on", f_.name));
    const TensorType& lt = f_.type(loss->value);
    if (!is_float(lt.dtype) || lt.rank() != 0)
      throw UserError(fmt::format("model '{}': the output 'loss' must be a floating-point scalar to train on, got {}",
                                  f_.name, lt.str()));
    if (f_.params.empty()) throw UserError(fmt::format("model '{}' has no params to train", f_.name));

    g_.name = f_.name;
    g_.dims = f_.dims;
    add_inputs();
    Value l = copy_forward(*loss);
    freeze();
    if (scaling_) scaler_states();
    Value norm;
    std::vector<Value> grads = gradients(l, norm);
    g_.outputs.push_back({"loss", l, loss->loc});
    g_.outputs.push_back({"grad_norm", norm, {}});
    if (scaling_) scaler_updates(norm);
    update_groups(grads);

    auto problems = verify_graph(g_);
    if (!problems.empty())
      throw InternalError(fmt::format("internal error: the train step of '{}' is malformed: {}", f_.name, problems.front()));
    return std::move(g_);
  }

 private:
  const Graph& f_;
  const TrainStepOptions& o_;
  OptimizerArgs args_;
  Graph g_;
  std::vector<std::vector<NodeId>> inputs_;  // [micro][i]: the copy of f_.inputs[i]
  std::vector<NodeId> param_of_;             // forward node id -> its param in g_
  std::vector<NodeId> params_;               // g_'s params, in f_.params order
  Value lr_, t_;
  // Where new nodes go: the param being updated (its location and scope), if any.
  SourceLoc loc_;
  std::string scope_;
  // Adam's scalars, shared by every param (f32): 1 - lr * weight_decay (adamw),
  // lr / (1 - beta1^t) and sqrt(1 - beta2^t).
  Value decay_, step_size_, bias2_sqrt_;
  // fp16's dynamic loss scaling (train_step.h): the scale and its inverse (f32 scalars),
  // and `clean` (bool: every gradient finite), which selects each update.
  // Adam's step count leaves skipped steps out (as PyTorch's, whose optimizer.step() is not
  // called on them): `loss_scaler.skipped_steps` counts them, and t = $t - skipped.
  bool scaling_ = false;
  Value log2_scale_, good_steps_, skipped_steps_, scale_, inv_scale_, clean_;

  Value emit(OpKind op, std::vector<Value> inputs, Attrs attrs = {}) {
    InferFailure f;
    auto id = add_op(g_, op, std::move(inputs), std::move(attrs), loc_, &f);
    if (!id) throw InternalError(fmt::format("internal error: the train step builds a bad {}: {}", op_name(op), f.message));
    g_.nodes[*id].scope = scope_;
    return Value{*id, 0};
  }
  Value constant(double v, DType t) {
    Node n;
    n.op = OpKind::Constant;
    n.attrs.set("value", v);
    n.outputs = {TensorType{t, {}}};
    n.loc = loc_;
    n.scope = scope_;
    return Value{g_.add(std::move(n)), 0};
  }
  DType dtype(Value v) const { return g_.type(v).dtype; }
  // `v` converted to dtype `t` (a no-op when it has it).
  Value as(Value v, DType t) {
    if (dtype(v) == t) return v;
    Attrs a;
    a.set("dtype", t);
    return emit(OpKind::Cast, {v}, std::move(a));
  }
  // Binary helpers. Where both operands emit nodes, callers build them in a braced list
  // (emit(op, {...})), which C++ evaluates left to right, so that the node order (and the
  // printed graph) does not depend on the compiler's order of evaluating arguments.
  Value add(Value a, Value b) { return emit(OpKind::Add, {a, b}); }
  Value sub(Value a, Value b) { return emit(OpKind::Sub, {a, b}); }
  Value mul(Value a, Value b) { return emit(OpKind::Mul, {a, b}); }
  Value div(Value a, Value b) { return emit(OpKind::Div, {a, b}); }
  Value scale(Value a, double c) { return mul(a, constant(c, dtype(a))); }

  Node source(OpKind op, std::string name, TensorType t) {
    Node n;
    n.op = op;
    n.name = std::move(name);
    n.outputs = {std::move(t)};
    return n;
  }

  // Each model input once per micro-batch, then the scalars the runtime feeds.
  void add_inputs() {
    inputs_.resize(static_cast<size_t>(o_.accumulate));
    for (int64_t k = 0; k < o_.accumulate; ++k) {
      for (NodeId id : f_.inputs) {
        Node n = f_.node(id);
        if (o_.accumulate > 1) n.attrs.set("micro", k);
        NodeId c = g_.add(std::move(n));
        g_.inputs.push_back(c);
        inputs_[static_cast<size_t>(k)].push_back(c);
      }
    }
    lr_ = Value{g_.add(source(OpKind::Input, "$lr", TensorType{DType::F32, {}})), 0};
    t_ = Value{g_.add(source(OpKind::Input, "$t", TensorType{DType::F32, {}})), 0};
    g_.inputs.push_back(lr_.node);
    g_.inputs.push_back(t_.node);
  }

  // The nodes of f_ that `loss` and the buffers' updates depend on.
  std::vector<bool> live(Value loss) const {
    std::vector<bool> l(f_.nodes.size(), false);
    l[loss.node] = true;
    for (const Graph::Update& u : f_.updates) l[u.value.node] = true;
    for (NodeId id = static_cast<NodeId>(f_.nodes.size()); id-- > 0;) {
      if (!l[id]) continue;
      for (const Value& v : f_.nodes[id].inputs)
        if (v.valid()) l[v.node] = true;
    }
    return l;
  }

  // Copies the loss's part of f_ and its buffers' updates once per micro-batch (params and
  // buffers shared, created with the first copy; node names, scopes and locations kept) and
  // returns the mean loss. Micro-batch k reads the buffers as micro-batch k - 1 left them,
  // as separate forward passes would; the step's update of a buffer is the last one's,
  // applied on every step (a skipped fp16 step, too: its forward pass ran, as in PyTorch).
  Value copy_forward(const Graph::Output& loss) {
    std::vector<bool> needed = live(loss.value);
    std::vector<NodeId> input_index(f_.nodes.size(), kNoNode);
    for (size_t i = 0; i < f_.inputs.size(); ++i) input_index[f_.inputs[i]] = static_cast<NodeId>(i);
    param_of_.assign(f_.nodes.size(), kNoNode);
    std::vector<Value> losses;
    std::map<NodeId, Value> buffer_now;  // f_'s buffer -> its value in g_ for this micro-batch
    for (int64_t k = 0; k < o_.accumulate; ++k) {
      std::vector<NodeId> map(f_.nodes.size(), kNoNode);
      auto remap = [&](Value v) {
        if (!v.valid()) return v;
        if (auto it = buffer_now.find(v.node); it != buffer_now.end()) return it->second;
        v.node = map[v.node];
        return v;
      };
      for (NodeId id = 0; id < f_.nodes.size(); ++id) {
        const Node& n = f_.nodes[id];
        if (n.op == OpKind::Input) {
          map[id] = inputs_[static_cast<size_t>(k)].at(input_index[id]);
        } else if (n.op == OpKind::Param || n.op == OpKind::State) {
          if (k == 0) param_of_[id] = g_.add(n);
          map[id] = param_of_[id];
          if (k == 0 && n.op == OpKind::State) {
            g_.states.push_back(param_of_[id]);
            buffer_now[id] = Value{param_of_[id], 0};
          }
        } else if (needed[id]) {
          Node c = n;
          for (Value& v : c.inputs) v = remap(v);
          // Each micro-batch draws its own dropout masks, as separate forward passes would
          // (micro-batch 0 keeps the site's key).
          if (k > 0 && c.attrs.has("key")) {
            const uint64_t mixed = static_cast<uint64_t>(c.attrs.i("key")) ^ (static_cast<uint64_t>(k) * 0x9E3779B97F4A7C15ull);
            c.attrs.set("key", static_cast<int64_t>(mixed >> 1));
          }
          map[id] = g_.add(std::move(c));
        }
      }
      losses.push_back(Value{map[loss.value.node], loss.value.index});
      std::map<NodeId, Value> next = buffer_now;
      for (const Graph::Update& u : f_.updates) next[u.target] = remap(u.value);
      buffer_now = std::move(next);
    }
    for (const Graph::Update& u : f_.updates) g_.updates.push_back({param_of_.at(u.target), buffer_now.at(u.target)});
    for (NodeId p : f_.params) {
      params_.push_back(param_of_.at(p));
      g_.params.push_back(param_of_.at(p));
    }
    loc_ = loss.loc;
    Value total = losses[0];
    for (size_t k = 1; k < losses.size(); ++k) total = add(total, losses[k]);
    if (losses.size() > 1) total = div(total, constant(static_cast<double>(losses.size()), dtype(total)));
    loc_ = {};
    return total;
  }

  // d loss / d param for every param, clipped by their global norm when asked;
  // `norm` gets that norm (before clipping), in f32.
  std::vector<Value> gradients(Value loss, Value& norm) {
    std::vector<Value> wrt;
    for (NodeId p : params_) wrt.push_back(Value{p, 0});
    // fp16: the gradients of loss * scale, unscaled (times 1 / scale, exact).
    std::vector<Value> grads = append_gradients(g_, scaling_ ? mul(loss, as(scale_, dtype(loss))) : loss, wrt);
    MODELC_CHECK(grads.size() == wrt.size(), "autodiff returned the wrong number of gradients");
    if (scaling_)
      for (Value& gr : grads) gr = mul(gr, as(inv_scale_, dtype(gr)));
    // The memory report tells gradients from other temporaries by this name (only source
    // nodes' names mean anything else, compiler/ir/graph.h).
    for (size_t i = 0; i < grads.size(); ++i) {
      Node& gn = g_.nodes[grads[i].node];
      if (gn.name.empty() && !gn.inputs.empty()) gn.name = "grad " + g_.node(params_[i]).name;
    }
    Value total;
    for (Value gr : grads) {
      Value s = as(emit(OpKind::Sum, {mul(gr, gr)}), DType::F32);
      total = total.valid() ? add(total, s) : s;
    }
    norm = emit(OpKind::Sqrt, {total});
    if (o_.clip_grad_norm > 0) {
      // torch.nn.utils.clip_grad_norm_: every gradient times min(1, max_norm / (norm + 1e-6)).
      Value coef = emit(OpKind::Div, {constant(o_.clip_grad_norm, DType::F32), add(norm, constant(1e-6, DType::F32))});
      coef = emit(OpKind::Minimum, {coef, constant(1.0, DType::F32)});
      for (Value& gr : grads) gr = mul(gr, as(coef, dtype(gr)));
    }
    return grads;
  }

  Value state(NodeId param, const char* suffix) {
    const Node& p = g_.node(param);
    Node n = source(OpKind::State, p.name + "." + suffix, p.outputs[0]);
    n.loc = p.loc;
    n.scope = p.scope;
    NodeId id = g_.add(std::move(n));
    g_.states.push_back(id);
    return Value{id, 0};
  }
  // The update of a param or optimizer state; with loss scaling, only on a clean step.
  void set(Value target, Value v) {
    if (clean_.valid()) v = emit(OpKind::Where, {clean_, v, target});
    g_.updates.push_back({target.node, v});
  }

  Value scalar_state(const std::string& name) {
    NodeId id = g_.add(source(OpKind::State, name, TensorType{DType::F32, {}}));
    g_.states.push_back(id);
    return Value{id, 0};
  }

  // The scale of this step: loss_scale * 2^s.
  void scaler_states() {
    const DType f = DType::F32;
    log2_scale_ = scalar_state("loss_scaler.log2_scale");
    good_steps_ = scalar_state("loss_scaler.good_steps");
    if (args_.counts_steps()) {
      skipped_steps_ = scalar_state("loss_scaler.skipped_steps");
      t_ = sub(t_, skipped_steps_);
    }
    scale_ = mul(constant(o_.loss_scale, f), emit(OpKind::Pow, {constant(2.0, f), log2_scale_}));
    inv_scale_ = div(constant(1.0, f), scale_);
  }

  // Clean when the norm of the unscaled gradients is finite (NaN and inf fail <=); the
  // scale halves on a skipped step and doubles after growth_interval clean ones.
  void scaler_updates(Value norm) {
    const DType f = DType::F32;
    clean_ = emit(OpKind::Le, {norm, constant(std::numeric_limits<float>::max(), f)});
    Value one = constant(1.0, f), zero = constant(0.0, f);
    Value counted = add(good_steps_, one);
    Value grow = emit(OpKind::Ge, {counted, constant(static_cast<double>(o_.growth_interval), f)});
    Value s = emit(OpKind::Where, {clean_, emit(OpKind::Where, {grow, add(log2_scale_, one), log2_scale_}), sub(log2_scale_, one)});
    Value n = emit(OpKind::Where, {clean_, emit(OpKind::Where, {grow, zero, counted}), zero});
    g_.updates.push_back({log2_scale_.node, s});
    g_.updates.push_back({good_steps_.node, n});
    if (skipped_steps_.valid())
      g_.updates.push_back({skipped_steps_.node, emit(OpKind::Where, {clean_, skipped_steps_, add(skipped_steps_, one)})});
    g_.outputs.push_back({"loss_scale", scale_, {}});
    g_.outputs.push_back({"skipped", emit(OpKind::Where, {clean_, zero, one}), {}});
  }

  static bool matches(const std::string& pattern, const std::string& name) {
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
  }

  // params_ less the frozen ones (they stay params of g_, with neither gradient nor state).
  void freeze() {
    if (o_.freeze.empty()) return;
    std::vector<bool> used(o_.freeze.size(), false);
    std::vector<NodeId> trained;
    for (NodeId p : params_) {
      bool frozen = false;
      for (size_t k = 0; k < o_.freeze.size(); ++k)
        if (matches(o_.freeze[k].pattern, g_.node(p).name)) frozen = used[k] = true;
      if (!frozen) trained.push_back(p);
    }
    for (size_t k = 0; k < o_.freeze.size(); ++k)
      if (!used[k])
        throw SourceError(o_.freeze[k].loc,
                          fmt::format("freeze: '{}' matches no parameter of '{}'", o_.freeze[k].pattern, f_.name));
    if (trained.empty())
      throw SourceError(o_.freeze.front().loc, fmt::format("freeze: every parameter of '{}' is frozen; nothing to train",
                                                           f_.name));
    params_ = std::move(trained);
  }

  // The optimizer's updates, group by group (the parameters no group matches first): each
  // with its weight decay and learning rate, and the scalars derived from them.
  void update_groups(const std::vector<Value>& grads) {
    std::vector<int> group(params_.size(), -1);
    for (size_t i = 0; i < params_.size(); ++i)
      for (size_t k = 0; k < o_.groups.size() && group[i] < 0; ++k)
        if (matches(o_.groups[k].pattern, g_.node(params_[i]).name)) group[i] = static_cast<int>(k);
    for (size_t k = 0; k < o_.groups.size(); ++k)
      if (std::find(group.begin(), group.end(), static_cast<int>(k)) == group.end())
        throw SourceError(o_.groups[k].loc, fmt::format("param_group '{}' matches no trained parameter of '{}' (an "
                                                        "earlier group or freeze may take them)",
                                                        o_.groups[k].pattern, f_.name));
    const OptimizerArgs base = args_;
    const Value base_lr = lr_;
    for (int k = -1; k < static_cast<int>(o_.groups.size()); ++k) {
      if (std::find(group.begin(), group.end(), k) == group.end()) continue;
      args_ = base;
      lr_ = base_lr;
      if (k >= 0) {
        const ParamGroup& pg = o_.groups[static_cast<size_t>(k)];
        if (pg.weight_decay) args_.weight_decay = *pg.weight_decay;
        if (pg.lr_scale && *pg.lr_scale != 1) lr_ = scale(base_lr, *pg.lr_scale);
      }
      decay_ = step_size_ = bias2_sqrt_ = Value{};
      shared_scalars();
      for (size_t i = 0; i < params_.size(); ++i)
        if (group[i] == k) update(params_[i], grads[i]);
    }
    args_ = base;
    lr_ = base_lr;
  }

  void shared_scalars() {
    const DType f = DType::F32;
    const std::string& k = args_.kind;
    if ((k == "adamw" || k == "lion" || k == "adafactor") && args_.weight_decay != 0)
      decay_ = emit(OpKind::Sub, {constant(1.0, f), scale(lr_, args_.weight_decay)});
    // Adagrad: clr = lr / (1 + (t - 1) * lr_decay).
    if (k == "adagrad")
      step_size_ = args_.lr_decay == 0 ? lr_ : div(lr_, add(constant(1.0, f), scale(sub(t_, constant(1.0, f)), args_.lr_decay)));
    if (k != "adam" && k != "adamw") return;
    Value bias1 = emit(OpKind::Sub, {constant(1.0, f), emit(OpKind::Pow, {constant(args_.beta1, f), t_})});
    Value bias2 = emit(OpKind::Sub, {constant(1.0, f), emit(OpKind::Pow, {constant(args_.beta2, f), t_})});
    step_size_ = div(lr_, bias1);
    bias2_sqrt_ = emit(OpKind::Sqrt, {bias2});
  }

  // The optimizer's update of one param, as torch.optim's single-tensor implementations.
  void update(NodeId param, Value grad) {
    loc_ = g_.node(param).loc;
    scope_ = g_.node(param).scope;
    const std::string& k = args_.kind;
    if (k == "sgd") sgd(param, grad);
    else if (k == "rmsprop") rmsprop(param, grad);
    else if (k == "adagrad") adagrad(param, grad);
    else if (k == "lion") lion(param, grad);
    else if (k == "adafactor") adafactor(param, grad);
    else adam(param, grad);
    loc_ = {};
    scope_.clear();
  }

  // L2 weight decay: the gradient plus weight_decay * param.
  Value l2(Value p, Value grad) { return args_.weight_decay != 0 ? add(grad, scale(p, args_.weight_decay)) : grad; }

  void sgd(NodeId param, Value grad) {
    Value p{param, 0};
    Value d = l2(p, grad);
    if (args_.momentum != 0) {
      // buf = momentum * buf + d (dampening 0; the zero-initialised buffer makes the
      // first step buf = d, as PyTorch's clone).
      Value buf = state(param, "momentum_buffer");
      Value nb = add(scale(buf, args_.momentum), d);
      set(buf, nb);
      d = args_.nesterov ? add(d, scale(nb, args_.momentum)) : nb;
    }
    set(p, sub(p, mul(as(lr_, dtype(p)), d)));
  }

  void adam(NodeId param, Value grad) {
    Value p{param, 0};
    DType t = dtype(p);
    Value m = state(param, "exp_avg"), v = state(param, "exp_avg_sq");
    Value p0 = p;
    if (args_.weight_decay != 0) {
      if (args_.kind == "adamw") p = mul(p, as(decay_, t));  // decoupled: param *= 1 - lr * wd
      else grad = l2(p, grad);                               // L2: into the gradient
    }
    Value nm = emit(OpKind::Add, {scale(m, args_.beta1), scale(grad, 1 - args_.beta1)});
    Value nv = emit(OpKind::Add, {scale(v, args_.beta2), scale(mul(grad, grad), 1 - args_.beta2)});
    set(m, nm);
    set(v, nv);
    // denom = sqrt(v) / sqrt(1 - beta2^t) + eps; param -= step_size * m / denom.
    Value denom = div(emit(OpKind::Sqrt, {nv}), as(bias2_sqrt_, t));
    denom = add(denom, constant(args_.eps, t));
    set(p0, sub(p, mul(as(step_size_, t), div(nm, denom))));
  }

  // square_avg = alpha sq + (1 - alpha) g^2; centered: grad_avg = alpha ga + (1 - alpha) g
  // and avg = sqrt(square_avg - grad_avg^2), else sqrt(square_avg); then avg + eps divides
  // the step, through a momentum buffer when momentum > 0.
  void rmsprop(NodeId param, Value grad) {
    Value p{param, 0};
    DType t = dtype(p);
    grad = l2(p, grad);
    const double a = args_.alpha;
    Value sq = state(param, "square_avg");
    Value nsq = emit(OpKind::Add, {scale(sq, a), scale(mul(grad, grad), 1 - a)});
    set(sq, nsq);
    Value var = nsq;
    if (args_.centered) {
      Value ga = state(param, "grad_avg");
      Value nga = emit(OpKind::Add, {scale(ga, a), scale(grad, 1 - a)});
      set(ga, nga);
      var = sub(nsq, mul(nga, nga));
    }
    Value avg = add(emit(OpKind::Sqrt, {var}), constant(args_.eps, t));
    Value step = div(grad, avg);
    if (args_.momentum > 0) {
      Value buf = state(param, "momentum_buffer");
      step = add(scale(buf, args_.momentum), step);
      set(buf, step);
    }
    set(p, sub(p, mul(as(lr_, t), step)));
  }

  // sum += g^2; param -= clr * g / (sqrt(sum) + eps). The state `<param>.sum` holds the
  // sum less initial_accumulator_value, so that it starts at zero as all state does.
  void adagrad(NodeId param, Value grad) {
    Value p{param, 0};
    DType t = dtype(p);
    grad = l2(p, grad);
    Value sum = state(param, "sum");
    Value ns = add(sum, mul(grad, grad));
    set(sum, ns);
    Value total = args_.initial_accumulator_value != 0 ? add(ns, constant(args_.initial_accumulator_value, t)) : ns;
    Value std = add(emit(OpKind::Sqrt, {total}), constant(args_.eps, t));
    set(p, sub(p, mul(as(step_size_, t), div(grad, std))));
  }

  // sum(x^2 over `axes`, kept), through its square root as torch's vector_norm squares it.
  Value sum_squares(Value x, Ints axes) {
    Attrs a;
    a.set("axes", std::move(axes));
    a.set("keepdims", true);
    Value s = emit(OpKind::Sqrt, {emit(OpKind::Sum, {mul(x, x)}, std::move(a))});
    return mul(s, s);
  }
  // ||x|| / sqrt(numel): the root mean square, as torch writes it.
  Value rms(Value x) {
    double n = 1;
    for (const Dim& d : g_.type(x).shape) n *= static_cast<double>(d.const_value());
    return div(emit(OpKind::Sqrt, {emit(OpKind::Sum, {mul(x, x)})}), constant(std::sqrt(n), dtype(x)));
  }
  // torch.lerp(a, b, w) for a scalar weight, in its two forms (exact at w = 1).
  Value lerp(Value a, Value b, Value w) {
    Value diff = sub(b, a);
    Value near_a = add(a, mul(w, diff)), near_b = sub(b, mul(diff, sub(constant(1.0, dtype(w)), w)));
    Value small = emit(OpKind::Lt, {emit(OpKind::Abs, {w}), constant(0.5, dtype(w))});
    return emit(OpKind::Where, {small, near_a, near_b});
  }
  Value state_of_shape(NodeId param, const char* suffix, Shape shape) {
    Value v = state(param, suffix);
    g_.nodes[v.node].outputs[0].shape = std::move(shape);
    return v;
  }

  // Adafactor (torch.optim.Adafactor; Shazeer and Stern 2018). A param of rank 2 or more
  // keeps the means of g^2 over its last dim (row_var [..., R, 1]) and over the one before
  // (col_var [..., 1, C]), R + C numbers per matrix instead of R C; a vector keeps `variance`.
  //   beta = t^beta2_decay, rho = min(lr, 1 / sqrt(t)), alpha = max(eps2, rms(param)) rho
  //   param *= 1 - lr wd;  row_var = lerp(row_var, mean(g^2, -1), beta), col_var likewise
  //   v = row_var col_var / max(mean(row_var, -2), eps1)   (vector: lerp(variance, g^2, beta))
  //   u = g / sqrt(max(v, eps1^2));  param -= alpha / max(1, rms(u) / d) u
  // eps1 0 is the machine epsilon of the param's dtype, as torch's None.
  void adafactor(NodeId param, Value grad) {
    Value p{param, 0};
    const DType t = dtype(p), f = DType::F32;
    const double eps1 = args_.eps1 > 0 ? args_.eps1
                        : t == DType::F16 ? 0x1p-10 : t == DType::BF16 ? 0x1p-7 : 0x1p-23;
    Value beta = as(emit(OpKind::Pow, {t_, constant(args_.beta2_decay, f)}), t);
    Value rho = emit(OpKind::Minimum, {lr_, emit(OpKind::Rsqrt, {t_})});
    Value alpha = mul(emit(OpKind::Maximum, {as(rms(p), f), constant(args_.eps2, f)}), rho);
    Value decayed = args_.weight_decay != 0 ? mul(p, as(decay_, t)) : p;
    Shape shape = g_.type(p).shape;
    Value v;
    if (shape.size() >= 2) {
      const int64_t rows = shape[shape.size() - 2].const_value(), cols = shape.back().const_value();
      Shape row_shape = shape, col_shape = shape;
      row_shape.back() = 1, col_shape[shape.size() - 2] = 1;
      Value row = state_of_shape(param, "row_var", row_shape), col = state_of_shape(param, "col_var", col_shape);
      Value nrow = lerp(row, div(sum_squares(grad, {-1}), constant(static_cast<double>(cols), t)), beta);
      Value ncol = lerp(col, div(sum_squares(grad, {-2}), constant(static_cast<double>(rows), t)), beta);
      set(row, nrow);
      set(col, ncol);
      Attrs a;
      a.set("axes", Ints{-2});
      a.set("keepdims", true);
      Value row_mean = emit(OpKind::Mean, {nrow}, std::move(a));
      v = div(mul(nrow, ncol), emit(OpKind::Maximum, {row_mean, constant(eps1, t)}));
    } else {
      Value var = state(param, "variance");
      v = lerp(var, mul(grad, grad), beta);
      set(var, v);
    }
    Value u = mul(emit(OpKind::Rsqrt, {emit(OpKind::Maximum, {v, constant(eps1 * eps1, t)})}), grad);
    Value denom = emit(OpKind::Maximum, {div(as(rms(u), f), constant(args_.d, f)), constant(1.0, f)});
    set(p, sub(decayed, mul(u, as(div(alpha, denom), t))));
  }

  // Lion (Chen et al. 2023): param *= 1 - lr * wd; param -= lr * sign(beta1 m + (1 - beta1) g);
  // m = beta2 m + (1 - beta2) g.
  void lion(NodeId param, Value grad) {
    Value p{param, 0};
    DType t = dtype(p);
    Value m = state(param, "exp_avg");
    Value c = emit(OpKind::Add, {scale(m, args_.beta1), scale(grad, 1 - args_.beta1)});
    Value decayed = args_.weight_decay != 0 ? mul(p, as(decay_, t)) : p;
    set(p, sub(decayed, mul(as(lr_, t), emit(OpKind::Sign, {c}))));
    set(m, emit(OpKind::Add, {scale(m, args_.beta2), scale(grad, 1 - args_.beta2)}));
  }
};

}  // namespace

TrainStepOptions train_step_options(const TrainConfig& cfg) {
  TrainStepOptions o;
  if (cfg.optimizer) {
    o.optimizer = cfg.optimizer->kind;
    o.optimizer_args = cfg.optimizer->args;
  } else {
    // The train section names no optimizer: plain SGD (the runtime's default lr).
    o.optimizer_args.set("lr", 1e-3);
    o.optimizer_args.set("momentum", 0.0);
    o.optimizer_args.set("nesterov", false);
    o.optimizer_args.set("weight_decay", 0.0);
  }
  o.clip_grad_norm = cfg.clip_grad_norm.value_or(0.0);
  o.accumulate = cfg.accumulate.value_or(1);
  o.precision = cfg.precision.value_or("fp32");
  o.freeze = cfg.freeze;
  o.groups = cfg.param_groups;
  return o;
}

Graph build_train_step(const Graph& forward, const TrainStepOptions& options) {
  const DType low = precision_dtype(options.precision);
  const Graph train = specialize_mode(forward, Mode::Train);
  if (low == DType::F32) return StepBuilder(train, options).build();
  const Graph cast = autocast(train, low);
  return StepBuilder(cast, options).build();
}

}  // namespace modelc

// Train mode and eval mode in the language: `update NAME = value` (a buffer's value after a
// train step) and `if training { ... } else { ... }` (both branches elaborated; a name bound
// to different values in them becomes a train_or_eval node, passes/mode.h).
#include <fmt/format.h>

#include "compiler/frontend/sema_impl.h"

namespace modelc {

void Sema::exec_update(const ast::Stmt& s) {
  const std::string& name = s.names[0];
  SVal v = eval(*s.value);
  Frame& f = frames_.back();
  auto it = f.buffers.find(name);
  if (it == f.buffers.end()) {
    const Binding* b = lookup(name);
    diags_.error(s.name_locs[0], fmt::format("'update' sets a buffer declared in the same def or model "
                                             "('buffer {}: TYPE = INIT'); '{}' is {}", name, name,
                                             b ? "not a buffer" : "not declared"));
    if (b) diags_.note(b->decl, fmt::format("'{}' declared here", name));
    return;
  }
  if (!in_train_branch_.empty() && !in_train_branch_.back()) {
    diags_.error(s.loc, fmt::format("'update {}' in the eval branch of 'if training': eval reads buffers and never "
                                    "changes them; update it in the train branch", name));
    return;
  }
  const NodeId target = it->second;
  if (auto u = updated_.find(target); u != updated_.end()) {
    diags_.error(s.name_locs[0], fmt::format("buffer '{}' is updated twice; the train step gives it one new value",
                                             name));
    diags_.note(u->second, "first updated here");
    return;
  }
  if (v.is_error()) return;
  const TensorType& t = g_->nodes[target].outputs[0];
  if (v.kind != SVal::Kind::Tensor || g_->type(v.t) != t) {
    diags_.error(s.value->loc, fmt::format("the update of buffer '{}' must be a tensor of its type {}, got {}", name,
                                           t.str(), describe(v)));
    return;
  }
  updated_[target] = s.name_locs[0];
  g_->updates.push_back({target, v.t});
}

SVal Sema::merge_modes(const std::string& name, const SVal& train, const SVal& eval, SourceLoc loc) {
  if (train.is_error() || eval.is_error()) return SVal::error();
  if (train.kind == SVal::Kind::Tensor && eval.kind == SVal::Kind::Tensor) {
    if (train.t == eval.t) return train;
    const TensorType &a = g_->type(train.t), &b = g_->type(eval.t);
    if (a != b) {
      diags_.error(loc, fmt::format("'{}' is {} in train mode and {} in eval mode; after 'if training' a name has one "
                                    "type in both", name, a.str(), b.str()));
      return SVal::error();
    }
    InferFailure why;
    auto id = add_op(*g_, OpKind::ModeSelect, {train.t, eval.t}, {}, loc, &why);
    if (!id) throw InternalError("train_or_eval refused equal types: " + why.message);
    new_node_defaults(g_->nodes[*id], loc);
    return SVal::tensor(Value{*id, 0});
  }
  if (train.kind == SVal::Kind::Tuple && eval.kind == SVal::Kind::Tuple && train.items.size() == eval.items.size()) {
    SVal out = train;
    for (size_t k = 0; k < train.items.size(); ++k) {
      out.items[k] = merge_modes(fmt::format("{} (value {})", name, k + 1), train.items[k], eval.items[k], loc);
      if (out.items[k].is_error()) return SVal::error();
    }
    return out;
  }
  if (describe(train) == describe(eval) && train.kind == eval.kind && train.kind != SVal::Kind::Tensor) return train;
  diags_.error(loc, fmt::format("'{}' is {} in train mode and {} in eval mode; after 'if training' a name holds "
                                "tensors of one type in both, or the same compile-time value", name, describe(train),
                                describe(eval)));
  return SVal::error();
}

// Long by design: both branches run from the same bindings, then their bindings (and a
// return in both) merge, one step after another.
void Sema::exec_mode_if(const ast::Stmt& s) {
  const size_t fi = frames_.size() - 1;  // frames_ may grow (def calls) while a branch runs
  const std::map<std::string, Binding> before = frames_[fi].vars;
  auto branch = [&](const std::vector<ast::StmtPtr>& body, bool train) {
    frames_[fi].vars = before;
    frames_[fi].returned = false;
    frames_[fi].result = SVal{};
    in_train_branch_.push_back(train);
    exec_block(body);
    in_train_branch_.pop_back();
    return std::tuple{frames_[fi].vars, frames_[fi].returned, frames_[fi].result};
  };
  auto [train_vars, train_ret, train_res] = branch(s.body, true);
  auto [eval_vars, eval_ret, eval_res] = branch(s.else_body, false);
  Frame& f = frames_[fi];
  std::map<std::string, Binding> merged;
  for (const auto& [name, tb] : train_vars) {
    auto e = eval_vars.find(name);
    if (e == eval_vars.end()) {
      f.one_mode[name] = {"train", tb.decl};
      continue;
    }
    Binding b = tb;
    b.used = tb.used || e->second.used;
    b.value = merge_modes(name, tb.value, e->second.value, s.loc);
    merged[name] = b;
  }
  for (const auto& [name, eb] : eval_vars)
    if (!train_vars.count(name)) f.one_mode[name] = {"eval", eb.decl};
  for (const auto& [name, b] : merged) f.one_mode.erase(name);
  f.vars = std::move(merged);
  f.returned = false;
  f.result = SVal{};
  if (train_ret != eval_ret) {
    diags_.error(s.loc, fmt::format("the {} branch of 'if training' returns and the {} branch does not; return in "
                                    "both, or assign a name in both and return it after", train_ret ? "train" : "eval",
                                    train_ret ? "eval" : "train"));
  } else if (train_ret) {
    f.result = merge_modes("the result", train_res, eval_res, s.loc);
    f.returned = true;
  }
}

}  // namespace modelc

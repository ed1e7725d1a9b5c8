// The elaborator's internals, shared by sema.cc (declarations, statements, defs),
// sema_expr.cc (expressions, operators, built-in calls) and sema_args.cc (argument
// binding and conversion). Not part of the compiler's interface.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/frontend/sema.h"
#include "compiler/frontend/values.h"
#include "compiler/ir/op_registry.h"

namespace modelc {

// One argument as written at a call site.
struct CallArg {
  SVal value;
  SourceLoc loc;        // the argument expression
  std::string keyword;  // "" for a positional argument
  SourceLoc keyword_loc;
};

class Sema {
 public:
  Sema(const std::vector<const ast::Module*>& modules, const ElaborateOptions& opts,
       const SourceManager& sm, DiagnosticEngine& diags);
  Elaborated run();

  // --- expressions (sema_expr.cc) -------------------------------------------------------
  SVal eval(const ast::Expr& e);
  // Binary operator on evaluated operands; `op` is the operator text ("+", "@", ...).
  SVal binary(const std::string& op, SVal a, SVal b, SourceLoc loc);
  // Applies a built-in op to call arguments: binds them to its signature, turns numbers
  // into constants, runs the shape rule and adds the node (or folds numbers).
  SVal apply_op(const OpInfo& op, const std::vector<CallArg>& args, SourceLoc loc, bool checkpoint);
  bool op_inputs(const OpInfo& op, const std::vector<const CallArg*>& tensor_args, std::optional<DType> partner,
                 std::vector<Value>& inputs, std::vector<const CallArg*>& input_args);
  bool op_attrs(const OpInfo& op, const std::vector<const CallArg*>& bound, Attrs& attrs);
  void report_infer_failure(const OpInfo& op, const InferFailure& why, SourceLoc loc,
                            const std::vector<const CallArg*>& bound, const std::vector<const CallArg*>& tensor_args,
                            const std::vector<const CallArg*>& input_args);
  SVal make_constant(double v, DType t, SourceLoc loc);
  // Evaluates a compile-time integer (dimension, loop bound); reports and returns nullopt otherwise.
  std::optional<Dim> eval_dim(const ast::Expr& e, const char* what);
  std::optional<TensorType> eval_type(const ast::TypeExpr& t, const char* what);

  // --- argument binding (sema_args.cc) --------------------------------------------------
  // Matches arguments to parameter names (positional first, then keywords); reports
  // arity and keyword errors. out[i] is the argument given for names[i] (or null).
  bool bind_names(const std::string& callee, const std::vector<std::string>& names,
                  const std::vector<bool>& required, const std::vector<CallArg>& args,
                  SourceLoc call_loc, SourceLoc callee_decl, std::vector<const CallArg*>& out);
  // bind_names for a built-in signature (a parameter with a default is optional).
  bool bind_specs(const std::string& callee, const std::vector<ParamSpec>& sig, const std::vector<CallArg>& args,
                  SourceLoc call_loc, std::vector<const CallArg*>& out);
  // Converts a compile-time argument to an attribute of the kind a signature asks for.
  std::optional<AttrValue> to_attr(const CallArg& a, const ParamSpec& p, const std::string& callee);
  // Binds arguments against a signature whose parameters are all compile-time values
  // (initializers, train settings); fills defaults.
  bool bind_attrs(const std::string& callee, const std::vector<ParamSpec>& sig,
                  const std::vector<CallArg>& args, SourceLoc call_loc, Attrs& out);

  std::string describe(const SVal& v) const { return describe_value(v, *g_); }
  std::string suggest(const std::string& name, const std::vector<std::string>& candidates) const;

  // --- declarations and statements (sema.cc) --------------------------------------------
  struct Binding {
    enum class Kind { Var, Const, Arg, LoopVar, Dim, Global } kind = Kind::Var;
    SVal value;
    SourceLoc decl;
    bool used = false;
  };
  struct Frame {
    std::map<std::string, Binding> vars;
    const ast::Def* def = nullptr;  // null for the model body
    std::string scope;              // "block.2/linear.0"; "" in the model body
    std::map<std::string, int> call_counts;  // def name -> calls so far in this instance
    std::map<std::string, SourceLoc> params_declared;  // params and buffers
    std::map<std::string, NodeId> buffers;              // this instance's buffers, by name
    // Names bound in one branch of an `if training` only, and which ("train" / "eval").
    std::map<std::string, std::pair<std::string, SourceLoc>> one_mode;
    int dropouts = 0;
    int draws = 0;  // the other keyed calls (rand_like, randn_like)
    bool checkpoint = false;
    bool returned = false;
    SVal result;
  };

  Binding* lookup(const std::string& name);
  void bind(const std::string& name, SVal v, SourceLoc decl, Binding::Kind kind);
  SVal call_def(const ast::Def& def, const std::vector<CallArg>& args, SourceLoc loc, bool checkpoint);
  void exec_block(const std::vector<ast::StmtPtr>& body);
  // Sema::run's steps, in order (sema_decl.cc).
  void collect_decls(std::map<std::string, SourceLoc>& models_seen);
  void eval_globals(const std::map<std::string, std::string>& defines, std::set<std::string>& defines_used);
  const ast::Model* choose_model(const std::map<std::string, SourceLoc>& models_seen);
  void bind_dims(const ast::Model& m, const std::map<std::string, std::string>& defines,
                 std::set<std::string>& defines_used);
  void check_unused(const ast::Model& m);
  void outputs_by_name(const ast::Model& m);
  void find_train(const ast::Model& m, const std::map<std::string, SourceLoc>& models_seen, Elaborated& out);
  void exec(const ast::Stmt& s);
  void exec_let(const ast::Stmt& s);
  void exec_input(const ast::Stmt& s, bool in_def);
  void exec_param(const ast::Stmt& s, bool buffer);
  // `update NAME = value` and `if training` (sema_mode.cc).
  void exec_update(const ast::Stmt& s);
  void exec_mode_if(const ast::Stmt& s);
  // The value of a name after `if training`: either branch's, or a train_or_eval node.
  SVal merge_modes(const std::string& name, const SVal& train, const SVal& eval, SourceLoc loc);
  void exec_output(const ast::Stmt& s, bool in_def);
  void exec_return(const ast::Stmt& s, bool in_def);
  void exec_for(const ast::Stmt& s);
  void exec_if(const ast::Stmt& s);
  void exec_assign(const ast::Stmt& s);
  // An error (and true) when `name` is already declared in this frame as other than a variable.
  bool declared_twice(const std::string& name, SourceLoc loc);
  Node& new_node_defaults(Node& n, SourceLoc loc);
  bool stopped() const { return diags_.at_error_limit() || aborted_; }

  const SourceManager& sm_;
  DiagnosticEngine& diags_;
  const std::vector<const ast::Module*>& modules_;
  const ElaborateOptions& opts_;
  std::map<std::string, const ast::Def*> defs_;
  std::map<std::string, Binding> globals_;
  std::vector<Frame> frames_;
  Graph* g_ = nullptr;
  bool aborted_ = false;
  std::vector<std::pair<const ast::Def*, SourceLoc>> call_stack_;
  std::vector<bool> in_train_branch_;  // the `if training` branches being elaborated (true: train)
  std::map<NodeId, SourceLoc> updated_;  // buffers given an update, and where
};

}  // namespace modelc

// Semantic analysis and elaboration: turns the AST of a model into the graph IR.
//
// It resolves names, checks arity, keywords, dtypes and symbolic shapes, inlines every
// def call (params get hierarchical names: block.2.linear.0.w), unrolls for-loops and
// evaluates compile-time constants. Defs are checked where they are called. Every
// problem is reported with its source location; elaboration goes on after an error to
// report the next one (up to the error limit).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/frontend/ast.h"
#include "compiler/ir/train_config.h"
#include "compiler/ir/graph.h"

namespace modelc {

struct ElaborateOptions {
  std::string model;  // which model; "" = the only one in the main module
  // -D NAME=VALUE: binds a model dimension or overrides a top-level `let`.
  std::vector<std::pair<std::string, std::string>> defines;
  // Non-empty: these tensors of the model's body, by name, become the graph's outputs in
  // place of those its `output` statements name (the predict function, compiler/passes/predict.h);
  // the unused-name warnings are then not repeated.
  std::vector<std::string> outputs;
};

struct Elaborated {
  std::unique_ptr<Graph> graph;        // null if errors were reported
  std::optional<TrainConfig> train;    // the model's train section, if any
};

// `modules[0]` is the main file; the others are its imports (already loaded).
Elaborated elaborate(const std::vector<const ast::Module*>& modules, const ElaborateOptions& opts,
                     const SourceManager& sm, DiagnosticEngine& diags);

// Limits, named in their error messages.
inline constexpr int kMaxCallDepth = 64;         // nested def calls
inline constexpr int64_t kMaxLoopTrips = 100000; // iterations of one for-loop
inline constexpr size_t kMaxNodes = 1000000;     // nodes after inlining and unrolling
inline constexpr int64_t kMaxParamElements = int64_t{1} << 40;  // elements of one parameter

}  // namespace modelc

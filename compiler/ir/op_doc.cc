// The op reference (compiler/ir/op_doc.h), from the records alone.
#include "compiler/ir/op_doc.h"

#include <fmt/format.h>

#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

std::string kind_of(const OpInfo& op) {
  switch (op.math) {
    case MathKind::Library: return "library";
    case MathKind::Scalar: return op.fusion == FusionKind::Broadcast ? "elementwise (broadcasting)" : "elementwise";
    case MathKind::Composite: return "composite (of other ops)";
    case MathKind::Template: break;
  }
  switch (op.fusion) {
    case FusionKind::Reduction: return "reduction";
    case FusionKind::Row: return "row (along an axis)";
    case FusionKind::Broadcast: return "broadcast";
    default: return "elementwise";
  }
}

std::string autocast_of(const OpInfo& op) {
  switch (op.autocast) {
    case AutocastPolicy::Lower: return "low";
    case AutocastPolicy::F32: return "f32";
    case AutocastPolicy::Follow: break;
  }
  return "as its inputs";
}

// Markdown table cells must not hold a bare '|'.
std::string cell(std::string s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

std::string op_reference_markdown() {
  std::string s =
      "# Built-in ops\n\n"
      "Generated from the op registry by `modelc --list-ops` (each op is one record in\n"
      "`compiler/ir/ops/`; `docs/architecture.md` says how to add one). A test checks that this\n"
      "file is what the registry says.\n\n"
      "`tensor?` is an optional tensor (default none), `ints` accepts one integer or a list,\n"
      "`shape` a list of dimensions (symbolic allowed). Axes may be negative (counted from the\n"
      "end). Float ops accept f32, f16 and bf16; the two operands of a binary op must have the\n"
      "same dtype (numbers adapt). *runs as*: how it is computed (elementwise and reductions\n"
      "become generated code and fuse; library ops are calls of the runtime's kernels). *under\n"
      "bf16/fp16*: its autocast policy (docs/precision.md). *gradient*: whether autodiff\n"
      "differentiates through it.\n\n"
      "| op | signature | semantics | runs as | under bf16/fp16 | gradient |\n"
      "| --- | --- | --- | --- | --- | --- |\n";
  for (const OpInfo& op : OpRegistry::get().all()) {
    if (!op.callable) continue;
    s += fmt::format("| `{}` | `{}` | {} | {} | {} | {} |\n", op.name, cell(op.signature_text), cell(op.summary),
                     kind_of(op), autocast_of(op),
                     op.grad || (op.expand && op.no_grad.empty()) ? (op.expand ? "yes (its parts')" : "yes") : "no: " + op.no_grad);
  }
  return s;
}

}  // namespace modelc

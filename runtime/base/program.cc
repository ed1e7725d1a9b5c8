#include "runtime/base/program.h"

#include <fmt/format.h>

#include "runtime/base/error.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace modelc::rt {

SizeExpr SizeExpr::constant(int64_t c) {
  SizeExpr e;
  if (c != 0) e.terms.push_back({c, {}});
  return e;
}

SizeExpr SizeExpr::symbol(uint32_t id) {
  SizeExpr e;
  e.terms.push_back({1, {id}});
  return e;
}

bool SizeExpr::is_constant() const {
  for (const Term& t : terms)
    if (!t.symbols.empty()) return false;
  return true;
}

int64_t SizeExpr::eval(std::span<const int64_t> symbol_values) const {
  int64_t sum = 0;
  for (const Term& t : terms) {
    int64_t v = t.coef;
    for (uint32_t s : t.symbols) {
      if (s >= symbol_values.size()) throw std::runtime_error("size expression names an unknown symbol");
      if (__builtin_mul_overflow(v, symbol_values[s], &v)) throw std::runtime_error("size expression overflows int64");
    }
    if (__builtin_add_overflow(sum, v, &sum)) throw std::runtime_error("size expression overflows int64");
  }
  return sum;
}

std::string SizeExpr::str(const std::vector<std::string>& names) const {
  if (terms.empty()) return "0";
  std::string s;
  for (const Term& t : terms) {
    if (!s.empty()) s += t.coef < 0 ? " - " : " + ";
    else if (t.coef < 0) s += "-";
    int64_t c = t.coef < 0 ? -t.coef : t.coef;
    std::string syms;
    for (uint32_t id : t.symbols) {
      if (!syms.empty()) syms += "*";
      syms += id < names.size() ? names[id] : "?";
    }
    if (syms.empty()) s += std::to_string(c);
    else s += (c == 1 ? "" : std::to_string(c) + "*") + syms;
  }
  return s;
}

namespace {

// OneCycleLR (anneal_strategy "cos", three_phase false): phase 1 from lr / div_factor to lr
// ends at step pct_start * total - 1, phase 2 down to the floor at total - 1.
double one_cycle(const Schedule& s, int64_t step, int64_t total) {
  const double initial = s.lr / s.div_factor, floor = initial / s.final_div_factor;
  const double end1 = s.pct_start * static_cast<double>(total) - 1, end2 = static_cast<double>(total) - 1;
  const double k = static_cast<double>(step);
  auto anneal = [](double from, double to, double pct) { return to + (from - to) / 2 * (std::cos(std::numbers::pi * pct) + 1); };
  // A phase of no steps (torch divides by zero there) has reached its end.
  auto pct = [](double at, double start, double end) { return end > start ? (at - start) / (end - start) : 1.0; };
  if (k <= end1) return anneal(initial, s.lr, pct(k, 0, end1));
  return anneal(s.lr, floor, std::min(1.0, pct(k, end1, end2)));
}

}  // namespace

const std::vector<std::string>& schedule_kinds() {
  static const std::vector<std::string> kinds = {"constant",   "step",     "cosine", "linear", "exponential",
                                                 "polynomial", "onecycle", "plateau"};
  return kinds;
}

bool Schedule::depends_on_length() const {
  return kind == "cosine" || kind == "linear" || kind == "polynomial" || kind == "onecycle";
}

double Schedule::lr_at(int64_t step, int64_t total) const {
  if (kind == "step") {
    if (every <= 0) return lr;
    return lr * std::pow(gamma, static_cast<double>(step / every));
  }
  if (kind == "onecycle") return total > 0 ? one_cycle(*this, step, total) : lr;
  if (kind == "constant") return lr;
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t k = step - warmup, span = total - warmup;
  if (kind == "exponential") return lr * std::pow(gamma, static_cast<double>(k));
  if (span <= 0) return kind == "linear" && total > 0 ? lr * end_factor : lr;
  if (kind == "cosine") {
    double progress = std::min(1.0, static_cast<double>(k) / static_cast<double>(span));
    return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(std::numbers::pi * progress));
  }
  if (kind == "linear") {
    if (span == 1) return lr * end_factor;
    const double done = static_cast<double>(std::min(k, span - 1)) / static_cast<double>(span - 1);
    return lr * (1 + (end_factor - 1) * done);
  }
  if (kind == "polynomial")
    return lr * std::pow(1 - static_cast<double>(std::min(k, span)) / static_cast<double>(span), power);
  return lr;
}

const Function* Program::function(const std::string& name) const {
  for (const Function& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}

std::optional<uint32_t> Program::symbol_id(const std::string& name) const {
  for (size_t i = 0; i < symbols.size(); ++i)
    if (symbols[i] == name) return static_cast<uint32_t>(i);
  return std::nullopt;
}

void record_kernel_contracts(Program& p) {
  std::vector<bool> done(p.codelets.size());
  for (const Function& f : p.functions)
    for (const Instr& in : f.instrs) {
      if (in.kind != Instr::Kind::Codelet || in.codelet >= p.codelets.size()) continue;
      CodeletDesc c = p.codelets[in.codelet];
      c.inputs = static_cast<uint32_t>(in.inputs.size());
      c.sizes = in.sizes;
      c.extent = in.extent;
      c.operand_types.clear();
      c.operand_shapes.clear();
      for (const std::vector<uint32_t>* ids : {&in.inputs, &in.outputs})
        for (uint32_t b : *ids) {
          c.operand_types.push_back(b < p.buffers.size() ? p.buffers[b].type : ElemType::F32);
          c.operand_shapes.push_back(b < p.buffers.size() ? p.buffers[b].shape : std::vector<SizeExpr>{});
        }
      CodeletDesc& k = p.codelets[in.codelet];
      if (done[in.codelet] && (k.inputs != c.inputs || k.sizes != c.sizes || k.extent != c.extent ||
                               k.operand_types != c.operand_types || k.operand_shapes != c.operand_shapes))
        throw RuntimeError(fmt::format("kernel '{}' is run by two instructions with different operands", k.name));
      k = std::move(c);
      done[in.codelet] = true;
    }
}

}  // namespace modelc::rt

// The library-op table and the checks every op shares.
#include "runtime/tensor.h"
#include "kernels/cpu/library.h"

#include <fmt/format.h>

namespace modelc::kernels {

namespace {

using rt::shape_str;

const LibraryTable& table() {
  static const LibraryTable t = [] {
    LibraryTable r;
    register_matmul_ops(r);
    register_conv_ops(r);
    register_pool_ops(r);
    register_embedding_ops(r);
    register_movement_ops(r);
    return r;
  }();
  return t;
}

}  // namespace

void LibCall::fail(const std::string& msg) const {
  throw rt::RuntimeError(fmt::format("{} at {}: {}", op, where.empty() ? "<unknown location>" : where, msg));
}

const std::vector<int64_t>& LibCall::ints_attr(const std::string& name) const {
  if (ints) {
    auto it = ints->find(name);
    if (it != ints->end()) return it->second;
  }
  fail(fmt::format("missing attribute '{}'", name));
}

std::vector<int64_t> LibCall::ints_or(const std::string& name, std::vector<int64_t> fallback) const {
  if (ints) {
    auto it = ints->find(name);
    if (it != ints->end()) return it->second;
  }
  return fallback;
}

int64_t LibCall::int_attr(const std::string& name) const {
  const auto& v = ints_attr(name);
  if (v.size() != 1) fail(fmt::format("attribute '{}' must hold one integer, got {}", name, shape_str(v)));
  return v[0];
}

int64_t LibCall::int_or(const std::string& name, int64_t fallback) const {
  if (!ints || !ints->count(name)) return fallback;
  return int_attr(name);
}

double LibCall::float_attr(const std::string& name) const {
  if (floats) {
    auto it = floats->find(name);
    if (it != floats->end()) return it->second;
  }
  fail(fmt::format("missing attribute '{}'", name));
}

std::pair<int64_t, int64_t> LibCall::pair_attr(const std::string& name, std::pair<int64_t, int64_t> fallback) const {
  std::vector<int64_t> v = ints_or(name, {});
  if (v.empty()) return fallback;
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() == 2) return {v[0], v[1]};
  fail(fmt::format("attribute '{}' must have 1 or 2 entries, got {}", name, shape_str(v)));
}

void LibCall::expect_arity(size_t in_min, size_t in_max, size_t out_min, size_t out_max) const {
  if (inputs.size() < in_min || inputs.size() > in_max)
    fail(fmt::format("expects {} input{}, got {}", in_min == in_max ? std::to_string(in_min)
                     : fmt::format("{} to {}", in_min, in_max), in_max == 1 ? "" : "s", inputs.size()));
  if (outputs.size() < out_min || outputs.size() > out_max)
    fail(fmt::format("expects {} output{}, got {}", out_min == out_max ? std::to_string(out_min)
                     : fmt::format("{} to {}", out_min, out_max), out_max == 1 ? "" : "s", outputs.size()));
}

const TensorArg& LibCall::in(size_t i) const {
  if (i >= inputs.size() || !inputs[i].present()) fail(fmt::format("input {} is missing", i));
  return inputs[i];
}

const TensorArg& LibCall::out(size_t i) const {
  if (i >= outputs.size() || !outputs[i].present()) fail(fmt::format("output {} is missing", i));
  return outputs[i];
}

void LibCall::expect_type(const TensorArg& t, ElemType type, const char* role) const {
  if (t.type != type)
    fail(fmt::format("{} must be {}, got {}{}", role, rt::elem_name(type), rt::elem_name(t.type), shape_str(t.shape)));
}

void LibCall::expect_rank(const TensorArg& t, int rank, const char* role) const {
  if (t.rank() != rank)
    fail(fmt::format("{} must have rank {}, got {}{}", role, rank, rt::elem_name(t.type), shape_str(t.shape)));
}

LibraryFn find_library_op(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::string> library_op_names() {
  std::vector<std::string> names;
  for (const auto& [n, f] : table()) names.push_back(n);
  return names;
}


}  // namespace modelc::kernels

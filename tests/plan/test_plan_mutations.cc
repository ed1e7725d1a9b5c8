// Plans that lie (docs/plan-format.md, "What a plan is trusted with"): every structural
// field of a real plan's program section changed to another value, the plan encoded again
// with valid CRCs, loaded and trained for a step in a child process. Each outcome must be
// a clean error (at load or at run) or the very results of the unchanged plan; never a
// signal, a hang, or other numbers. The train settings and the parameters' initializers are
// settings, not structure (a different learning rate is a different run, not a lie), and
// are left alone. The fields are drawn at random (the seed is printed; MODELC_TEST_SEED
// replays it), `kPerModel` per model (fewer under the sanitizers).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "compiler/codegen/object.h"
#include "compiler/pipeline.h"
#include "runtime/base/error.h"
#include "runtime/session/plan.h"
#include "tests/common/sanitizers.h"
#include "tests/plan/plan_harness.h"

namespace modelc {
namespace {

namespace fs = std::filesystem;

constexpr size_t kPerModel = test::full_or<size_t>(250, 40);

uint64_t seed() {
  static const uint64_t s = [] {
    const char* e = std::getenv("MODELC_TEST_SEED");
    uint64_t v = e ? std::strtoull(e, nullptr, 0) : std::random_device{}();
    std::fprintf(stderr, "plan mutations: MODELC_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

struct Mutation {
  std::string field;  // "train_step: instruction 12: extent term 0"
  std::string kind;   // "extent", for the summary
  std::function<void(rt::Program&)> apply;
  // Another program the checker cannot tell from the compiler's: an operand replaced by
  // another buffer of the same type and shape (a library op's: of the same size, or an
  // optional one left out), a library op or attribute replaced by another valid for the
  // same operands, a temp between library ops of another float type. It may compute other numbers (docs/plan-format.md
  // says so); everything else must not.
  bool another_program = false;
};

// Other values for an integer field: neighbours, zero, a large one. Not the largest under
// the sanitizers: ASan aborts on an allocation of gigabytes (a dim of 2^20) where the
// normal build's allocator refuses it with an error, which the normal build tests.
std::vector<int64_t> others(int64_t v) {
  std::vector<int64_t> out;
  for (int64_t w : {v + 1, v - 1, int64_t{0}, v * 16 + 3, test::kSanitized ? v + 2 : int64_t{1} << 20})
    if (w != v && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  return out;
}

int64_t numel(const rt::BufferDesc& d) {
  int64_t n = 1;
  for (const rt::SizeExpr& e : d.shape) n *= e.is_constant() ? e.eval({}) : -1;
  return n;
}

class Enumerator {
 public:
  explicit Enumerator(const rt::Program& p) : p_(p), library_only_(p.buffers.size(), true) {
    for (const rt::Function& f : p.functions)
      for (const rt::Instr& in : f.instrs)
        if (in.kind == rt::Instr::Kind::Codelet)
          for (const std::vector<uint32_t>* ids : {&in.inputs, &in.outputs})
            for (uint32_t b : *ids)
              if (b < library_only_.size()) library_only_[b] = false;
  }
  std::vector<Mutation> all() {
    for (size_t b = 0; b < p_.buffers.size(); ++b) buffer(b);
    for (size_t f = 0; f < p_.functions.size(); ++f) function(f);
    for (size_t k = 0; k < p_.codelets.size(); ++k) kernel(k);
    return std::move(out_);
  }

 private:
  using Get = std::function<int64_t&(rt::Program&)>;
  void ints(const std::string& field, const std::string& kind, int64_t now, const Get& get) {
    for (int64_t w : others(now)) out_.push_back({fmt::format("{} = {} (was {})", field, w, now), kind, [get, w](rt::Program& p) { get(p) = w; }});
  }
  void id(const std::string& field, const std::string& kind, uint32_t now, size_t count,
          const std::function<uint32_t&(rt::Program&)>& get) {
    auto same = [&](uint32_t w) {
      if (kind == "library operand" && w == rt::kNoBuffer) return true;  // an optional operand left out (a bias)
      if ((kind != "operand" && kind != "library operand") || w >= p_.buffers.size() || now >= p_.buffers.size()) return false;
      const rt::BufferDesc &a = p_.buffers[w], &b = p_.buffers[now];
      return a.type == b.type && (a.shape == b.shape || (kind == "library operand" && numel(a) == numel(b)));
    };
    for (uint32_t w : {now + 1, now == 0 ? 1u : now - 1, static_cast<uint32_t>(count), rt::kNoBuffer})
      if (w != now)
        out_.push_back({fmt::format("{} = {} (was {})", field, w, now), kind, [get, w](rt::Program& p) { get(p) = w; }, same(w)});
  }
  void size(const std::string& field, const std::string& kind, const rt::SizeExpr& e,
            const std::function<rt::SizeExpr&(rt::Program&)>& get) {
    for (size_t t = 0; t < e.terms.size(); ++t)
      ints(fmt::format("{} term {}", field, t), kind, e.terms[t].coef, [get, t](rt::Program& p) -> int64_t& { return get(p).terms[t].coef; });
    out_.push_back({field + " + 1", kind, [get](rt::Program& p) { get(p).terms.push_back({1, {}}); }});
  }
  void buffer(size_t b) {
    const rt::BufferDesc& d = p_.buffers[b];
    const std::string f = fmt::format("buffer {} '{}'", b, d.name);
    // A temp only library ops touch may hold another float type: they widen and round.
    auto is_float = [](rt::ElemType t) { return t == rt::ElemType::F32 || t == rt::ElemType::F16 || t == rt::ElemType::BF16; };
    for (int t = 0; t <= static_cast<int>(rt::ElemType::Bool); ++t)
      if (t != static_cast<int>(d.type))
        out_.push_back({fmt::format("{}: type {}", f, t), "buffer type", [b, t](rt::Program& p) { p.buffers[b].type = static_cast<rt::ElemType>(t); },
                        library_only_[b] && d.role == rt::BufferRole::Temp && is_float(d.type) && is_float(static_cast<rt::ElemType>(t))});
    for (int r = 0; r <= static_cast<int>(rt::BufferRole::Temp); ++r)
      if (r != static_cast<int>(d.role))
        out_.push_back({fmt::format("{}: role {}", f, r), "buffer role", [b, r](rt::Program& p) { p.buffers[b].role = static_cast<rt::BufferRole>(r); }});
    for (size_t k = 0; k < d.shape.size(); ++k)
      size(fmt::format("{}: dim {}", f, k), "buffer shape", d.shape[k], [b, k](rt::Program& p) -> rt::SizeExpr& { return p.buffers[b].shape[k]; });
    out_.push_back({f + ": one dim more", "buffer rank", [b](rt::Program& p) { p.buffers[b].shape.push_back(rt::SizeExpr::constant(2)); }});
    if (!d.shape.empty())
      out_.push_back({f + ": one dim less", "buffer rank", [b](rt::Program& p) { p.buffers[b].shape.pop_back(); }});
    if (d.index_limit > 0)
      ints(f + ": index limit", "index limit", d.index_limit, [b](rt::Program& p) -> int64_t& { return p.buffers[b].index_limit; });
  }
  // The kernel's contract, and the fields only messages and the GPU read.
  void kernel(size_t k) {
    const rt::CodeletDesc& c = p_.codelets[k];
    const std::string f = fmt::format("kernel {} '{}'", k, c.name);
    auto K = [k](rt::Program& p) -> rt::CodeletDesc& { return p.codelets[k]; };
    for (size_t o = 0; o < c.operand_shapes.size(); ++o) {
      for (size_t d = 0; d < c.operand_shapes[o].size(); ++d)
        size(fmt::format("{}: operand {} dim {}", f, o, d), "kernel contract", c.operand_shapes[o][d],
             [K, o, d](rt::Program& p) -> rt::SizeExpr& { return K(p).operand_shapes[o][d]; });
      out_.push_back({fmt::format("{}: operand {} type", f, o), "kernel contract", [K, o](rt::Program& p) {
                        K(p).operand_types[o] = K(p).operand_types[o] == rt::ElemType::F32 ? rt::ElemType::I32 : rt::ElemType::F32; }});
    }
    size(f + ": extent", "kernel contract", c.extent, [K](rt::Program& p) -> rt::SizeExpr& { return K(p).extent; });
    for (size_t z = 0; z < c.sizes.size(); ++z)
      size(fmt::format("{}: size {}", f, z), "kernel contract", c.sizes[z], [K, z](rt::Program& p) -> rt::SizeExpr& { return K(p).sizes[z]; });
    out_.push_back({f + ": one input more", "kernel contract", [K](rt::Program& p) { ++K(p).inputs; }});
    out_.push_back({f + ": source", "kernel text", [K](rt::Program& p) { K(p).source += " "; }});
    out_.push_back({f + ": nodes", "kernel text", [K](rt::Program& p) { K(p).nodes += 1; }});
    out_.push_back({f + ": GPU block", "kernel text", [K](rt::Program& p) { K(p).gpu_block = 64; }});
  }
  void function(size_t fi) {
    const rt::Function& fn = p_.functions[fi];
    const size_t nbuf = p_.buffers.size();
    auto F = [fi](rt::Program& p) -> rt::Function& { return p.functions[fi]; };
    for (size_t i = 0; i < fn.instrs.size(); ++i) instr(fi, i);
    for (size_t k = 0; k < fn.feeds.size(); ++k) {
      const std::string f = fmt::format("{}: feed {} '{}'", fn.name, k, fn.feeds[k].name);
      id(f + " buffer", "feed", fn.feeds[k].buffer, nbuf, [F, k](rt::Program& p) -> uint32_t& { return F(p).feeds[k].buffer; });
      out_.push_back({f + " micro-batch", "feed", [F, k](rt::Program& p) { F(p).feeds[k].micro += 1; }});
      out_.push_back({f + " name", "feed", [F, k](rt::Program& p) { F(p).feeds[k].name += "x"; }});
    }
    for (size_t k = 0; k < fn.outputs.size(); ++k)
      id(fmt::format("{}: output '{}'", fn.name, fn.outputs[k].first), "output", fn.outputs[k].second, nbuf,
         [F, k](rt::Program& p) -> uint32_t& { return F(p).outputs[k].second; });
    for (size_t k = 0; k < fn.updates.size(); ++k) {
      id(fmt::format("{}: update {} from", fn.name, k), "update", fn.updates[k].first, nbuf,
         [F, k](rt::Program& p) -> uint32_t& { return F(p).updates[k].first; });
      id(fmt::format("{}: update {} to", fn.name, k), "update", fn.updates[k].second, nbuf,
         [F, k](rt::Program& p) -> uint32_t& { return F(p).updates[k].second; });
    }
  }
  void instr(size_t fi, size_t i) {
    const rt::Instr& in = p_.functions[fi].instrs[i];
    const std::string f = fmt::format("{}: instruction {} ({})", p_.functions[fi].name, i,
                                      in.kind == rt::Instr::Kind::Codelet ? p_.codelets[in.codelet].name : in.op);
    auto I = [fi, i](rt::Program& p) -> rt::Instr& { return p.functions[fi].instrs[i]; };
    const size_t nbuf = p_.buffers.size();
    const bool lib = in.kind == rt::Instr::Kind::Library;
    const std::string operand = lib ? "library operand" : "operand";
    for (size_t k = 0; k < in.inputs.size(); ++k)
      id(fmt::format("{}: input {}", f, k), operand, in.inputs[k], nbuf, [I, k](rt::Program& p) -> uint32_t& { return I(p).inputs[k]; });
    for (size_t k = 0; k < in.outputs.size(); ++k)
      id(fmt::format("{}: output {}", f, k), operand, in.outputs[k], nbuf, [I, k](rt::Program& p) -> uint32_t& { return I(p).outputs[k]; });
    out_.push_back({f + ": one input less", "operand count", [I](rt::Program& p) { if (!I(p).inputs.empty()) I(p).inputs.pop_back(); }, lib});
    out_.push_back({f + ": one output more", "operand count", [I, nbuf](rt::Program& p) { I(p).outputs.push_back(static_cast<uint32_t>(nbuf - 1)); }});
    if (in.kind == rt::Instr::Kind::Codelet) {
      size(f + ": extent", "extent", in.extent, [I](rt::Program& p) -> rt::SizeExpr& { return I(p).extent; });
      for (size_t k = 0; k < in.sizes.size(); ++k)
        size(fmt::format("{}: size {}", f, k), "size table", in.sizes[k], [I, k](rt::Program& p) -> rt::SizeExpr& { return I(p).sizes[k]; });
      out_.push_back({f + ": one size less", "size table", [I](rt::Program& p) { if (!I(p).sizes.empty()) I(p).sizes.pop_back(); }});
      id(f + ": kernel", "kernel", in.codelet, p_.codelets.size(), [I](rt::Program& p) -> uint32_t& { return I(p).codelet; });
      ints(f + ": grain", "grain", in.grain, [I](rt::Program& p) -> int64_t& { return I(p).grain; });
    } else {
      const size_t first = out_.size();
      for (const auto& [name, v] : in.ints)
        for (size_t k = 0; k < v.size(); ++k)
          ints(fmt::format("{}: {}[{}]", f, name, k), "library attribute", v[k],
               [I, name, k](rt::Program& p) -> int64_t& { return I(p).ints.at(name)[k]; });
      for (const std::string op : {"matmul", "transpose", "reshape", "copy"})
        if (op != in.op) out_.push_back({f + ": op " + op, "library op", [I, op](rt::Program& p) { I(p).op = op; }});
      for (size_t m = first; m < out_.size(); ++m) out_[m].another_program = true;
    }
  }
  const rt::Program& p_;
  std::vector<bool> library_only_;  // buffers no kernel instruction touches
  std::vector<Mutation> out_;
};

// What happened to one plan, run in a child process.
struct Outcome {
  enum Kind { Same, Refused, Wrong, Crash, Hang } kind = Same;
  std::string detail;  // the error, the signal
};

// The child's report: "R" + the error, or "D" + the results' bytes. The batches are the
// unchanged program's, as a user's data does not change with the plan.
std::string run_child(const std::string& path, const rt::Program& base) {
  try {
    std::shared_ptr<rt::Program> p = rt::read_plan(path);
    rt::SessionOptions so;
    so.threads = 1;
    so.seed = 5;
    so.total_steps = 1;
    rt::Session s(p, so);
    plantest::StepResult r;
    r.losses.push_back(s.train_step(plantest::random_batch(base, 4, 1)));
    for (const std::string& n : s.param_names()) r.persistent.emplace_back(n, s.param(n).bytes);
    for (const std::string& n : s.state_names()) r.persistent.emplace_back(n, s.state(n).bytes);
    r.eval = s.eval(plantest::random_batch(base, 4, 99));
    std::string out = "D";
    for (float l : r.losses) out.append(reinterpret_cast<const char*>(&l), sizeof l);
    // By name: a zero-initialised buffer moved between the parameters and the optimizer
    // state computes the same (only the checkpoint's section differs).
    std::sort(r.persistent.begin(), r.persistent.end());
    for (const auto& [n, b] : r.persistent) out += n, out.append(b.begin(), b.end());
    for (const auto& [n, t] : r.eval) out += n, out.append(t.bytes.begin(), t.bytes.end());
    return out;
  } catch (const std::runtime_error& e) {
    return std::string("R") + e.what();
  }
}

Outcome run(const std::string& path, const rt::Program& base, const std::string& want) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(60);
    std::string r = run_child(path, base);
    for (size_t done = 0; done < r.size();) {
      ssize_t n = write(fds[1], r.data() + done, r.size() - done);
      if (n <= 0) _exit(4);
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string got;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return {WTERMSIG(status) == SIGALRM ? Outcome::Hang : Outcome::Crash, strsignal(WTERMSIG(status))};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got.empty()) return {Outcome::Crash, "exit " + std::to_string(WEXITSTATUS(status))};
  if (got[0] == 'R') return {Outcome::Refused, got.substr(1)};
  if (!want.empty() && got != want) return {Outcome::Wrong, "other results"};
  return {Outcome::Same, got};
}

void mutate_model(const std::string& model, const std::vector<std::pair<std::string, std::string>>& defines) {
  Compilation c(CompileOptions{.defines = defines});
  std::string so;
  ProgramOptions po;
  po.shared_object = &so;
  std::shared_ptr<rt::Program> base = compile_program(c, std::string(MODELC_SOURCE_DIR) + "/models/" + model, po);
  ASSERT_TRUE(base) << c.diags().render();
  base->code = nullptr;
  const fs::path dir = fs::temp_directory_path() / fmt::format("modelc-mutations-{}", getpid());
  fs::create_directories(dir);
  const std::string path = (dir / "m.plan").string();
  auto write = [&](const rt::Program& p) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << rt::encode_plan(p, so, host_target());
  };
  write(*base);
  Outcome ref = run(path, *base, "");
  ASSERT_EQ(ref.kind, Outcome::Same) << "the unchanged plan: " << ref.detail;
  std::vector<Mutation> all = Enumerator(*base).all();
  std::mt19937_64 rng(seed() ^ std::hash<std::string>{}(model));
  std::shuffle(all.begin(), all.end(), rng);
  if (all.size() > kPerModel) all.resize(kPerModel);
  std::map<std::string, std::array<int, 5>> by_kind;
  int others = 0;
  for (const Mutation& m : all) {
    rt::Program p = *base;
    m.apply(p);
    write(p);
    Outcome o = run(path, *base, ref.detail);
    ++by_kind[m.kind][o.kind];
    if (o.kind == Outcome::Wrong && m.another_program) {
      ++others;
      continue;
    }
    EXPECT_TRUE(o.kind == Outcome::Same || o.kind == Outcome::Refused)
        << model << ": " << m.field << ": " << (o.kind == Outcome::Wrong ? "other results, no error" : o.kind == Outcome::Hang ? "hangs" : "crashes: " + o.detail);
  }
  std::fprintf(stderr, "%s: %d of the results that differ come from another valid program (a same-shaped operand, "
               "a library op or attribute)\n", model.c_str(), others);
  std::fprintf(stderr, "%s: %zu mutations (same / refused / wrong / crash / hang):\n", model.c_str(), all.size());
  for (const auto& [k, n] : by_kind) std::fprintf(stderr, "  %-18s %3d %3d %3d %3d %3d\n", k.c_str(), n[0], n[1], n[2], n[3], n[4]);
  fs::remove_all(dir);
}

TEST(PlanMutations, FashionMlp) { mutate_model("fashion_mlp.model", {{"H", "16"}}); }
TEST(PlanMutations, FashionCnn) { mutate_model("fashion_cnn.model", {}); }
TEST(PlanMutations, CharGpt) { mutate_model("char_gpt.model", {{"T", "8"}, {"C", "24"}, {"L", "1"}}); }

}  // namespace
}  // namespace modelc

// The 'program' section of a .plan file (the layout is in runtime/session/plan_codec.h) and the
// consistency check of a Program (rt::check_program).
#include "runtime/session/plan_codec.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <set>

#include "runtime/base/error.h"
#include "runtime/base/train_rules.h"
#include "runtime/execution/streams.h"

namespace modelc::rt {
namespace plan_detail {
namespace {

// The streams extension begins with "STRM" (little-endian u32).
constexpr uint32_t kStreamsTag = 0x4d525453;
constexpr uint32_t kIndexTag = 0x58444e49;  // "INDX": the index limits of integer inputs
constexpr uint32_t kIgnoreTag = 0x524e4749;  // "IGNR": the ignored values of index inputs

class Writer {
 public:
  std::string out;
  void u8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  void count(size_t n) {
    if (n > UINT32_MAX) throw RuntimeError(fmt::format("a list or string of {} entries is too long for a plan", n));
    u32(static_cast<uint32_t>(n));
  }
  void str(const std::string& s) {
    count(s.size());
    out += s;
  }
  void size(const SizeExpr& e) {
    count(e.terms.size());
    for (const SizeExpr::Term& t : e.terms) {
      i64(t.coef);
      count(t.symbols.size());
      for (uint32_t s : t.symbols) u32(s);
    }
  }
  void sizes(const std::vector<SizeExpr>& v) {
    count(v.size());
    for (const SizeExpr& e : v) size(e);
  }
  void ids(const std::vector<uint32_t>& v) {
    count(v.size());
    for (uint32_t x : v) u32(x);
  }
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  [[noreturn]] void fail(const std::string& what) const { throw RuntimeError(fmt::format("{} at byte {}", what, pos_)); }
  uint8_t u8(const char* what) {
    need(1, what);
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t u64(const char* what) {
    need(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  int64_t i64(const char* what) { return static_cast<int64_t>(u64(what)); }
  double f64(const char* what) { return std::bit_cast<double>(u64(what)); }
  // A count of items that take at least `min_bytes` each: never more than the rest holds.
  uint32_t count(size_t min_bytes, const char* what) {
    uint32_t n = u32(what);
    if (n > (in_.size() - pos_) / min_bytes)
      fail(fmt::format("{}: {} entries cannot fit in the {} bytes that remain", what, n, in_.size() - pos_));
    return n;
  }
  std::string str(const char* what) {
    uint32_t n = count(1, what);
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  template <class E>
  E enum8(uint8_t max, const char* what) {
    uint8_t v = u8(what);
    if (v > max) fail(fmt::format("{} has the invalid value {}", what, v));
    return static_cast<E>(v);
  }
  SizeExpr size(const char* what) {
    SizeExpr e;
    e.terms.resize(count(12, what));
    for (SizeExpr::Term& t : e.terms) {
      t.coef = i64(what);
      t.symbols.resize(count(4, what));
      for (uint32_t& s : t.symbols) s = u32(what);
    }
    return e;
  }
  std::vector<SizeExpr> sizes(const char* what) {
    std::vector<SizeExpr> v(count(4, what));
    for (SizeExpr& e : v) e = size(what);
    return v;
  }
  std::vector<uint32_t> ids(const char* what) {
    std::vector<uint32_t> v(count(4, what));
    for (uint32_t& x : v) x = u32(what);
    return v;
  }
  template <class V>
  void insert(std::map<std::string, V>& m, std::string key, V value, const char* what) {
    if (!m.emplace(key, std::move(value)).second) fail(fmt::format("{}: key '{}' appears twice", what, printable(key)));
  }
  bool done() const { return pos_ == in_.size(); }
  // The next four bytes are the little-endian u32 `v` (nothing is consumed).
  bool next_is(uint32_t v) const {
    if (in_.size() - pos_ < 4) return false;
    uint32_t x = 0;
    for (int k = 3; k >= 0; --k) x = x << 8 | static_cast<uint8_t>(in_[pos_ + static_cast<size_t>(k)]);
    return x == v;
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  void need(size_t n, const char* what) const {
    if (n > in_.size() - pos_) fail(fmt::format("the section ends inside {}", what));
  }
  std::string_view in_;
  size_t pos_ = 0;
};

void write_instr(Writer& w, const Instr& in) {
  w.u8(static_cast<uint8_t>(in.kind));
  w.u32(in.codelet);
  w.str(in.op);
  w.ids(in.inputs);
  w.ids(in.outputs);
  w.sizes(in.sizes);
  w.size(in.extent);
  w.i64(in.grain);
  w.count(in.ints.size());
  for (const auto& [k, v] : in.ints) {
    w.str(k);
    w.count(v.size());
    for (int64_t x : v) w.i64(x);
  }
  w.count(in.floats.size());
  for (const auto& [k, v] : in.floats) {
    w.str(k);
    w.f64(v);
  }
  w.str(in.where);
}

Instr read_instr(Reader& r) {
  Instr in;
  in.kind = r.enum8<Instr::Kind>(static_cast<uint8_t>(Instr::Kind::Library), "an instruction's kind");
  in.codelet = r.u32("an instruction's kernel");
  in.op = r.str("an instruction's op");
  in.inputs = r.ids("an instruction's inputs");
  in.outputs = r.ids("an instruction's outputs");
  in.sizes = r.sizes("an instruction's size table");
  in.extent = r.size("an instruction's extent");
  in.grain = r.i64("an instruction's grain");
  for (uint32_t n = r.count(8, "integer attributes"); n > 0; --n) {
    std::string key = r.str("an attribute name");
    std::vector<int64_t> v(r.count(8, "an integer attribute"));
    for (int64_t& x : v) x = r.i64("an integer attribute");
    r.insert(in.ints, std::move(key), std::move(v), "integer attributes");
  }
  for (uint32_t n = r.count(12, "float attributes"); n > 0; --n) {
    std::string key = r.str("an attribute name");
    r.insert(in.floats, std::move(key), r.f64("a float attribute"), "float attributes");
  }
  in.where = r.str("an instruction's location");
  return in;
}

void write_train(Writer& w, const TrainSettings& t) {
  w.u8(t.data ? 1 : 0);
  if (t.data) {
    w.str(t.data->kind);
    w.count(t.data->strs.size());
    for (const auto& [k, v] : t.data->strs) w.str(k), w.str(v);
    w.count(t.data->ints.size());
    for (const auto& [k, v] : t.data->ints) w.str(k), w.i64(v);
    w.count(t.data->floats.size());
    for (const auto& [k, v] : t.data->floats) w.str(k), w.f64(v);
  }
  w.str(t.optimizer);
  const Schedule& s = t.schedule;
  w.str(s.kind);
  w.f64(s.lr), w.i64(s.warmup), w.i64(s.every), w.f64(s.gamma), w.f64(s.min_lr);
  // Version 3: the numbers of the linear, polynomial and onecycle schedules.
  w.f64(s.end_factor), w.f64(s.power), w.f64(s.pct_start), w.f64(s.div_factor), w.f64(s.final_div_factor);
  for (int64_t v : {t.batch, t.epochs, t.steps, t.seed, t.accumulate, t.eval_every}) w.i64(v);
  w.f64(t.validation), w.f64(t.clip_grad_norm);
  // Version 5: the plateau schedule and early stopping (runtime/base/metric_watch.h).
  w.f64(s.factor), w.i64(s.cooldown);
  for (const MetricWatch* m : {&s.watch, &t.early_stopping}) {
    w.str(m->metric), w.u8(m->maximize), w.i64(m->patience), w.f64(m->threshold), w.u8(m->relative);
  }
}

TrainSettings read_train(Reader& r) {
  TrainSettings t;
  uint8_t has_data = r.enum8<uint8_t>(1, "the data flag");
  if (has_data) {
    DataSpec d;
    d.kind = r.str("the data kind");
    for (uint32_t n = r.count(8, "data arguments"); n > 0; --n) {
      std::string k = r.str("a data argument");
      r.insert(d.strs, std::move(k), r.str("a data argument"), "data arguments");
    }
    for (uint32_t n = r.count(12, "data arguments"); n > 0; --n) {
      std::string k = r.str("a data argument");
      r.insert(d.ints, std::move(k), r.i64("a data argument"), "data arguments");
    }
    for (uint32_t n = r.count(12, "data arguments"); n > 0; --n) {
      std::string k = r.str("a data argument");
      r.insert(d.floats, std::move(k), r.f64("a data argument"), "data arguments");
    }
    t.data = std::move(d);
  }
  t.optimizer = r.str("the optimizer");
  Schedule& s = t.schedule;
  s.kind = r.str("the schedule");
  s.lr = r.f64("the schedule"), s.warmup = r.i64("the schedule"), s.every = r.i64("the schedule");
  s.gamma = r.f64("the schedule"), s.min_lr = r.f64("the schedule");
  s.end_factor = r.f64("the schedule"), s.power = r.f64("the schedule"), s.pct_start = r.f64("the schedule");
  s.div_factor = r.f64("the schedule"), s.final_div_factor = r.f64("the schedule");
  for (int64_t* v : {&t.batch, &t.epochs, &t.steps, &t.seed, &t.accumulate, &t.eval_every}) *v = r.i64("the train settings");
  t.validation = r.f64("the train settings");
  t.clip_grad_norm = r.f64("the train settings");
  s.factor = r.f64("the schedule"), s.cooldown = r.i64("the schedule");
  for (MetricWatch* m : {&s.watch, &t.early_stopping}) {
    m->metric = r.str("a metric watch");
    m->maximize = r.enum8<uint8_t>(1, "a metric watch's mode") != 0;
    m->patience = r.i64("a metric watch"), m->threshold = r.f64("a metric watch");
    m->relative = r.enum8<uint8_t>(1, "a metric watch's threshold mode") != 0;
  }
  return t;
}

}  // namespace

std::string printable(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size() && i < 200; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  if (name.size() > 200) out += "...";
  return out;
}

std::string encode_program(const Program& p, const PlanTarget& target) {
  Writer w;
  w.str(p.model);
  w.count(p.symbols.size());
  for (const std::string& s : p.symbols) w.str(s);
  w.count(p.buffers.size());
  for (const BufferDesc& b : p.buffers) {
    w.str(b.name);
    w.u8(static_cast<uint8_t>(b.type)), w.u8(static_cast<uint8_t>(b.role)), w.u8(static_cast<uint8_t>(b.init.kind));
    w.f64(b.init.a), w.f64(b.init.b);
    w.sizes(b.shape);
    w.str(b.where);
  }
  w.count(p.codelets.size());
  for (const CodeletDesc& k : p.codelets) {
    w.str(k.name), w.str(k.source);
    w.u8(static_cast<uint8_t>(k.gpu_mapping)), w.u32(k.gpu_block), w.u32(k.nodes);
    w.count(k.operand_types.size());
    for (size_t i = 0; i < k.operand_types.size(); ++i) w.u8(static_cast<uint8_t>(k.operand_types[i])), w.sizes(k.operand_shapes[i]);
    w.u32(k.inputs), w.sizes(k.sizes), w.size(k.extent);
  }
  w.count(p.functions.size());
  for (const Function& f : p.functions) {
    w.str(f.name);
    w.u32(f.micro_batches);
    w.count(f.instrs.size());
    for (const Instr& in : f.instrs) write_instr(w, in);
    w.count(f.feeds.size());
    for (const Feed& fd : f.feeds) w.str(fd.name), w.u32(fd.micro), w.u32(fd.buffer);
    w.count(f.outputs.size());
    for (const auto& [name, b] : f.outputs) w.str(name), w.u32(b);
    w.count(f.updates.size());
    for (const auto& [from, to] : f.updates) w.u32(from), w.u32(to);
  }
  write_train(w, p.train);
  w.str(p.ptx_target);
  w.str(target.arch), w.str(target.cpu);
  w.count(target.features.size());
  for (const std::string& f : target.features) w.str(f);
  // The streams extension, only when some function has a schedule (so plans without one
  // keep their bytes, and older plans, which end here, still load).
  bool scheduled = false;
  for (const Function& f : p.functions) {
    scheduled |= f.streams != 1 || f.events != 0;
    for (const Instr& in : f.instrs) scheduled |= in.stream != 0 || !in.waits.empty() || !in.records.empty();
  }
  if (scheduled) {
    w.u32(kStreamsTag);
    w.count(p.functions.size());
    for (const Function& f : p.functions) {
      w.u32(f.streams), w.u32(f.events);
      w.count(f.instrs.size());
      for (const Instr& in : f.instrs) {
        w.u32(in.stream);
        w.ids(in.waits);
        w.ids(in.records);
      }
    }
  }
  // The index extension, only when some input has an index limit (after the streams one,
  // so either may be absent).
  size_t bounded = 0;
  for (const BufferDesc& b : p.buffers) bounded += b.index_limit != 0;
  if (bounded > 0) {
    w.u32(kIndexTag);
    w.count(bounded);
    for (size_t i = 0; i < p.buffers.size(); ++i)
      if (p.buffers[i].index_limit != 0) w.u32(static_cast<uint32_t>(i)), w.i64(p.buffers[i].index_limit), w.str(p.buffers[i].index_note);
  }
  // The ignored values, only when some index input has one (after the index limits).
  size_t ignoring = 0;
  for (const BufferDesc& b : p.buffers) ignoring += b.index_ignore.has_value();
  if (ignoring > 0) {
    w.u32(kIgnoreTag);
    w.count(ignoring);
    for (size_t i = 0; i < p.buffers.size(); ++i)
      if (p.buffers[i].index_ignore) w.u32(static_cast<uint32_t>(i)), w.i64(*p.buffers[i].index_ignore);
  }
  return std::move(w.out);
}

namespace {

CodeletDesc read_kernel(Reader& r) {
  CodeletDesc k;
  k.name = r.str("a kernel name");
  k.source = r.str("a kernel's source");
  k.gpu_mapping = r.enum8<GpuMapping>(static_cast<uint8_t>(GpuMapping::Block), "a kernel's GPU mapping");
  k.gpu_block = r.u32("a kernel's GPU block");
  k.nodes = r.u32("a kernel's node count");
  const uint32_t operands = r.count(5, "a kernel's operands");
  for (uint32_t i = 0; i < operands; ++i) {
    k.operand_types.push_back(r.enum8<ElemType>(static_cast<uint8_t>(ElemType::Bool), "a kernel operand's element type"));
    k.operand_shapes.push_back(r.sizes("a kernel operand's shape"));
  }
  k.inputs = r.u32("a kernel's input count");
  k.sizes = r.sizes("a kernel's size table");
  k.extent = r.size("a kernel's extent");
  return k;
}

// The optional index limits ("INDX") and ignored values ("IGNR") after the target.
void read_index_extensions(Reader& r, Program& p) {
  if (r.next_is(kIndexTag)) {
    r.u32("the index extension");
    for (uint32_t n = r.count(16, "the index limits"); n > 0; --n) {
      const uint32_t b = r.u32("an index limit's buffer");
      if (b >= p.buffers.size()) r.fail(fmt::format("an index limit names buffer {}, but the program has {}", b, p.buffers.size()));
      if (p.buffers[b].index_limit != 0) r.fail(fmt::format("buffer {} has two index limits", b));
      p.buffers[b].index_limit = r.i64("an index limit");
      p.buffers[b].index_note = r.str("an index limit's note");
    }
  }
  if (r.next_is(kIgnoreTag)) {
    r.u32("the ignored indices");
    for (uint32_t n = r.count(12, "the ignored indices"); n > 0; --n) {
      const uint32_t b = r.u32("an ignored index's buffer");
      if (b >= p.buffers.size()) r.fail(fmt::format("an ignored index names buffer {}, but the program has {}", b, p.buffers.size()));
      if (p.buffers[b].index_ignore) r.fail(fmt::format("buffer {} has two ignored indices", b));
      p.buffers[b].index_ignore = r.i64("an ignored index");
    }
  }
}

}  // namespace

void decode_program(std::string_view bytes, Program& p, PlanTarget& target) {
  Reader r(bytes);
  p.model = r.str("the model name");
  p.symbols.resize(r.count(4, "the symbols"));
  for (std::string& s : p.symbols) s = r.str("a symbol");
  p.buffers.resize(r.count(31, "the buffers"));
  for (BufferDesc& b : p.buffers) {
    b.name = r.str("a buffer name");
    b.type = r.enum8<ElemType>(static_cast<uint8_t>(ElemType::Bool), "a buffer's element type");
    b.role = r.enum8<BufferRole>(static_cast<uint8_t>(BufferRole::Buffer), "a buffer's role");
    b.init.kind = r.enum8<Init::Kind>(static_cast<uint8_t>(Init::Kind::Constant), "a buffer's initializer");
    b.init.a = r.f64("a buffer's initializer");
    b.init.b = r.f64("a buffer's initializer");
    b.shape = r.sizes("a buffer's shape");
    b.where = r.str("a buffer's declaration");
  }
  p.codelets.resize(r.count(33, "the kernels"));
  for (CodeletDesc& k : p.codelets) k = read_kernel(r);
  p.functions.resize(r.count(24, "the functions"));
  for (Function& f : p.functions) {
    f.name = r.str("a function name");
    f.micro_batches = r.u32("a function's micro-batches");
    f.instrs.resize(r.count(45, "a function's instructions"));
    for (Instr& in : f.instrs) in = read_instr(r);
    f.feeds.resize(r.count(12, "a function's feeds"));
    for (Feed& fd : f.feeds) {
      fd.name = r.str("a feed name");
      fd.micro = r.u32("a feed's micro-batch");
      fd.buffer = r.u32("a feed's buffer");
    }
    f.outputs.resize(r.count(8, "a function's outputs"));
    for (auto& [name, b] : f.outputs) {
      name = r.str("an output name");
      b = r.u32("an output's buffer");
    }
    f.updates.resize(r.count(8, "a function's updates"));
    for (auto& [from, to] : f.updates) {
      from = r.u32("an update");
      to = r.u32("an update");
    }
  }
  p.train = read_train(r);
  p.ptx_target = r.str("the PTX target");
  target.arch = r.str("the target architecture");
  target.cpu = r.str("the target CPU");
  target.features.resize(r.count(4, "the target features"));
  for (std::string& f : target.features) f = r.str("a target feature");
  if (r.next_is(kStreamsTag)) {
    r.u32("the streams extension");
    if (r.count(12, "the functions' streams") != p.functions.size())
      r.fail("the streams extension does not list every function once");
    for (Function& f : p.functions) {
      f.streams = r.u32("a function's streams");
      f.events = r.u32("a function's events");
      if (r.count(12, "the instructions' streams") != f.instrs.size())
        r.fail(fmt::format("the streams extension does not list every instruction of function '{}' once", printable(f.name)));
      for (Instr& in : f.instrs) {
        in.stream = r.u32("an instruction's stream");
        in.waits = r.ids("an instruction's waits");
        in.records = r.ids("an instruction's records");
      }
    }
  }
  read_index_extensions(r, p);
  if (!r.done()) r.fail(fmt::format("{} unexpected bytes after the program", r.remaining()));
}

}  // namespace plan_detail

}  // namespace modelc::rt

// Session: parameter initialisation, feeding (micro-batch split, runtime scalars) and the
// parameter/state accessors of the embedding API. Whatever differs by device (the
// executors, the device copies, memory, profiling) is the backend's
// (runtime/execution/backend.h), chosen in choose_device.
#include "runtime/session/session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "kernels/cpu/gemm.h"
#include "runtime/base/bytes.h"
#include "runtime/base/philox.h"

namespace modelc::rt {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::vector<int64_t> constant_shape(const BufferDesc& d) {
  std::vector<int64_t> s;
  for (const SizeExpr& e : d.shape) {
    if (!e.is_constant()) return {-1};
    s.push_back(e.eval({}));
  }
  return s;
}

}  // namespace

void init_parameter(HostTensor& t, const Init& init, uint64_t seed, const std::string& name, ThreadPool& pool) {
  if (t.type != ElemType::F32 && init.kind != Init::Kind::Zeros)
    throw RuntimeError(fmt::format("parameter '{}': only f32 parameters can be initialised with ones/constant/normal/uniform, "
                                   "it is {}", name, dtype_name(t.type)));
  if (init.kind == Init::Kind::Zeros) {
    std::fill(t.bytes.begin(), t.bytes.end(), 0);
    return;
  }
  float* p = t.f32();
  if (init.kind == Init::Kind::Ones || init.kind == Init::Kind::Constant) {  // no random draws
    std::fill(p, p + t.numel(), init.kind == Init::Kind::Ones ? 1.0f : static_cast<float>(init.a));
    return;
  }
  PhiloxKey key = dropout_key(seed, fnv1a(name));
  const double a = init.a, b = init.b;
  Init::Kind kind = init.kind;
  pool.parallel_for(t.numel(), 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      auto u = static_cast<uint64_t>(i);
      PhiloxCounter w = philox4x32_10({static_cast<uint32_t>(u), static_cast<uint32_t>(u >> 32), 0x1A17u, 0u}, key);
      double v = 0;
      if (kind == Init::Kind::Uniform) {
        v = a + (b - a) * (static_cast<double>(w[0]) / 4294967296.0);
        // [low, high) in f32: a double just below high can round up to it.
        if (b > a && static_cast<float>(v) >= static_cast<float>(b))
          v = std::nextafter(static_cast<float>(b), static_cast<float>(a));
      } else if (kind == Init::Kind::Normal) {
        // Box-Muller on two 32-bit uniforms, u1 in (0, 1] so the log is finite.
        double u1 = (static_cast<double>(w[0]) + 1.0) / 4294967296.0;
        double u2 = static_cast<double>(w[1]) / 4294967296.0;
        v = a + b * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      }
      p[i] = static_cast<float>(v);
    }
  });
}

namespace {

// The bytes of all parameters and optimizer state of `p` (saturating), for messages.
double persistent_bytes(const Program& p) {
  double total = 0;
  for (const BufferDesc& d : p.buffers) {
    if (!is_persistent(d.role)) continue;
    double n = static_cast<double>(dtype_bytes(d.type));
    for (const SizeExpr& e : d.shape) n *= e.is_constant() ? static_cast<double>(e.eval({})) : 0.0;
    total += n;
  }
  return total;
}

// A parameter's or state's host tensor; too large a one is an error naming it, its shape
// and size, and what the whole model needs (not std::bad_alloc).
HostTensor allocate_persistent(const Program& p, const BufferDesc& d, const std::vector<int64_t>& shape,
                               const char* what) {
  double bytes = static_cast<double>(dtype_bytes(d.type));
  for (int64_t x : shape) bytes *= static_cast<double>(x);
  auto refuse = [&] {
    return RuntimeError(fmt::format("model '{}': cannot allocate {} ({:.0f} bytes) for {} '{}' {}{}{}: not enough "
                                    "memory (the model's parameters and optimizer state need {} in all)",
                                    p.model, format_bytes(static_cast<int64_t>(std::min(bytes, 9e18))), bytes, what,
                                    d.name, dtype_name(d.type), shape_str(shape),
                                    d.where.empty() ? "" : " (declared at " + d.where + ")",
                                    format_bytes(static_cast<int64_t>(std::min(persistent_bytes(p), 9e18)))));
  };
  if (bytes > 9e18) throw refuse();
  try {
    return HostTensor(d.type, shape);
  } catch (const std::bad_alloc&) {
    throw refuse();
  } catch (const std::length_error&) {
    throw refuse();
  }
}

}  // namespace

Session::Session(std::shared_ptr<const Program> program, SessionOptions options)
    : program_(std::move(program)),
      options_(options),
      last_grad_norm_(std::numeric_limits<float>::quiet_NaN()), pool_(options.threads) {
  if (!program_) throw RuntimeError("Session: no program");
  const Program& p = *program_;
  seed_ = options.seed ? *options.seed : static_cast<uint64_t>(p.train.seed);
  total_steps_ = options.total_steps > 0 ? options.total_steps : p.train.steps;
  kernels::set_gemm_threading(kernels::GemmThreading::Pool, pool_.size());
  persistent_.resize(p.buffers.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const BufferDesc& d = p.buffers[b];
    if (!is_persistent(d.role)) continue;
    std::vector<int64_t> shape = constant_shape(d);
    const char* what = persistent_kind(d.role);
    for (int64_t x : shape)
      if (x < 0) {
        std::string expr = "[";
        for (size_t i = 0; i < d.shape.size(); ++i) expr += (i ? "," : "") + d.shape[i].str(p.symbols);
        expr += "]";
        throw RuntimeError(fmt::format("model '{}': {} '{}' has shape {}, which is not constant", p.model, what, d.name,
                                       expr));
      }
    persistent_[b] = allocate_persistent(p, d, shape, what);
    if (d.role == BufferRole::Param || d.role == BufferRole::Buffer) init_parameter(persistent_[b], d.init, seed_, d.name, pool_);
  }
  choose_device();
}

// The backend runs on persistent_, initialised by then.
void Session::choose_device() {
  backend_ = make_backend(*program_, persistent_, pool_,
                          BackendOptions{.device = options_.device, .arena = options_.arena,
                                         .memory_limit = options_.memory_limit, .allow_tf32 = options_.allow_tf32,
                                         .flush_subnormals = options_.flush_subnormals},
                          device_note_);
}

void Session::set_profiling(bool on) { backend_->set_profiling(on); }

std::vector<cuda::InstrTime> Session::profile(const std::string& fn) const { return backend_->profile(fn); }

std::string Session::device() const { return backend_->description(); }

Session::~Session() = default;

double Session::current_lr() const { return program_->train.schedule.lr_at(step_, total_steps_) * lr_factor_; }

void Session::set_lr_factor(double factor) {
  if (!(factor > 0) || std::isinf(factor))
    throw RuntimeError(fmt::format("the learning rate's factor must be a finite number greater than 0, got {}", factor));
  lr_factor_ = factor;
}

void Session::set_step(int64_t step) {
  if (step < 0) throw RuntimeError(fmt::format("the step to continue from must be 0 or more, got {}", step));
  step_ = step;
}

namespace {

// ", and not the ignored index -100" when the input has one.
std::string ignore_note(const BufferDesc& d) {
  return d.index_ignore ? fmt::format(", and not the ignored index {}", *d.index_ignore) : "";
}

// An index input (rt::BufferDesc::index_limit) holding a value outside [0, limit) is the
// caller's error, named with its position; a kernel would read out of bounds or return NaN.
// A tensor of another type or size is left to the backend's own checks.
void check_indices(const std::string& fn, const BufferDesc& d, const HostTensor& t) {
  if (d.index_limit <= 0 || t.type != ElemType::I32 || t.bytes.size() < static_cast<size_t>(t.numel()) * 4) return;
  const int32_t* v = t.i32();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (index_accepted(v[i], d.index_limit, d.index_ignore)) continue;
    std::vector<int64_t> at(t.shape.size());
    for (size_t k = t.shape.size(), rest = static_cast<size_t>(i); k-- > 0;) {
      const auto n = static_cast<size_t>(std::max<int64_t>(t.shape[k], 1));
      at[k] = static_cast<int64_t>(rest % n);
      rest /= n;
    }
    throw RuntimeError(fmt::format("function '{}': input '{}' holds {} at {}, outside [0, {}){}: {}", fn, d.name, v[i],
                                   shape_str(at), d.index_limit, ignore_note(d), d.index_note));
  }
}

}  // namespace

std::unique_ptr<BackendRun> Session::start(const std::string& name, const std::map<std::string, HostTensor>& batch) {
  const Program& p = *program_;
  const Function* fnp = p.function(name);
  if (!fnp) throw RuntimeError(fmt::format("model '{}' has no function '{}'", p.model, name));
  const Function& fn = *fnp;
  // Names the program does not know are misspellings.
  for (const auto& [in, t] : batch) {
    bool known = false;
    for (const BufferDesc& d : p.buffers) known = known || (d.role == BufferRole::Input && d.name == in);
    for (const Function& f : p.functions)
      for (const Feed& fd : f.feeds) known = known || fd.name == in;
    if (!known || in.starts_with("$"))
      throw RuntimeError(fmt::format("function '{}': the model has no input '{}'", name, in));
  }
  uint32_t mb = std::max<uint32_t>(fn.micro_batches, 1);
  std::map<std::string, std::vector<HostTensor>> parts;  // split inputs, when mb > 1
  std::vector<HostTensor> scalars;
  scalars.reserve(fn.feeds.size());
  std::vector<const HostTensor*> feeds;
  for (const Feed& f : fn.feeds) {
    if (f.name.starts_with("$")) {
      double v = 0;
      if (f.name == "$lr") v = current_lr();
      else if (f.name == "$t") v = static_cast<double>(step_ + 1);
      else throw RuntimeError(fmt::format("function '{}': unknown runtime input '{}'", name, f.name));
      std::vector<int64_t> shape = constant_shape(p.buffers[f.buffer]);
      if (!shape.empty() && shape[0] < 0) shape.clear();
      HostTensor t(ElemType::F32, shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(v);
      scalars.push_back(std::move(t));
      feeds.push_back(&scalars.back());
      continue;
    }
    auto it = batch.find(f.name);
    if (it == batch.end()) throw RuntimeError(fmt::format("function '{}': missing input '{}'", name, f.name));
    const HostTensor& t = it->second;
    if (f.micro == 0) check_indices(name, p.buffers[f.buffer], t);  // the caller's whole tensor, once per input
    if (mb == 1) {
      feeds.push_back(&t);
      continue;
    }
    auto& ps = parts[f.name];
    if (ps.empty()) {
      if (t.bytes.size() != static_cast<size_t>(t.numel()) * dtype_bytes(t.type))
        throw RuntimeError(fmt::format("function '{}': input '{}' holds {} bytes, but its shape {} needs {}", name, f.name,
                                       t.bytes.size(), t.shape_str(), static_cast<size_t>(t.numel()) * dtype_bytes(t.type)));
      if (t.shape.empty() || t.shape[0] % mb != 0)
        throw RuntimeError(fmt::format("function '{}': input '{}' has shape {}, whose first dim does not split into {} "
                                       "micro-batches", name, f.name, t.shape_str(), mb));
      std::vector<int64_t> s = t.shape;
      s[0] /= mb;
      for (uint32_t m = 0; m < mb; ++m) {
        HostTensor part(t.type, s);
        if (!part.bytes.empty()) std::memcpy(part.bytes.data(), t.bytes.data() + m * part.bytes.size(), part.bytes.size());
        ps.push_back(std::move(part));
      }
    }
    if (f.micro >= mb)
      throw RuntimeError(fmt::format("function '{}': feed '{}' names micro-batch {} of {}", name, f.name, f.micro, mb));
    feeds.push_back(&ps[f.micro]);
  }
  std::map<std::string, int64_t> symbols{{"$seed", static_cast<int64_t>(seed_)}, {"$step", step_}};
  return backend_->start(fn, feeds, symbols);
}

std::map<std::string, HostTensor> Session::run(const std::string& name, const std::map<std::string, HostTensor>& batch) {
  return start(name, batch)->finish();
}

float Session::train_step(const std::map<std::string, HostTensor>& batch) {
  if (!pending_.empty())
    throw RuntimeError(fmt::format("Session::train_step: {} submitted step{} not finished; call finish_step() first",
                                   pending_.size(), pending_.size() == 1 ? " is" : "s are"));
  submit_step(batch);
  return finish_step().loss;
}

void Session::submit_step(const std::map<std::string, HostTensor>& batch) {
  pending_.push_back(start("train_step", batch));
  ++step_;
}

StepResult Session::finish_step() {
  if (pending_.empty()) throw RuntimeError("Session::finish_step: no step was submitted");
  std::unique_ptr<BackendRun> s = std::move(pending_.front());
  pending_.pop_front();
  StepResult r;
  r.outputs = s->finish();
  auto it = r.outputs.find("loss");
  if (it == r.outputs.end() || it->second.type != ElemType::F32 || it->second.numel() != 1)
    throw RuntimeError("function 'train_step' has no f32 scalar output 'loss'");
  r.loss = it->second.f32()[0];
  auto gn = r.outputs.find("grad_norm");
  r.grad_norm = gn != r.outputs.end() && gn->second.type == ElemType::F32 && gn->second.numel() == 1
                    ? gn->second.f32()[0] : std::numeric_limits<float>::quiet_NaN();
  last_grad_norm_ = r.grad_norm;
  return r;
}

std::map<std::string, HostTensor> Session::eval(const std::map<std::string, HostTensor>& batch) {
  return run("eval", batch);
}

std::map<std::string, HostTensor> Session::predict(const std::map<std::string, HostTensor>& batch) {
  if (!program_->function("predict"))
    throw RuntimeError(fmt::format("model '{}' was compiled without a predict function (compile it with modelc "
                                   "--inference, or --output NAME)", program_->model));
  return run("predict", batch);
}

MemoryUsage Session::memory_usage() const {
  MemoryUsage u = backend_->memory_usage();
  for (const HostTensor& t : persistent_) u.persistent += static_cast<int64_t>(t.bytes.size());
  return u;
}

std::string Session::memory_summary() const { return backend_->memory_summary(); }

void Session::reset_peak_memory() { backend_->reset_peak_memory(); }

uint32_t Session::persistent_id(const std::string& name, BufferRole role) const {
  for (size_t b = 0; b < program_->buffers.size(); ++b)
    if (program_->buffers[b].role == role && program_->buffers[b].name == name) return static_cast<uint32_t>(b);
  throw RuntimeError(fmt::format("model '{}' has no {} '{}'", program_->model,
                                 role == BufferRole::State ? "optimizer state" : persistent_kind(role), name));
}

static std::vector<std::string> names_of(const Program& p, BufferRole role) {
  std::vector<std::string> r;
  for (const BufferDesc& d : p.buffers)
    if (d.role == role) r.push_back(d.name);
  return r;
}

std::vector<std::string> Session::param_names() const { return names_of(*program_, BufferRole::Param); }
std::vector<std::string> Session::state_names() const { return names_of(*program_, BufferRole::State); }
std::vector<std::string> Session::buffer_names() const { return names_of(*program_, BufferRole::Buffer); }
HostTensor Session::param(const std::string& name) const {
  const uint32_t b = persistent_id(name, BufferRole::Param);
  return backend_->read_persistent(b);
}
HostTensor Session::state(const std::string& name) const {
  const uint32_t b = persistent_id(name, BufferRole::State);
  return backend_->read_persistent(b);
}

static void assign(HostTensor& dst, const HostTensor& src, const char* what, const std::string& name) {
  if (src.type != dst.type || src.shape != dst.shape)
    throw RuntimeError(fmt::format("set_{} '{}': got {}{}, expected {}{}", what, name, dtype_name(src.type), src.shape_str(),
                                   dtype_name(dst.type), dst.shape_str()));
  if (src.bytes.size() != dst.bytes.size())
    throw RuntimeError(fmt::format("set_{} '{}': the tensor holds {} bytes, its shape {} needs {}", what, name,
                                   src.bytes.size(), src.shape_str(), dst.bytes.size()));
  std::memcpy(dst.bytes.data(), src.bytes.data(), dst.bytes.size());  // in place: executors hold the pointer
}

void Session::set_param(const std::string& name, const HostTensor& value) {
  const uint32_t b = persistent_id(name, BufferRole::Param);
  assign(persistent_[b], value, "param", name);
  backend_->write_persistent(b);
}
void Session::set_state(const std::string& name, const HostTensor& value) {
  const uint32_t b = persistent_id(name, BufferRole::State);
  assign(persistent_[b], value, "state", name);
  backend_->write_persistent(b);
}
HostTensor Session::buffer(const std::string& name) const {
  return backend_->read_persistent(persistent_id(name, BufferRole::Buffer));
}
void Session::set_buffer(const std::string& name, const HostTensor& value) {
  const uint32_t b = persistent_id(name, BufferRole::Buffer);
  assign(persistent_[b], value, "buffer", name);
  backend_->write_persistent(b);
}

}  // namespace modelc::rt

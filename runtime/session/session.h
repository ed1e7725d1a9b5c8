// Session: the embedding API of the runtime. A Session runs a compiled Program on a CUDA
// device or the CPU (SessionOptions::device): it owns the parameters and optimizer state,
// initialises them deterministically from a seed, and runs training steps and evaluations
// on batches the caller feeds.
//
//   auto program = std::make_shared<const rt::Program>(...);   // compiled or loaded
//   rt::Session s(program, {.threads = 4});
//   for (...) {
//     float loss = s.train_step({{"images", images}, {"labels", labels}});
//   }
//   auto out = s.eval({{"images", test_images}, {"labels", test_labels}});
//   out["loss"].f32()[0] ...
//
// Determinism: a parameter's initial values depend only on the seed, the parameter's name
// and its Init (a counter-based Philox stream keyed by both), never on the other
// parameters or on the thread count. All errors are rt::RuntimeError with a message that
// names the function, the input or parameter, and what is wrong. A Session is not
// thread-safe: call it from one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/execution/backend.h"
#include "runtime/execution/cpu/executor.h"
#include "runtime/device/cpu/thread_pool.h"
#include "runtime/base/error.h"
#include "runtime/device/memory/caching_allocator.h"
#include "runtime/base/program.h"
#include "runtime/base/tensor.h"

namespace modelc::rt {

// What a training step returned (Session::finish_step).
struct StepResult {
  float loss = 0;
  float grad_norm = 0;  // NaN when the program has no `grad_norm` output
  std::map<std::string, HostTensor> outputs;  // all of train_step's outputs, `loss` too
};

struct SessionOptions {
  // Worker threads for the runtime's parallel loops, which also split the work of
  // OpenBLAS and oneDNN (both run single-threaded inside them); 0: one per hardware thread.
  int threads = 0;
  // The run seed: parameter initialisation, and "$seed" for dropout. Unset: the Program's
  // train.seed.
  std::optional<uint64_t> seed;
  // The length of the run, for the learning-rate schedule (cosine decays over it). 0: the
  // Program's train.steps.
  int64_t total_steps = 0;
  // Lay each function's temporaries out in one arena by its static memory plan
  // (runtime/execution/memory_plan.h); false: one allocation per buffer.
  bool arena = true;
  // The most bytes the session's allocator may take from the system at once (0: no
  // limit). What the runtime allocates per step (the arenas) comes from a caching
  // allocator (runtime/device/memory/caching_allocator.h) over host memory with this limit; a
  // step that needs more ends with a RuntimeError that carries its memory summary.
  size_t memory_limit = 0;
  // Where to run: "auto", "cpu", "cuda" or "cuda:N" (runtime/device/cuda/device.h). auto takes
  // cuda:0 when there is a driver, a device, and the program can run there (it has GPU code
  // and every library op has a CUDA implementation), else the CPU; device_note() says why.
  // An explicit cuda that cannot be used is an error saying why.
  std::string device = "auto";
  // CUDA: let f32 matmuls use TF32 tensor cores (off by default, as in PyTorch).
  bool allow_tf32 = false;
  // CPU: flush subnormal floats to zero while a step runs (results below 2^-126 in f32 and
  // bf16 become +-0, and such operands read as 0), as torch.set_flush_denormal(True) does;
  // false keeps IEEE gradual underflow. The caller's threads keep their own mode
  // (docs/precision.md, runtime/device/cpu/float_env.h).
  bool flush_subnormals = true;
};

// MemoryUsage (what a session holds, and the most it held at once) is the backend's:
// runtime/execution/backend.h.

class Session {
 public:
  // Allocates and initialises every parameter (from its Init) and optimizer state (zeros).
  // Throws when the program is null or a persistent buffer's shape depends on a symbol.
  explicit Session(std::shared_ptr<const Program> program, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // One training step: runs the function "train_step" on `batch` (input name -> tensor).
  // Each input is split along dim 0 into Function::micro_batches equal parts when the step
  // accumulates gradients over micro-batches (an error unless the batch divides evenly).
  // The runtime scalars are fed as f32: "$lr" = train.schedule.lr_at(step, total_steps),
  // "$t" = step + 1; the symbols "$seed" and "$step" are bound to seed() and step().
  // Returns the `loss` output and increments step(). Inputs the program does not have are
  // an error (a misspelt name would otherwise be ignored silently).
  float train_step(const std::map<std::string, HostTensor>& batch);

  // Pipelined training: submit_step queues a step and returns; finish_step waits for the
  // oldest step submitted and returns what it computed. On CUDA the step runs while the
  // caller prepares the next batch, and the next submit_step's inputs go up on the copy
  // stream (from pinned memory) while this step computes:
  //   s.submit_step(b0);
  //   for (i = 1..) { s.submit_step(b_i); StepResult r = s.finish_step(); ... }
  //   s.finish_step();
  // On the CPU submit_step runs the step at once. step() counts the submitted steps (the
  // "$t" and "$lr" a step is fed are fixed when it is submitted); the batch may be reused
  // when submit_step returns. train_step, eval and the accessors work with steps in flight
  // (they are ordered after them) except that train_step is an error then.
  void submit_step(const std::map<std::string, HostTensor>& batch);
  StepResult finish_step();
  size_t steps_in_flight() const { return pending_.size(); }

  // Runs the function "eval" on `batch` (step() is bound as "$step" but not incremented)
  // and returns all its outputs by name.
  std::map<std::string, HostTensor> eval(const std::map<std::string, HostTensor>& batch);

  // Runs the function "predict" (the eval-mode forward pass without the target input and the
  // loss, compiler/passes/predict.h) and returns its outputs by name; an error when the
  // program has none.
  std::map<std::string, HostTensor> predict(const std::map<std::string, HostTensor>& batch);

  // Parameters, in the Program's buffer order. param() returns a copy; set_param() copies
  // in and checks the type and shape.
  std::vector<std::string> param_names() const;
  HostTensor param(const std::string& name) const;
  void set_param(const std::string& name, const HostTensor& value);

  // Buffers (a model's state that is not trained: batch norm's running statistics), the
  // same way. They belong with the params wherever a trained model is saved or loaded.
  std::vector<std::string> buffer_names() const;
  HostTensor buffer(const std::string& name) const;
  void set_buffer(const std::string& name, const HostTensor& value);

  // Optimizer state (moments and the like), the same way.
  std::vector<std::string> state_names() const;
  HostTensor state(const std::string& name) const;
  void set_state(const std::string& name, const HostTensor& value);

  int64_t step() const { return step_; }
  void set_step(int64_t step);  // e.g. after loading a checkpoint; must be >= 0
  // The `grad_norm` output of the last train_step (before clipping), or NaN when the
  // program has none or no step ran yet.
  float last_grad_norm() const { return last_grad_norm_; }
  uint64_t seed() const { return seed_; }
  int threads() const { return pool_.size(); }
  // "cpu", or the CUDA device ("cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)").
  std::string device() const;
  bool on_cuda() const { return backend_->is_cuda(); }
  // Why auto chose the CPU ("" when it chose CUDA or the CPU was asked for).
  const std::string& device_note() const { return device_note_; }
  int64_t total_steps() const { return total_steps_; }
  const Program& program() const { return *program_; }
  // The learning rate train_step feeds at the current step: the schedule's, times
  // lr_factor().
  double current_lr() const;
  // A factor on every step's learning rate from now on (1 at the start): what the plateau
  // schedule has reduced it to (runtime/base/metric_watch.h). It must be finite and > 0.
  void set_lr_factor(double factor);
  double lr_factor() const { return lr_factor_; }

  // Per-instruction timing of the functions run from now on (CUDA: events around each
  // kernel and library call on its stream; CPU: the wall time of each instruction, its
  // worker threads included), and the figures of function `fn` so far (empty before it
  // ran). Turning it on starts the figures afresh; off, nothing is timed.
  void set_profiling(bool on);
  std::vector<cuda::InstrTime> profile(const std::string& fn) const;

  // Memory: usage and peak, the allocator's summary table, and a new peak window (the
  // input peak and the allocator's peaks restart from what is held now).
  MemoryUsage memory_usage() const;
  std::string memory_summary() const;
  void reset_peak_memory();

 private:
  void choose_device();
  std::unique_ptr<BackendRun> start(const std::string& fn, const std::map<std::string, HostTensor>& batch);
  std::map<std::string, HostTensor> run(const std::string& fn, const std::map<std::string, HostTensor>& batch);
  uint32_t persistent_id(const std::string& name, BufferRole role) const;

  std::shared_ptr<const Program> program_;
  SessionOptions options_;
  uint64_t seed_ = 0;
  int64_t total_steps_ = 0;
  double lr_factor_ = 1.0;
  int64_t step_ = 0;
  float last_grad_norm_;
  ThreadPool pool_;
  // By buffer id: params and state; the backend's store (runtime/execution/backend.h: on the
  // CPU the values, on CUDA the initial values and the staging area of set_param/set_state).
  std::vector<HostTensor> persistent_;
  std::string device_note_;
  // Where the functions run (runtime/execution/backend.h); declared after what it runs on
  // (the program, the pool, the store), which outlive it.
  std::unique_ptr<Backend> backend_;
  std::deque<std::unique_ptr<BackendRun>> pending_;  // submitted steps, oldest first (destroyed before backend_)
};

// The initial values of a parameter: a pure function of (init, seed, name) and the shape.
// Exposed for tests and for tools that re-create a parameter.
void init_parameter(HostTensor& t, const Init& init, uint64_t seed, const std::string& name, ThreadPool& pool);

}  // namespace modelc::rt

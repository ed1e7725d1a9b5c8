// How this thread's floating-point unit treats subnormal floats: flushed (a subnormal result
// becomes +-0 and a subnormal operand reads as +-0: x86-64's MXCSR FTZ and DAZ bits, AArch64's
// FPCR.FZ) or kept (IEEE 754 gradual underflow, the C++ default).
//
// The runtime flushes by default (SessionOptions::flush_subnormals, docs/precision.md): on
// many CPUs every subnormal operand or result costs a slow microcode assist, and an
// optimizer's moments decay into subnormals for weights that never get a gradient. The mode
// is per thread, so the runtime sets it only for the length of a run (SubnormalScope on the
// caller's thread, restored after) and its worker threads take the submitting thread's mode
// for each job (runtime/device/cpu/thread_pool.h, runtime/execution/cpu/streams.h): an
// embedding application's own threads keep their mode.
#pragma once

namespace modelc::rt {

// False where this build cannot change the mode (then subnormals are always kept).
bool can_flush_subnormals();
bool subnormals_flushed();  // this thread's mode
void set_subnormals_flushed(bool flush);

// Sets this thread's mode for the scope's life and restores the previous one after.
class SubnormalScope {
 public:
  explicit SubnormalScope(bool flush) : saved_(subnormals_flushed()) {
    if (flush != saved_) set_subnormals_flushed(flush);
  }
  ~SubnormalScope() {
    if (subnormals_flushed() != saved_) set_subnormals_flushed(saved_);
  }
  SubnormalScope(const SubnormalScope&) = delete;
  SubnormalScope& operator=(const SubnormalScope&) = delete;

 private:
  bool saved_;
};

}  // namespace modelc::rt

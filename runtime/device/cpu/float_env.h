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

#include <cstdint>

namespace modelc::rt {

// False where this build cannot change the mode (then subnormals are always kept).
bool can_flush_subnormals();
bool subnormals_flushed();  // this thread's mode: true when results and operands are both flushed
void set_subnormals_flushed(bool flush);

// This thread's subnormal control bits as they are (an application may have set one of the
// two), to be given back exactly or to another thread.
struct SubnormalState {
  uint64_t bits = 0;
};
SubnormalState subnormal_state();
void set_subnormal_state(SubnormalState s);

// Sets this thread's mode for the scope's life, and then gives back the bits it found.
class SubnormalScope {
 public:
  explicit SubnormalScope(bool flush) : saved_(subnormal_state()) { set_subnormals_flushed(flush); }
  explicit SubnormalScope(SubnormalState s) : saved_(subnormal_state()) { set_subnormal_state(s); }
  ~SubnormalScope() { set_subnormal_state(saved_); }
  SubnormalScope(const SubnormalScope&) = delete;
  SubnormalScope& operator=(const SubnormalScope&) = delete;

 private:
  SubnormalState saved_;
};

}  // namespace modelc::rt

// This thread's subnormal mode, by architecture.
#include "runtime/device/cpu/float_env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace modelc::rt {

#if defined(__x86_64__) || defined(__i386__)
namespace {
constexpr unsigned kFtz = 1u << 15;  // MXCSR flush-to-zero: subnormal results become 0
constexpr unsigned kDaz = 1u << 6;   // MXCSR denormals-are-zero: subnormal operands read as 0
}  // namespace

bool can_flush_subnormals() { return true; }
bool subnormals_flushed() { return (_mm_getcsr() & (kFtz | kDaz)) == (kFtz | kDaz); }
void set_subnormals_flushed(bool flush) { set_subnormal_state({flush ? kFtz | kDaz : 0u}); }
SubnormalState subnormal_state() { return {_mm_getcsr() & (kFtz | kDaz)}; }
void set_subnormal_state(SubnormalState s) {
  const unsigned csr = _mm_getcsr();
  const unsigned want = (csr & ~(kFtz | kDaz)) | (static_cast<unsigned>(s.bits) & (kFtz | kDaz));
  if (want != csr) _mm_setcsr(want);
}
#elif defined(__aarch64__)
namespace {
constexpr uint64_t kFz = uint64_t{1} << 24;  // FPCR.FZ: subnormal operands and results are 0
uint64_t fpcr() {
  uint64_t v;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
  return v;
}
}  // namespace

bool can_flush_subnormals() { return true; }
bool subnormals_flushed() { return (fpcr() & kFz) != 0; }
void set_subnormals_flushed(bool flush) { set_subnormal_state({flush ? kFz : 0}); }
SubnormalState subnormal_state() { return {fpcr() & kFz}; }
void set_subnormal_state(SubnormalState s) {
  const uint64_t v = fpcr(), want = (v & ~kFz) | (s.bits & kFz);
  if (want != v) __asm__ __volatile__("msr fpcr, %0" : : "r"(want));
}
#else
bool can_flush_subnormals() { return false; }
bool subnormals_flushed() { return false; }
void set_subnormals_flushed(bool) {}
SubnormalState subnormal_state() { return {}; }
void set_subnormal_state(SubnormalState) {}
#endif

}  // namespace modelc::rt

// Whether this test program runs under a sanitizer (MODELC_SANITIZE: AddressSanitizer and
// UndefinedBehaviorSanitizer; MODELC_TSAN: ThreadSanitizer), where code built at -O0 with
// instrumentation runs 10 to 40 times slower. The few tests whose point is scale (a 10 MB
// model file, 100 000 nested calls) or many random repetitions run smaller or fewer there:
// the same code paths and the same assertions, a size the sanitizer build can afford. The
// normal build runs them at full size.
#pragma once

namespace modelc::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// `full` in the normal build, `sanitized` under a sanitizer.
template <typename T>
constexpr T full_or(T full, T sanitized) {
  return kSanitized ? sanitized : full;
}

}  // namespace modelc::test

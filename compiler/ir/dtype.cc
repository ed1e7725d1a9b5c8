#include "compiler/ir/dtype.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace modelc {

// Round-to-nearest-even of a float to `mant` explicit mantissa bits and exponent range
// [emin, emax] (normal numbers), with subnormals and overflow to infinity.
static double round_float(double x, int mant, int emin, int emax) {
  if (!std::isfinite(x) || x == 0) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1)
  int exp = e - 1;               // |x| = 1.xxx * 2^exp
  if (exp < emin) exp = emin;    // subnormal: fixed quantum
  double quantum = std::ldexp(1.0, exp - mant);
  double r = std::nearbyint(x / quantum) * quantum;  // default rounding: to nearest even
  double maxv = std::ldexp(2.0 - std::ldexp(1.0, -mant), emax);
  if (std::fabs(r) > maxv) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

double round_to_dtype(double x, DType t) {
  switch (t) {
    case DType::F32: return static_cast<double>(static_cast<float>(x));
    case DType::F16: return round_float(x, 10, -14, 15);
    case DType::BF16: return round_float(x, 7, -126, 127);
    case DType::I32: {
      if (std::isnan(x)) return 0;
      double v = std::trunc(x);
      if (v > 2147483647.0) return 2147483647.0;
      if (v < -2147483648.0) return -2147483648.0;
      return v;
    }
    case DType::Bool: return x != 0 ? 1.0 : 0.0;
  }
  return x;
}

}  // namespace modelc

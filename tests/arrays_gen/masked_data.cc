// Writes a masked regression data set in the array formats users bring, for the end-to-end
// test of npy(), npz() and safetensors() (tests/cmake/arrays.cmake):
//   x     float64 [n, 8]  standard normal (NumPy's default float type)
//   mask  bool    [n, 8]  each feature present with probability 1/2
//   y     float64 [n]     sum_j w_j x_j for the features present, w fixed
// as DIR/x.npy, DIR/mask.npy, DIR/y.npy (x in Fortran order, as np.asfortranarray writes it),
// DIR/data.npz (deflate with zip64 extras, as np.savez_compressed) and DIR/data.safetensors.
// A model that ignores the mask cannot do better than a mean absolute error of about 1.1;
// one that applies it can reach 0. Usage: masked_data DIR N SEED
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "tests/data/array_writer.h"

using namespace modelc::rt::testing;

namespace {

void write(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) {
    std::fprintf(stderr, "masked_data: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: masked_data DIR N SEED\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t n = std::atoll(argv[2]), f = 8;
  std::mt19937_64 rng(std::strtoull(argv[3], nullptr, 0));
  std::normal_distribution<double> normal;
  const double w[8] = {1.0, -2.0, 0.5, 1.5, -1.0, 2.0, -0.5, 1.0};
  std::vector<double> x(static_cast<size_t>(n * f)), xf(x.size()), y(static_cast<size_t>(n));
  std::vector<uint8_t> mask(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < f; ++j) {
      const size_t k = static_cast<size_t>(i * f + j);
      x[k] = normal(rng);
      mask[k] = static_cast<uint8_t>(rng() & 1);
      if (mask[k]) s += w[j] * x[k];
      xf[static_cast<size_t>(j * n + i)] = x[k];  // Fortran order: the first axis fastest
    }
    y[static_cast<size_t>(i)] = s;
  }
  write(dir + "/x.npy", npy_bytes("<f8", {n, f}, bytes_of(xf), {.version = 1, .fortran = true}));
  write(dir + "/mask.npy", npy_bytes("|b1", {n, f}, mask));
  write(dir + "/y.npy", npy_bytes("<f8", {n}, bytes_of(y), {.version = 2}));
  write(dir + "/data.npz", zip_bytes({{"x.npy", npy_bytes("<f8", {n, f}, bytes_of(x))},
                                      {"mask.npy", npy_bytes("|b1", {n, f}, mask)},
                                      {"target.npy", npy_bytes("<f8", {n}, bytes_of(y))}},
                                     /*deflate=*/true, /*zip64=*/true));
  write(dir + "/data.safetensors", safetensors_bytes({{"x", "F64", {n, f}, bytes_of(x)},
                                                      {"mask", "BOOL", {n, f}, mask},
                                                      {"y", "F64", {n}, bytes_of(y)}}));
  return 0;
}

// Convolution (im2col + sgemm vs oneDNN) and sgemm on the example models' CPU shapes:
// fashion_cnn's two convolutions (N=64, 1->32 at 28x28 and 32->64 at 14x14, 3x3, pad 1),
// forward and both gradients, and the matmuls of fashion_mlp and fashion_cnn. The second
// benchmark argument is the thread count of the runtime's pool, which splits the work of
// single-threaded OpenBLAS and oneDNN calls; matmul's `openblas_threads:1` runs one
// OpenBLAS call with OpenBLAS's own threads instead.
//
//   build-rt/benchmarks/cpu_conv --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <array>
#include <map>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/library.h"
#include "runtime/base/tensor.h"

using namespace modelc;
using kernels::LibCall;
using kernels::TensorArg;
using rt::ElemType;
using rt::HostTensor;

namespace {

HostTensor random_tensor(std::vector<int64_t> shape) {
  static std::mt19937 gen(42);
  std::uniform_real_distribution<float> d(-1, 1);
  HostTensor t(ElemType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(gen);
  return t;
}

TensorArg arg(HostTensor& t) { return {t.bytes.data(), t.type, t.shape}; }

struct Layer {
  int64_t C, O, H;  // channels in, out, square size
};
const Layer kLayers[] = {{1, 32, 28}, {32, 64, 14}};

enum Which { Forward, GradInput, GradWeight };

void conv(benchmark::State& state, Which which, bool onednn) {
  const Layer& L = kLayers[state.range(0)];
  int threads = static_cast<int>(state.range(1));
  rt::ThreadPool pool(threads);
  kernels::set_gemm_threading(kernels::GemmThreading::Pool, threads);
  const int64_t N = 64;
  HostTensor x = random_tensor({N, L.C, L.H, L.H}), w = random_tensor({L.O, L.C, 3, 3}), b = random_tensor({L.O});
  HostTensor y = random_tensor({N, L.O, L.H, L.H});
  std::map<std::string, std::vector<int64_t>> ints{{"padding", {1, 1}}, {"stride", {1, 1}}, {"dilation", {1, 1}}, {"groups", {1}}};
  std::map<std::string, double> floats;
  LibCall c;
  c.where = "bench";
  c.ints = &ints;
  c.floats = &floats;
  c.pool = &pool;
  kernels::LibraryFn fn = nullptr;
  if (which == Forward) {
    c.op = "conv2d";
    c.inputs = {arg(x), arg(w), arg(b)};
    c.outputs = {arg(y)};
    fn = onednn ? kernels::conv2d_onednn : kernels::conv2d_im2col;
  } else if (which == GradInput) {
    c.op = "conv2d_grad_input";
    c.inputs = {arg(y), arg(w)};
    c.outputs = {arg(x)};
    fn = onednn ? kernels::conv2d_grad_input_onednn : kernels::conv2d_grad_input_im2col;
  } else {
    c.op = "conv2d_grad_weight";
    c.inputs = {arg(x), arg(y)};
    c.outputs = {arg(w)};
    fn = onednn ? kernels::conv2d_grad_weight_onednn : kernels::conv2d_grad_weight_im2col;
  }
  for (auto _ : state) fn(c);
  double flops = 2.0 * N * L.O * L.C * 9 * L.H * L.H;
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void conv_args(benchmark::internal::Benchmark* b) {
  for (int64_t layer : {0, 1})
    for (int64_t t : {1, 2}) b->Args({layer, t});
  b->ArgNames({"layer", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(conv, fwd_im2col, Forward, false)->Apply(conv_args);
BENCHMARK_CAPTURE(conv, fwd_onednn, Forward, true)->Apply(conv_args);
BENCHMARK_CAPTURE(conv, grad_input_im2col, GradInput, false)->Apply(conv_args);
BENCHMARK_CAPTURE(conv, grad_input_onednn, GradInput, true)->Apply(conv_args);
BENCHMARK_CAPTURE(conv, grad_weight_im2col, GradWeight, false)->Apply(conv_args);
BENCHMARK_CAPTURE(conv, grad_weight_onednn, GradWeight, true)->Apply(conv_args);

// matmul [M,K] @ [K,N] through the library op.
void matmul(benchmark::State& state) {
  int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  int threads = static_cast<int>(state.range(3));
  rt::ThreadPool pool(threads);
  kernels::set_gemm_threading(state.range(4) ? kernels::GemmThreading::OpenBlas : kernels::GemmThreading::Pool, threads);
  HostTensor a = random_tensor({M, K}), b = random_tensor({K, N}), o = random_tensor({M, N});
  std::map<std::string, std::vector<int64_t>> ints;
  std::map<std::string, double> floats;
  LibCall c;
  c.op = "matmul";
  c.where = "bench";
  c.ints = &ints;
  c.floats = &floats;
  c.pool = &pool;
  c.inputs = {arg(a), arg(b)};
  c.outputs = {arg(o)};
  kernels::LibraryFn fn = kernels::find_library_op("matmul");
  for (auto _ : state) fn(c);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * K * N, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void matmul_args(benchmark::internal::Benchmark* b) {
  // fashion_mlp: forward 64x784 @ 784x256, 64x256 @ 256x10; weight gradients
  // 784x64 @ 64x256, 256x64 @ 64x10; input gradient 64x10 @ 10x256.
  // fashion_cnn: 64x3136 @ 3136x128 and its weight gradient 3136x64 @ 64x128.
  for (auto s : std::vector<std::array<int64_t, 3>>{{64, 784, 256}, {64, 256, 10}, {784, 64, 256}, {256, 64, 10},
                                                     {64, 10, 256}, {64, 3136, 128}, {3136, 64, 128}})
    for (int64_t t : {1, 2})
      for (int64_t mode : {0, 1}) b->Args({s[0], s[1], s[2], t, mode});
  b->ArgNames({"M", "K", "N", "threads", "openblas_threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(matmul)->Apply(matmul_args);

}  // namespace

BENCHMARK_MAIN();

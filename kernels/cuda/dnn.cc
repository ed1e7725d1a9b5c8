// conv2d and its two gradients on CUDA through cuDNN 9 (runtime/device/cuda/dnn_api.h, loaded with
// dlopen as libcudnn.so.9 or $MODELC_LIBCUDNN). NCHW tensors and OIHW filters as the CPU ops
// (kernels/cpu/conv.h shares the geometry and its checks); cross-correlation, groups, stride,
// padding and dilation from the attributes; the algorithm is cuDNN's first heuristic choice
// whose workspace fits 256 MiB. f32 computes in f32 (CUDNN_FMA_MATH: no TF32 unless the
// device allows it); autocast's f16 and bf16 convolutions (all three operands of one type)
// run natively on tensor cores with f32 accumulation (the CPU widens them to f32 instead).
// The forward op's bias (its own or the epilogue's) is cudnnAddTensor over the channels when
// it has the output's type; an f32 bias on an f16/bf16 output goes with the activation
// through the hand epilogue kernel (kernels/cuda/epilogue.h), in f32 before the one rounding.
#include <fmt/format.h>

#include "kernels/cpu/conv.h"
#include "kernels/cuda/epilogue.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/cuda/dnn_api.h"
#include "runtime/device/cuda/dynlib.h"
#include "kernels/cuda/library.h"
#include "runtime/base/tensor.h"

namespace modelc::rt::cuda {
namespace {

using kernels::ConvGeom;
using kernels::LibCall;
using kernels::TensorArg;

constexpr size_t kMaxWorkspace = size_t{256} << 20;

struct Dnn {
  DynLib lib;
  dnn::Api api;
  std::string reason;
};

const Dnn& cudnn() {
  static const Dnn* d = [] {
    auto* r = new Dnn;
    r->lib = load_library("cuDNN", "MODELC_LIBCUDNN", {"libcudnn.so.9", "libcudnn.so"});
    if (!r->lib.handle) {
      r->reason = r->lib.reason;
      return r;
    }
    std::string missing;
#define MODELC_CUDNN_RESOLVE(name, type) resolve(r->lib, #name, r->api.name, missing);
    MODELC_CUDNN_FUNCTIONS(MODELC_CUDNN_RESOLVE)
#undef MODELC_CUDNN_RESOLVE
    if (!missing.empty()) r->reason = fmt::format("cuDNN at {} lacks {}", r->lib.path, missing);
    return r;
  }();
  return *d;
}

void check(dnn::Status s, const char* call, const char* file, int line) {
  if (s == dnn::kSuccess) return;
  call_failed(call, file, line, cudnn().api.cudnnGetErrorString(s), s);
}
#define MODELC_DNN(call) check(cudnn().api.call, #call, __FILE__, __LINE__)

dnn::Handle handle_for(const CudaLibCall& cc) {
  const Dnn& d = cudnn();
  if (!d.reason.empty()) cc.call.fail(fmt::format("convolutions on CUDA need cuDNN: {}", d.reason));
  CudaDevice::LibraryState& s = cc.device->library_state("cudnn");
  if (s.handle == nullptr) {
    dnn::Handle h = nullptr;
    MODELC_DNN(cudnnCreate(&h));
    s.handle = h;
    s.destroy = [](void* p) { cudnn().api.cudnnDestroy(static_cast<dnn::Handle>(p)); };
  }
  auto h = static_cast<dnn::Handle>(s.handle);
  MODELC_DNN(cudnnSetStream(h, cc.stream));
  return h;
}

int data_type(const LibCall& c, const TensorArg& t, const char* role) {
  switch (t.type) {
    case ElemType::F32: return dnn::kDataFloat;
    case ElemType::F16: return dnn::kDataHalf;
    case ElemType::BF16: return dnn::kDataBfloat16;
    default: c.fail(fmt::format("{} must be f32, f16 or bf16, got {}", role, dtype_name(t.type)));
  }
}

int narrow(const LibCall& c, int64_t v) {
  if (v > INT32_MAX) c.fail(fmt::format("dimension {} is too large for cuDNN", v));
  return static_cast<int>(v);
}

// The descriptors of one call, destroyed with it: x [N,C,H,W], w [O,C/g,KH,KW], y [N,O,HO,WO].
struct Descs {
  dnn::TensorDesc x = nullptr, y = nullptr, bias = nullptr;
  dnn::FilterDesc w = nullptr;
  dnn::ConvDesc conv = nullptr;
  ~Descs() {
    const dnn::Api& a = cudnn().api;
    if (conv) a.cudnnDestroyConvolutionDescriptor(conv);
    if (w) a.cudnnDestroyFilterDescriptor(w);
    if (bias) a.cudnnDestroyTensorDescriptor(bias);
    if (y) a.cudnnDestroyTensorDescriptor(y);
    if (x) a.cudnnDestroyTensorDescriptor(x);
  }
};

void describe(const CudaLibCall& cc, const ConvGeom& g, int type, Descs& d) {
  const LibCall& c = cc.call;
  MODELC_DNN(cudnnCreateTensorDescriptor(&d.x));
  MODELC_DNN(cudnnSetTensor4dDescriptor(d.x, dnn::kTensorNCHW, type, narrow(c, g.N), narrow(c, g.C), narrow(c, g.H), narrow(c, g.W)));
  MODELC_DNN(cudnnCreateTensorDescriptor(&d.y));
  MODELC_DNN(cudnnSetTensor4dDescriptor(d.y, dnn::kTensorNCHW, type, narrow(c, g.N), narrow(c, g.O), narrow(c, g.HO),
                                        narrow(c, g.WO)));
  MODELC_DNN(cudnnCreateFilterDescriptor(&d.w));
  MODELC_DNN(cudnnSetFilter4dDescriptor(d.w, type, dnn::kTensorNCHW, narrow(c, g.O), narrow(c, g.Cg), narrow(c, g.KH),
                                        narrow(c, g.KW)));
  MODELC_DNN(cudnnCreateConvolutionDescriptor(&d.conv));
  MODELC_DNN(cudnnSetConvolution2dDescriptor(d.conv, narrow(c, g.ph), narrow(c, g.pw), narrow(c, g.sh), narrow(c, g.sw),
                                             narrow(c, g.dh), narrow(c, g.dw), dnn::kCrossCorrelation, dnn::kDataFloat));
  MODELC_DNN(cudnnSetConvolutionGroupCount(d.conv, narrow(c, g.groups)));
  const int math = type != dnn::kDataFloat ? dnn::kTensorOpMath : cc.device->allow_tf32() ? dnn::kDefaultMath : dnn::kFmaMath;
  MODELC_DNN(cudnnSetConvolutionMathType(d.conv, math));
}

// The first of cuDNN's ranked algorithms that succeeds with a workspace that fits.
int pick(const LibCall& c, const dnn::AlgoPerf* perf, int n, const char* what, size_t& workspace) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == dnn::kSuccess && perf[i].memory <= kMaxWorkspace) {
      workspace = perf[i].memory;
      return perf[i].algo;
    }
  c.fail(fmt::format("cuDNN has no {} algorithm for this convolution within {} MiB of workspace", what, kMaxWorkspace >> 20));
}

// One call's handle, descriptors, algorithm and workspace. `rank` fills cuDNN's ranking of
// the algorithms for the direction `what`: rank(handle, descs, perf, count).
struct Call {
  dnn::Handle h = nullptr;
  Descs d;
  int algo = 0;
  void* work = nullptr;
  size_t ws = 0;
};
template <typename Rank>
void prepare(const CudaLibCall& cc, const ConvGeom& g, int type, const char* what, Call& k, Rank rank) {
  k.h = handle_for(cc);
  describe(cc, g, type, k.d);
  dnn::AlgoPerf perf[8];
  int n = 0;
  rank(k.h, k.d, perf, n);
  k.algo = pick(cc.call, perf, n, what, k.ws);
  k.work = k.ws > 0 ? cc.device->workspace(k.ws, cc.stream) : nullptr;
}

// A gradient's shape attribute ("input_shape", "weight_shape") must agree with its output.
void check_given(const LibCall& c, const char* attr, const TensorArg& out) {
  const std::vector<int64_t> given = c.ints_or(attr, {});
  if (!given.empty() && given != out.shape)
    c.fail(fmt::format("{} {} disagrees with the output's shape {}", attr, shape_str(given), shape_str(out.shape)));
}

constexpr float kOne = 1.0f, kZero = 0.0f;

// The bias and activation of a forward convolution whose output is f16 or bf16: the shared
// checks (kernels/cpu/conv.h, conv_epilogue) with a bias of the output's type seen as f32
// (only its type and shape are checked); `bias` is the bias operand itself, or null.
struct LowEpilogue {
  const TensorArg* bias = nullptr;
  EpilogueActivation act = EpilogueActivation::None;
};
LowEpilogue low_conv_epilogue(const LibCall& c, const ConvGeom& g, ElemType type) {
  LibCall probe = c;
  for (size_t i = 2; i < probe.inputs.size(); ++i)
    if (probe.inputs[i].present() && probe.inputs[i].type == type) probe.inputs[i].type = ElemType::F32;
  const kernels::ConvEpilogue e = kernels::conv_epilogue(probe, g);
  LowEpilogue r;
  r.act = e.act;
  for (size_t i = 2; i < c.inputs.size() && e.bias != nullptr; ++i)
    if (c.inputs[i].present()) r.bias = &c.inputs[i];
  return r;
}

}  // namespace

void conv2d_cuda(const CudaLibCall& cc) {
  const LibCall& c = cc.call;
  c.expect_arity(2, 4, 1, 1);
  const TensorArg& x = c.in(0);
  const TensorArg& w = c.in(1);
  const TensorArg& y = c.out(0);
  const ConvGeom g = kernels::conv_geometry(c, x, w, y, "input", "weight", "output", /*low_float=*/true);
  LowEpilogue epi;
  if (y.type == ElemType::F32) {
    const kernels::ConvEpilogue e = kernels::conv_epilogue(c, g);
    epi.act = e.act;
    for (size_t i = 2; i < c.inputs.size() && e.bias != nullptr; ++i)
      if (c.inputs[i].present()) epi.bias = &c.inputs[i];
  } else {
    epi = low_conv_epilogue(c, g, y.type);
  }
  const int type = data_type(c, x, "input");
  if (y.numel() == 0) return;
  Call k;
  prepare(cc, g, type, "forward", k, [](dnn::Handle h, Descs& d, dnn::AlgoPerf* perf, int& n) {
    MODELC_DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 8, &n, perf));
  });
  MODELC_DNN(cudnnConvolutionForward(k.h, &kOne, k.d.x, x.data, k.d.w, w.data, k.d.conv, k.algo, k.work, k.ws, &kZero, k.d.y,
                                     y.data));
  if (epi.bias != nullptr && epi.bias->type != y.type) {
    // An f32 bias on a low-precision output: added in f32 with the activation, one rounding.
    kernels::cuda::cuda_epilogue(cc, y.data, y.type, static_cast<const float*>(epi.bias->data), epi.act, g.N, g.O, g.HO * g.WO);
    return;
  }
  if (epi.bias != nullptr) {
    MODELC_DNN(cudnnCreateTensorDescriptor(&k.d.bias));
    MODELC_DNN(cudnnSetTensor4dDescriptor(k.d.bias, dnn::kTensorNCHW, type, 1, narrow(c, g.O), 1, 1));
    MODELC_DNN(cudnnAddTensor(k.h, &kOne, k.d.bias, epi.bias->data, &kOne, k.d.y, y.data));
  }
  if (epi.act != EpilogueActivation::None) kernels::cuda::cuda_epilogue(cc, y.data, y.type, nullptr, epi.act, y.numel(), 1);
}

void conv2d_grad_input_cuda(const CudaLibCall& cc) {
  const LibCall& c = cc.call;
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& gy = c.in(0);
  const TensorArg& w = c.in(1);
  const TensorArg& dx = c.out(0);
  check_given(c, "input_shape", dx);
  const ConvGeom g = kernels::conv_geometry(c, dx, w, gy, "input gradient", "weight", "output gradient", /*low_float=*/true);
  if (dx.numel() == 0) return;
  Call k;
  prepare(cc, g, data_type(c, gy, "output gradient"), "backward-data", k,
          [](dnn::Handle h, Descs& d, dnn::AlgoPerf* perf, int& n) {
            MODELC_DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, 8, &n, perf));
          });
  MODELC_DNN(cudnnConvolutionBackwardData(k.h, &kOne, k.d.w, w.data, k.d.y, gy.data, k.d.conv, k.algo, k.work, k.ws, &kZero,
                                          k.d.x, dx.data));
}

void conv2d_grad_weight_cuda(const CudaLibCall& cc) {
  const LibCall& c = cc.call;
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& x = c.in(0);
  const TensorArg& gy = c.in(1);
  const TensorArg& dw = c.out(0);
  check_given(c, "weight_shape", dw);
  const ConvGeom g = kernels::conv_geometry(c, x, dw, gy, "input", "weight gradient", "output gradient", /*low_float=*/true);
  if (dw.numel() == 0) return;
  Call k;
  prepare(cc, g, data_type(c, x, "input"), "backward-filter", k, [](dnn::Handle h, Descs& d, dnn::AlgoPerf* perf, int& n) {
    MODELC_DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, 8, &n, perf));
  });
  MODELC_DNN(cudnnConvolutionBackwardFilter(k.h, &kOne, k.d.x, x.data, k.d.y, gy.data, k.d.conv, k.algo, k.work, k.ws, &kZero,
                                            k.d.w, dw.data));
}

std::string dnn_status() {
  const Dnn& d = cudnn();
  return d.reason.empty() ? fmt::format("cuDNN {} ({})", d.api.cudnnGetVersion(), d.lib.path) : d.reason;
}

}  // namespace modelc::rt::cuda

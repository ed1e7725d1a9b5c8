// One library op on host tensors: on a GPU, emulated on the host, or by the CPU twin.
#include "kernels/cuda/run_op.h"

#include <fmt/format.h>

#include "kernels/cpu/library.h"
#include "kernels/cuda/errors.h"
#include "kernels/cuda/launches.h"
#include "runtime/device/cpu/thread_pool.h"
#include "runtime/device/cuda/cuda_device.h"
#include "kernels/cuda/library.h"

namespace modelc::kernels::cuda {

namespace {

// A LibCall over the operands, whose data are given by `data(tensor, is_output, index)`.
template <class F>
LibCall make_call(const std::string& op, const std::vector<const rt::HostTensor*>& inputs, std::vector<rt::HostTensor>& outputs,
                  const OpInts& ints, const OpFloats& floats, const OpSizes& sizes, F data) {
  LibCall c;
  c.op = op;
  c.sizes = &sizes;
  c.where = kRunOpWhere;
  c.ints = &ints;
  c.floats = &floats;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorArg a;
    if (inputs[i] != nullptr) {
      a.data = data(*inputs[i], false, i);
      a.type = inputs[i]->type;
      a.shape = inputs[i]->shape;
    }
    c.inputs.push_back(std::move(a));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorArg a;
    a.data = data(outputs[i], true, i);
    a.type = outputs[i].type;
    a.shape = outputs[i].shape;
    c.outputs.push_back(std::move(a));
  }
  return c;
}

// Host data, non-null even for an empty tensor (null means an absent operand).
void* host_data(const rt::HostTensor& t) {
  static uint8_t empty;
  return t.bytes.empty() ? &empty : const_cast<uint8_t*>(t.bytes.data());
}

}  // namespace

void run_cuda_op(rt::cuda::CudaDevice& device, const std::string& op, const std::vector<const rt::HostTensor*>& inputs,
                 std::vector<rt::HostTensor>& outputs, const OpInts& ints, const OpFloats& floats,
                 const OpSizes& sizes) {
  rt::cuda::CudaLibraryFn fn = rt::cuda::find_cuda_library_op(op);
  if (fn == nullptr) throw rt::RuntimeError(fmt::format("library op '{}' has no CUDA implementation", op));
  device.context().make_current();
  const auto& drv = device.driver();
  const rt::StreamId sid = rt::cuda::stream_id(device.stream());
  std::vector<void*> blocks;
  auto take = [&](const rt::HostTensor& t) {
    void* p = device.allocator().allocate(std::max<size_t>(t.bytes.size(), 1), sid);
    blocks.push_back(p);
    if (!t.bytes.empty())
      MODELC_CU(drv, cuMemcpyHtoDAsync_v2(reinterpret_cast<rt::cuda::CUdeviceptr>(p), t.bytes.data(), t.bytes.size(), device.stream()));
    return p;
  };
  try {
    rt::cuda::CudaLibCall c;
    c.call = make_call(op, inputs, outputs, ints, floats, sizes, [&](const rt::HostTensor& t, bool, size_t) { return take(t); });
    c.device = &device;
    c.stream = device.stream();
    fn(c);
    check_kernel_errors(device);
    for (size_t i = 0; i < outputs.size(); ++i)
      if (!outputs[i].bytes.empty())
        MODELC_CU(drv, cuMemcpyDtoHAsync_v2(outputs[i].bytes.data(), reinterpret_cast<rt::cuda::CUdeviceptr>(c.call.outputs[i].data),
                                            outputs[i].bytes.size(), device.stream()));
    device.synchronize();
  } catch (...) {
    try {
      device.synchronize();
    } catch (const rt::RuntimeError&) {
      // already failing: keep the first error
    }
    for (void* p : blocks) device.allocator().free(p);
    throw;
  }
  for (void* p : blocks) device.allocator().free(p);
}

void run_emulated_op(const std::string& op, const std::vector<const rt::HostTensor*>& inputs, std::vector<rt::HostTensor>& outputs,
                     const OpInts& ints, const OpFloats& floats, const OpSizes& sizes) {
  LibCall c = make_call(op, inputs, outputs, ints, floats, sizes, [](const rt::HostTensor& t, bool, size_t) { return host_data(t); });
  unsigned long long word = kNoError;
  const OpLaunches plan = plan_launches(c, [&] { return &word; });
  for (const Launch& l : plan.launches) run_on_host(l);
  if (plan.checks_ids && word != kNoError) fail_id_error(c, word, plan.ids_shape, plan.rows);
}

void run_cpu_op(const std::string& op, const std::vector<const rt::HostTensor*>& inputs, std::vector<rt::HostTensor>& outputs,
                const OpInts& ints, const OpFloats& floats, int threads, const OpSizes& sizes) {
  LibraryFn fn = find_library_op(op);
  if (fn == nullptr) throw rt::RuntimeError(fmt::format("unknown library op '{}'", op));
  rt::ThreadPool pool(threads);
  LibCall c = make_call(op, inputs, outputs, ints, floats, sizes, [](const rt::HostTensor& t, bool, size_t) { return host_data(t); });
  c.pool = &pool;
  fn(c);
}

}  // namespace modelc::kernels::cuda

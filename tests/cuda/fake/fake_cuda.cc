// A fake CUDA driver for the tests: a shared library named libcuda.so.1 with the entry points
// the runtime loads (runtime/device/cuda/driver_api.h), backed by host memory, so that the runtime's
// CUDA code (driver loading, errors, device choice, the allocator's CUDA halves, module
// loading, launches) runs in CI, where there is no GPU. It is a test double, never shipped.
//
// "Device" memory is host memory: a device address is a host address. By default work is done
// when it is submitted, so every event is complete when recorded. With FAKE_CUDA_ASYNC=SEED,
// work is queued per stream and done only at a synchronization (of a stream, an event, the
// context, or a free), in a random interleaving of the streams (seeded) that keeps each
// stream's order and every event wait: a missing wait then shows up as wrong results.
// There, a copy from pinned memory reads it when the copy runs, a copy from pageable memory
// reads it at submission, and a copy to pageable memory waits for its stream (as CUDA's
// do); a raw kernel (below) first finishes all queued work and runs at once. A module is its PTX text; it has
// the kernels its ".entry NAME(" lines declare. A launch is recorded (fake_cuda_launches) and,
// when the test registered a host function of the runtime's host-kernel ABI under the
// kernel's name (fake_cuda_register_kernel), that function runs over [begin, end), so a
// Program's host code stands in for its PTX; a function registered with
// fake_cuda_register_raw_kernel gets the launch's parameter array as it is (the hand
// kernels' stand-ins). Other launches are only recorded.
//
// Behaviour is set by the environment, read at each call:
//   FAKE_CUDA_INIT=N     cuInit returns N (default 0)
//   FAKE_CUDA_DEVICES=N  devices (default 1); FAKE_CUDA_MEMORY=BYTES per device (default 1 GiB)
//   FAKE_CUDA_JIT_ERROR=1  cuModuleLoadDataEx fails with CUDA_ERROR_INVALID_PTX and a log
//   FAKE_CUDA_SM=XY      compute capability (default 90)
//   FAKE_CUDA_ASYNC=SEED   queued streams, run in a random interleaving (above)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace {

using HostKernelFn = void (*)(void* const*, const int64_t*, int64_t, int64_t);
// A stand-in for a kernel with its own parameters (the hand kernels): gets cuLaunchKernel's
// parameter array as it is.
using RawKernelFn = void (*)(void**);

struct Launch {
  std::string name;
  unsigned grid, block;
  int64_t begin, end;
};

struct Module {
  std::string ptx;
  std::vector<std::string> entries;
};

// An event: how many records were submitted, and how many have run.
struct Event {
  uint64_t recorded = 0, done = 0;
};

// Queued work of a stream (FAKE_CUDA_ASYNC): a piece of work, an event record, or a wait for
// an event's record number `target`.
struct Op {
  enum class Kind { Work, Record, Wait } kind = Kind::Work;
  std::function<void()> work;
  Event* event = nullptr;
  uint64_t target = 0;
};

struct State {
  std::mutex mu;
  std::map<void*, std::deque<Op>> queues;  // by stream (FAKE_CUDA_ASYNC)
  std::vector<std::unique_ptr<Event>> destroyed;  // destroyed while work was queued
  std::mt19937_64 rng;
  long rng_seed = -1;
  std::map<void*, size_t> device, pinned;
  size_t device_bytes = 0;
  std::map<std::string, HostKernelFn> kernels;
  std::map<std::string, RawKernelFn> raw_kernels;
  std::vector<Launch> launches;
  int streams = 0, events = 0, contexts = 0;
};

State& state() {
  static State* s = new State;
  return *s;
}

long env(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
}

struct ErrorName {
  int code;
  const char *name, *text;
};
constexpr ErrorName kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

long async_seed() { return env("FAKE_CUDA_ASYNC", -1); }

// Runs queued work, one operation of a random runnable stream at a time, until `done()`
// (called with the lock held). False when nothing can run and done() is still false.
bool drain_until(State& st, const std::function<bool()>& done) {
  if (st.rng_seed != async_seed()) {
    st.rng_seed = async_seed();
    st.rng.seed(static_cast<uint64_t>(st.rng_seed));
  }
  while (!done()) {
    std::vector<std::deque<Op>*> ready;
    for (auto& [stream, q] : st.queues)
      if (!q.empty() && (q.front().kind != Op::Kind::Wait || q.front().event->done >= q.front().target)) ready.push_back(&q);
    if (ready.empty()) return false;
    std::deque<Op>& q = *ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(st.rng)];
    Op op = std::move(q.front());
    q.pop_front();
    if (op.kind == Op::Kind::Work) op.work();
    else if (op.kind == Op::Kind::Record) op.event->done = op.target;
  }
  bool idle = true;
  for (auto& [stream, q] : st.queues) idle = idle && q.empty();
  if (idle) st.destroyed.clear();
  return true;
}

bool all_idle(State& st) {
  for (auto& [stream, q] : st.queues)
    if (!q.empty()) return false;
  return true;
}

int drain_all(State& st) { return drain_until(st, [&] { return all_idle(st); }) ? 0 : 999; }

// Submits an operation to `stream`: done now, or queued (FAKE_CUDA_ASYNC).
void submit(State& st, void* stream, Op op) {
  if (async_seed() < 0) {
    if (op.kind == Op::Kind::Work) op.work();
    else if (op.kind == Op::Kind::Record) op.event->done = op.target;
    return;
  }
  st.queues[stream].push_back(std::move(op));
}
void submit_work(State& st, void* stream, std::function<void()> work) {
  Op op;
  op.work = std::move(work);
  submit(st, stream, std::move(op));
}

// Whether [p, p + n) lies in pinned memory.
bool is_pinned(State& st, const void* p) {
  auto it = st.pinned.upper_bound(const_cast<void*>(p));
  if (it == st.pinned.begin()) return false;
  --it;
  return static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second;
}

int init_result() { return static_cast<int>(env("FAKE_CUDA_INIT", 0)); }
int device_count() { return static_cast<int>(env("FAKE_CUDA_DEVICES", 1)); }

}  // namespace

#define API extern "C" __attribute__((visibility("default")))

API int cuGetErrorName(int r, const char** out) {
  for (const ErrorName& e : kErrors)
    if (e.code == r) {
      *out = e.name;
      return 0;
    }
  *out = nullptr;
  return 1;
}
API int cuGetErrorString(int r, const char** out) {
  for (const ErrorName& e : kErrors)
    if (e.code == r) {
      *out = e.text;
      return 0;
    }
  *out = nullptr;
  return 1;
}
API int cuInit(unsigned) { return init_result(); }
API int cuDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}
API int cuDeviceGetCount(int* n) {
  *n = device_count();
  return 0;
}
API int cuDeviceGet(int* d, int i) {
  if (i < 0 || i >= device_count()) return 101;
  *d = i;
  return 0;
}
API int cuDeviceGetName(char* name, int len, int d) {
  std::string n = "Fake GPU " + std::to_string(d);
  std::strncpy(name, n.c_str(), static_cast<size_t>(len));
  return 0;
}
API int cuDeviceGetAttribute(int* v, int attr, int) {
  const long sm = env("FAKE_CUDA_SM", 90);
  switch (attr) {
    case 16: *v = 4; return 0;  // multiprocessors
    case 75: *v = static_cast<int>(sm / 10); return 0;
    case 76: *v = static_cast<int>(sm % 10); return 0;
    default: return 1;
  }
}
API int cuDeviceTotalMem_v2(size_t* bytes, int) {
  *bytes = static_cast<size_t>(env("FAKE_CUDA_MEMORY", 1L << 30));
  return 0;
}
API int cuDevicePrimaryCtxRetain(void** ctx, int d) {
  std::lock_guard<std::mutex> lock(state().mu);
  ++state().contexts;
  *ctx = reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + d));
  return 0;
}
API int cuDevicePrimaryCtxRelease_v2(int) {
  std::lock_guard<std::mutex> lock(state().mu);
  --state().contexts;
  return 0;
}
API int cuCtxSetCurrent(void*) { return 0; }
API int cuCtxSynchronize() {
  std::lock_guard<std::mutex> lock(state().mu);
  return drain_all(state());
}
API int cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  std::lock_guard<std::mutex> lock(state().mu);
  *total = static_cast<size_t>(env("FAKE_CUDA_MEMORY", 1L << 30));
  *free_bytes = *total - state().device_bytes;
  return 0;
}
API int cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (bytes == 0) return 1;
  if (state().device_bytes + bytes > static_cast<size_t>(env("FAKE_CUDA_MEMORY", 1L << 30))) return 2;
  void* m = ::operator new(bytes, std::align_val_t(256));
  state().device[m] = bytes;
  state().device_bytes += bytes;
  *p = reinterpret_cast<unsigned long long>(m);
  return 0;
}
API int cuMemFree_v2(unsigned long long p) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (drain_all(state()) != 0) return 999;  // a free waits for the device, as CUDA's does
  auto it = state().device.find(reinterpret_cast<void*>(p));
  if (it == state().device.end()) return 1;
  state().device_bytes -= it->second;
  ::operator delete(it->first, std::align_val_t(256));
  state().device.erase(it);
  return 0;
}
API int cuMemAllocHost_v2(void** p, size_t bytes) {
  std::lock_guard<std::mutex> lock(state().mu);
  *p = ::operator new(bytes, std::align_val_t(256));
  state().pinned[*p] = bytes;
  return 0;
}
API int cuMemFreeHost(void* p) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (drain_all(state()) != 0) return 999;
  if (state().pinned.erase(p) == 0) return 1;
  ::operator delete(p, std::align_val_t(256));
  return 0;
}
API int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, void* stream) {
  if (n == 0) return 0;
  std::lock_guard<std::mutex> lock(state().mu);
  if (is_pinned(state(), src)) {
    submit_work(state(), stream, [=] { std::memcpy(reinterpret_cast<void*>(dst), src, n); });
  } else {  // pageable: read now
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    submit_work(state(), stream, [=] { std::memcpy(reinterpret_cast<void*>(dst), copy->data(), n); });
  }
  return 0;
}
API int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, void* stream) {
  if (n == 0) return 0;
  std::lock_guard<std::mutex> lock(state().mu);
  auto done = std::make_shared<bool>(false);
  submit_work(state(), stream, [=] {
    std::memcpy(dst, reinterpret_cast<const void*>(src), n);
    *done = true;
  });
  if (is_pinned(state(), dst) || async_seed() < 0) return 0;
  return drain_until(state(), [&] { return *done; }) ? 0 : 999;  // pageable: waits for the copy
}
API int cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, void* stream) {
  if (n == 0) return 0;
  std::lock_guard<std::mutex> lock(state().mu);
  submit_work(state(), stream, [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
  return 0;
}
API int cuMemsetD8Async(unsigned long long dst, unsigned char v, size_t n, void* stream) {
  if (n == 0) return 0;
  std::lock_guard<std::mutex> lock(state().mu);
  submit_work(state(), stream, [=] { std::memset(reinterpret_cast<void*>(dst), v, n); });
  return 0;
}
API int cuModuleLoadDataEx(void** mod, const void* image, unsigned n, int* options, void** values) {
  const bool fail = env("FAKE_CUDA_JIT_ERROR", 0) != 0;
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == 5 && fail) {  // CU_JIT_ERROR_LOG_BUFFER
      std::snprintf(static_cast<char*>(values[i]), 256, "ptxas application ptx input, line 7; error   : Unknown symbol 'x'\n");
    }
  }
  if (fail) return 218;
  auto* m = new Module;
  m->ptx = static_cast<const char*>(image);
  for (size_t pos = 0; (pos = m->ptx.find(".entry ", pos)) != std::string::npos;) {
    pos += 7;
    size_t end = m->ptx.find('(', pos);
    if (end == std::string::npos) break;
    std::string name = m->ptx.substr(pos, end - pos);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    m->entries.push_back(name);
  }
  *mod = m;
  return 0;
}
API int cuModuleUnload(void* mod) {
  delete static_cast<Module*>(mod);
  return 0;
}
API int cuModuleGetFunction(void** f, void* mod, const char* name) {
  auto* m = static_cast<Module*>(mod);
  for (std::string& e : m->entries)
    if (e == name) {
      *f = &e;
      return 0;
    }
  return 500;
}
API int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared,
                       void* stream, void** params, void**) {
  if (gx == 0 || gy != 1 || gz != 1 || by != 1 || bz != 1 || shared != 0 || bx == 0 || bx > 1024) return 1;
  const std::string& name = *static_cast<std::string*>(f);
  HostKernelFn fn = nullptr;
  RawKernelFn raw = nullptr;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    if (auto it = state().kernels.find(name); it != state().kernels.end()) fn = it->second;
    if (auto it = state().raw_kernels.find(name); it != state().raw_kernels.end()) raw = it->second;
  }
  // Only a kernel of the generated ABI has the four parameters (buffers, sizes, begin, end);
  // a launch of anything else is recorded without reading its parameters.
  int64_t begin = 0, end = 0;
  if (fn != nullptr) {
    begin = *static_cast<int64_t*>(params[2]);
    end = *static_cast<int64_t*>(params[3]);
  }
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().launches.push_back({name, gx, bx, begin, end});
  }
  std::lock_guard<std::mutex> lock(state().mu);
  if (fn != nullptr) {
    const uint64_t buffers = *static_cast<uint64_t*>(params[0]), sizes = *static_cast<uint64_t*>(params[1]);
    submit_work(state(), stream, [=] {
      fn(reinterpret_cast<void* const*>(buffers), reinterpret_cast<const int64_t*>(sizes), begin, end);
    });
  }
  if (raw != nullptr) {
    if (drain_all(state()) != 0) return 999;  // its parameters are only valid during the call
    raw(params);
  }
  return 0;
}
API int cuStreamCreate(void** s, unsigned) {
  std::lock_guard<std::mutex> lock(state().mu);
  *s = reinterpret_cast<void*>(static_cast<uintptr_t>(0x10000 + ++state().streams));
  return 0;
}
API int cuStreamDestroy_v2(void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (!drain_until(state(), [&] { return state().queues[stream].empty(); })) return 999;
  state().queues.erase(stream);
  --state().streams;
  return 0;
}
API int cuStreamSynchronize(void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  return drain_until(state(), [&] { return state().queues[stream].empty(); }) ? 0 : 999;
}
API int cuStreamWaitEvent(void* stream, void* e, unsigned) {
  std::lock_guard<std::mutex> lock(state().mu);
  Op op;
  op.kind = Op::Kind::Wait;
  op.event = static_cast<Event*>(e);
  op.target = op.event->recorded;  // the record submitted last, as in CUDA
  submit(state(), stream, std::move(op));
  return 0;
}
API int cuEventCreate(void** e, unsigned) {
  std::lock_guard<std::mutex> lock(state().mu);
  ++state().events;
  *e = new Event;
  return 0;
}
API int cuEventDestroy_v2(void* e) {
  std::lock_guard<std::mutex> lock(state().mu);
  --state().events;
  // As in CUDA, an event with work still queued may be destroyed: it lives until the queues
  // are idle.
  if (all_idle(state())) delete static_cast<Event*>(e);
  else state().destroyed.emplace_back(static_cast<Event*>(e));
  return 0;
}
API int cuEventRecord(void* e, void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  Op op;
  op.kind = Op::Kind::Record;
  op.event = static_cast<Event*>(e);
  op.target = ++op.event->recorded;
  submit(state(), stream, std::move(op));
  return 0;
}
API int cuEventQuery(void* e) {
  std::lock_guard<std::mutex> lock(state().mu);
  const auto* ev = static_cast<Event*>(e);
  return ev->done >= ev->recorded ? 0 : 600;
}
API int cuEventSynchronize(void* e) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto* ev = static_cast<Event*>(e);
  return drain_until(state(), [&] { return ev->done >= ev->recorded; }) ? 0 : 999;
}
API int cuEventElapsedTime(float* ms, void*, void*) {
  *ms = 0;
  return 0;
}

// The tests' side.
API void fake_cuda_register_kernel(const char* name, HostKernelFn fn) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().kernels[name] = fn;
}
API void fake_cuda_register_raw_kernel(const char* name, RawKernelFn fn) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().raw_kernels[name] = fn;
}
// Copies launch i (name, grid, block, begin, end); false when there is none.
API bool fake_cuda_launch(size_t i, char* name, size_t name_len, unsigned* grid, unsigned* block, int64_t* begin, int64_t* end) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (i >= state().launches.size()) return false;
  const Launch& l = state().launches[i];
  std::snprintf(name, name_len, "%s", l.name.c_str());
  *grid = l.grid;
  *block = l.block;
  *begin = l.begin;
  *end = l.end;
  return true;
}
API size_t fake_cuda_launch_count() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().launches.size();
}
API void fake_cuda_reset() {
  std::lock_guard<std::mutex> lock(state().mu);
  drain_all(state());
  state().queues.clear();
  state().launches.clear();
  state().kernels.clear();
  state().raw_kernels.clear();
}
// Live device bytes, pinned regions, streams, events and retained contexts.
API void fake_cuda_counts(size_t* device_bytes, size_t* pinned, int* streams, int* events, int* contexts) {
  std::lock_guard<std::mutex> lock(state().mu);
  *device_bytes = state().device_bytes;
  *pinned = state().pinned.size();
  *streams = state().streams;
  *events = state().events;
  *contexts = state().contexts;
}

// Loading a GPU library (cuBLASLt, cuDNN) at run time, as the driver is: the first of a list
// of names that dlopen finds, or the path in an environment variable when it is set, with
// the loader's reason when none can be loaded.
#pragma once

#include <string>
#include <vector>

namespace modelc::rt::cuda {

struct DynLib {
  void* handle = nullptr;  // null: not loaded, `reason` says why
  std::string path, reason;
  void* symbol(const char* name) const;  // null when missing
};

// `what` names the library in the reason ("cuBLASLt").
DynLib load_library(const char* what, const char* env, const std::vector<std::string>& names);

// Points `slot` at the library's entry point `name`, or adds the name to `missing` ("a, b").
template <typename Fn>
void resolve(const DynLib& lib, const char* name, Fn& slot, std::string& missing) {
  slot = reinterpret_cast<Fn>(lib.symbol(name));
  if (slot == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
}

}  // namespace modelc::rt::cuda

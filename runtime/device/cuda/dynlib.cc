#include "runtime/device/cuda/dynlib.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>

namespace modelc::rt::cuda {

void* DynLib::symbol(const char* name) const { return handle != nullptr ? dlsym(handle, name) : nullptr; }

DynLib load_library(const char* what, const char* env, const std::vector<std::string>& names) {
  DynLib lib;
  std::vector<std::string> tries = names;
  if (const char* p = std::getenv(env); p != nullptr && *p != '\0') tries = {p};
  std::string errors;
  for (const std::string& n : tries) {
    // RTLD_NODELETE: GPU libraries are never unloaded (their handles outlive any one user).
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)) {
      lib.handle = h;
      lib.path = n;
      return lib;
    }
    const char* e = dlerror();
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", e != nullptr ? e : n + ": unknown error");
  }
  lib.reason = fmt::format("{} could not be loaded ({}); set {} to its path", what, errors, env);
  return lib;
}

}  // namespace modelc::rt::cuda

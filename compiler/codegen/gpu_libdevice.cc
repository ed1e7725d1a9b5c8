// libdevice for the GPU code: the NVPTX backend cannot lower the C library's math
// functions (tanhf, erff, ...) nor LLVM's exp / log / pow intrinsics, and lowers exp2 / log2
// / sin / cos only approximately; libdevice (the CUDA toolkit's bitcode math library)
// defines them all as __nv_* functions. The calls are renamed, the functions the module
// needs are linked from libdevice.10.bc, internalized (the optimiser inlines them and drops
// the rest) and specialised by NVVMReflect with the module flag nvvm-reflect-ftz = 0
// (denormals are kept, as on the host).
#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>

#include "compiler/codegen/codelets_impl.h"
#include "compiler/support/diagnostics.h"

namespace modelc {
namespace {

// The libdevice function for a C library function or an LLVM intrinsic; "" when none.
std::string libdevice_name(const llvm::Function& f) {
  static const std::map<std::string, std::string> libm = {
      {"expf", "__nv_expf"},     {"exp", "__nv_exp"},       {"logf", "__nv_logf"},   {"log", "__nv_log"},
      {"powf", "__nv_powf"},     {"pow", "__nv_pow"},       {"tanhf", "__nv_tanhf"}, {"tanh", "__nv_tanh"},
      {"erff", "__nv_erff"},     {"erf", "__nv_erf"},       {"exp2f", "__nv_exp2f"}, {"exp2", "__nv_exp2"},
      {"log2f", "__nv_log2f"},   {"log2", "__nv_log2"},     {"log10f", "__nv_log10f"}, {"log10", "__nv_log10"},
      {"sinf", "__nv_sinf"},     {"sin", "__nv_sin"},       {"cosf", "__nv_cosf"},   {"cos", "__nv_cos"},
      {"expm1f", "__nv_expm1f"}, {"log1pf", "__nv_log1pf"}, {"sqrtf", "__nv_sqrtf"}, {"sqrt", "__nv_sqrt"}};
  const std::string name = f.getName().str();
  if (!f.isIntrinsic()) {
    auto it = libm.find(name);
    return it == libm.end() ? "" : it->second;
  }
  const char* base = nullptr;
  switch (f.getIntrinsicID()) {
    case llvm::Intrinsic::exp: base = "exp"; break;
    case llvm::Intrinsic::exp2: base = "exp2"; break;
    case llvm::Intrinsic::log: base = "log"; break;
    case llvm::Intrinsic::log2: base = "log2"; break;
    case llvm::Intrinsic::log10: base = "log10"; break;
    case llvm::Intrinsic::pow: base = "pow"; break;
    case llvm::Intrinsic::sin: base = "sin"; break;
    case llvm::Intrinsic::cos: base = "cos"; break;
    default: return "";
  }
  llvm::Type* t = f.getReturnType();
  if (t->isFloatTy()) return fmt::format("__nv_{}f", base);
  if (t->isDoubleTy()) return fmt::format("__nv_{}", base);
  return "";  // vectors and other types: the backend's (none are emitted today)
}

std::unique_ptr<llvm::Module> load_libdevice(llvm::LLVMContext& ctx, const std::vector<std::string>& needed) {
  const std::vector<std::string> candidates = libdevice_candidates();
  std::string path;
  for (const std::string& c : candidates)
    if (std::filesystem::is_regular_file(c)) {
      path = c;
      break;
    }
  const char* env = std::getenv("MODELC_LIBDEVICE");
  if (path.empty()) {
    std::string why = env && *env ? fmt::format("MODELC_LIBDEVICE={} is not a file", env)
                                   : fmt::format("looked at {}; set MODELC_LIBDEVICE to its path",
                                                 fmt::join(candidates, ", "));
    throw UserError(fmt::format("the GPU code needs libdevice (libdevice.10.bc, for {}) and it was not found: {}",
                                fmt::join(needed, ", "), why));
  }
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf) throw UserError(fmt::format("cannot read libdevice at {}: {}", path, buf.getError().message()));
  auto mod = llvm::parseBitcodeFile((*buf)->getMemBufferRef(), ctx);
  if (!mod) throw UserError(fmt::format("{} is not LLVM bitcode that LLVM 19 can read: {}", path, llvm::toString(mod.takeError())));
  return std::move(*mod);
}

}  // namespace

std::vector<std::string> libdevice_candidates() {
  const char* env = std::getenv("MODELC_LIBDEVICE");
  if (env && *env) return {env};
  std::vector<std::string> out;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(var); root && *root)
      out.push_back(fmt::format("{}/nvvm/libdevice/libdevice.10.bc", root));
  out.push_back("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc");
  out.push_back("/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc");  // Debian's nvidia-cuda-toolkit
  return out;
}

void link_libdevice(llvm::Module& m) {
  std::vector<std::pair<llvm::Function*, std::string>> renames;
  for (llvm::Function& f : m)
    if (f.isDeclaration())
      if (std::string to = libdevice_name(f); !to.empty()) renames.emplace_back(&f, to);
  std::vector<std::string> needed;
  for (auto& [f, to] : renames) {
    llvm::FunctionCallee nv = m.getOrInsertFunction(to, f->getFunctionType());
    f->replaceAllUsesWith(nv.getCallee());
    f->eraseFromParent();
    if (std::find(needed.begin(), needed.end(), to) == needed.end()) needed.push_back(to);
  }
  if (!m.getModuleFlag("nvvm-reflect-ftz")) m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
  if (needed.empty()) return;
  std::unique_ptr<llvm::Module> lib = load_libdevice(m.getContext(), needed);
  lib->setTargetTriple(m.getTargetTriple());
  lib->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(lib), llvm::Linker::Flags::LinkOnlyNeeded))
    throw InternalError("kernel compiler: linking libdevice failed");
  // Only the kernels are entry points: everything linked becomes internal.
  for (llvm::Function& f : m)
    if (!f.isDeclaration() && f.getName().starts_with("__nv_")) f.setLinkage(llvm::GlobalValue::InternalLinkage);
  for (llvm::GlobalVariable& gv : m.globals())
    if (!gv.isDeclaration()) gv.setLinkage(llvm::GlobalValue::InternalLinkage);
}

}  // namespace modelc

// The kernel compiler's shared-object path, for .plan files: the module cloned, compiled
// for the host exactly as finish() compiles it (same CPU, features, optimisation pipeline
// and vector math library), emitted as a PIC object file by LLVM and linked into a shared
// object by the system linker (`cc -shared`). The runtime loads it with dlopen
// (runtime/session/plan.cc); its exported symbols are the kernels' names.
//
// The object and the .so live in a private temporary directory (mkdtemp in $TMPDIR, else
// /tmp) that is removed in every case. The linker runs through posix_spawnp with its
// output captured for the error message.
#include "compiler/codegen/object.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include "compiler/codegen/codelets_impl.h"

extern char** environ;

namespace modelc {
namespace {

namespace fs = std::filesystem;

void init_native() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

// The host, as finish() describes it to LLJIT.
llvm::orc::JITTargetMachineBuilder detect_host() {
  init_native();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) throw InternalError("kernel compiler: host detection: " + llvm::toString(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  return std::move(*jtmb);
}

// finish() calls glibc's vector math functions when libmvec loads (x86-64 hosts only).
bool libmvec_available(const llvm::Triple& triple) {
  if (triple.getArch() != llvm::Triple::x86_64) return false;
  void* h = dlopen("libmvec.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

// A private temporary directory, removed with everything in it when this goes away.
struct TempDir {
  std::string path;
  TempDir() {
    const char* env = std::getenv("TMPDIR");
    const fs::path base = env && *env ? env : "/tmp";
    std::string tmpl = (base / "modelc-so-XXXXXX").string();
    if (!mkdtemp(tmpl.data()))
      throw UserError(fmt::format("cannot create a temporary directory in {}: {}", base.string(), std::strerror(errno)));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const char* name) const { return (fs::path(path) / name).string(); }
};

void write_file(const std::string& path, llvm::StringRef bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) throw UserError(fmt::format("cannot write the temporary file {}: {}", path, std::strerror(errno)));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `argv` (argv[0] looked up in PATH) with stdin from /dev/null and stdout and stderr
// into `log`; returns its wait status. Throws UserError when it cannot start.
int run_program(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT)
    throw UserError(fmt::format("cannot link the kernels into a shared object: no '{}' on PATH (a .plan needs the "
                                "system's C compiler driver and linker: install gcc or clang)",
                                argv[0]));
  if (rc != 0) throw UserError(fmt::format("cannot run '{}' to link the kernels: {}", argv[0], std::strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw UserError(fmt::format("waiting for '{}': {}", argv[0], std::strerror(errno)));
  }
  return status;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& a : v) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

}  // namespace

rt::PlanTarget host_target() {
  llvm::orc::JITTargetMachineBuilder jtmb = detect_host();
  rt::PlanTarget t;
  t.arch = jtmb.getTargetTriple().getArchName().str();
  t.cpu = jtmb.getCPU();
  for (const std::string& f : jtmb.getFeatures().getFeatures())
    if (f.size() > 1 && f[0] == '+') t.features.push_back(f.substr(1));
  std::sort(t.features.begin(), t.features.end());
  t.features.erase(std::unique(t.features.begin(), t.features.end()), t.features.end());
  return t;
}

std::string CodeletCompiler::shared_object() const {
  const Impl& im = *impl_;
  if (im.finished) throw InternalError("kernel compiler: shared_object() after finish()");
  llvm::orc::JITTargetMachineBuilder jtmb = detect_host();
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  auto tm_or = jtmb.createTargetMachine();
  if (!tm_or) throw InternalError("kernel compiler: host target machine: " + llvm::toString(tm_or.takeError()));
  std::unique_ptr<llvm::TargetMachine> tm = std::move(*tm_or);

  llvm::ValueToValueMapTy vmap;
  std::unique_ptr<llvm::Module> m = llvm::CloneModule(*im.module, vmap);
  m->setDataLayout(tm->createDataLayout());
  m->setTargetTriple(tm->getTargetTriple().str());
  std::string err;
  llvm::raw_string_ostream es(err);
  if (llvm::verifyModule(*m, &es)) throw InternalError("kernel compiler: invalid module: " + err);
  const bool veclib = libmvec_available(tm->getTargetTriple());
  optimize_module(*m, tm.get(), veclib);

  llvm::SmallString<0> object;
  {
    llvm::raw_svector_ostream os(object);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
      throw InternalError("kernel compiler: the host backend cannot emit an object file");
    pm.run(*m);
  }

  TempDir dir;
  const std::string obj = dir.file("kernels.o"), so = dir.file("kernels.so"), log = dir.file("link.log");
  write_file(obj, object.str());
  // -z defs: an unresolved symbol is a link error here, not a dlopen error on another
  // machine; -Bsymbolic: the kernels never bind to same-named symbols of other objects.
  std::vector<std::string> argv = {"cc", "-shared", "-o", so, obj, "-Wl,-z,defs", "-Wl,-Bsymbolic", "-lm"};
  if (veclib) argv.push_back("-lmvec");
  const int status = run_program(argv, log);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string output = read_file(log);
    while (!output.empty() && output.back() == '\n') output.pop_back();
    std::string how = WIFEXITED(status) ? fmt::format("exited with status {}", WEXITSTATUS(status))
                                        : fmt::format("was killed by signal {}", WTERMSIG(status));
    throw UserError(fmt::format("cannot link the kernels into a shared object: '{}' {}{}{}", join(argv), how,
                                output.empty() ? "" : ":\n", output));
  }
  std::string bytes = read_file(so);
  if (bytes.empty())
    throw UserError(fmt::format("cannot link the kernels into a shared object: '{}' wrote no output", join(argv)));
  return bytes;
}

}  // namespace modelc

// The kernel compiler's machine code for the host: the module optimised once (O3,
// vectorised, for the host CPU and its features, glibc's vector math library where it
// loads) and emitted by LLVM as one relocatable PIC object, kept in the compiled-code cache
// (compiler/codegen/code_cache.h) under a key of everything that shapes it. finish() hands
// that object to ORC LLJIT; shared_object() links it into a shared object with the system
// linker (`cc -shared`) for .plan files, which the runtime loads with dlopen
// (runtime/session/plan.cc); its exported symbols are the kernels' names.
//
// The object and the .so live in a private temporary directory (mkdtemp in $TMPDIR, else
// /tmp) that is removed in every case. The linker runs through posix_spawnp with its
// output captured for the error message.
#include "compiler/codegen/object.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
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
#include <llvm/Config/llvm-config.h>
#include <llvm/Target/TargetMachine.h>

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

// dl_iterate_phdr's search for the GNU build id of the loaded object that contains `addr`.
struct BuildIdSearch {
  uintptr_t addr;
  std::string id;
};

int find_build_id(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<BuildIdSearch*>(data);
  bool contains = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    contains |= ph.p_type == PT_LOAD && search->addr >= lo && search->addr < lo + ph.p_memsz;
  }
  if (!contains) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      if (desc + note->n_descsz > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0)
        for (uint32_t b = 0; b < note->n_descsz; ++b) search->id += fmt::format("{:02x}", static_cast<unsigned char>(desc[b]));
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 1;
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

llvm::orc::JITTargetMachineBuilder host_machine_builder() { return detect_host(); }

// Whether the host code may call glibc's vector math library (x86-64, libmvec.so.1 loads).
static bool libmvec_available(const llvm::Triple& triple) {
  if (triple.getArch() != llvm::Triple::x86_64) return false;
  void* h = dlopen("libmvec.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

const std::string& compiler_build_id() {
  static const std::string id = [] {
    BuildIdSearch search{reinterpret_cast<uintptr_t>(&compiler_build_id), {}};
    dl_iterate_phdr(find_build_id, &search);
    if (!search.id.empty()) return search.id;
    // No build id: the binary's path, size and modification time stand in for it.
    Dl_info info{};
    struct stat st{};
    if (dladdr(reinterpret_cast<void*>(&compiler_build_id), &info) && info.dli_fname && stat(info.dli_fname, &st) == 0)
      return fmt::format("{} {} {}", info.dli_fname, st.st_size, st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
    return std::string("unknown");
  }();
  return id;
}

const std::string& host_object(CodeletCompiler::Impl& im) {
  if (im.object) return *im.object;
  for (CodeletCompiler::Impl::Codelet& k : im.codelets)
    k.source = function_text(k.body) + "\n" + function_text(im.module->getFunction(k.symbol));
  {
    llvm::raw_string_ostream os(im.final_text);
    im.module->print(os, nullptr);
  }
  llvm::orc::JITTargetMachineBuilder jtmb = detect_host();
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  auto tm_or = jtmb.createTargetMachine();
  if (!tm_or) throw InternalError("kernel compiler: host target machine: " + llvm::toString(tm_or.takeError()));
  std::unique_ptr<llvm::TargetMachine> tm = std::move(*tm_or);
  llvm::Module& m = *im.module;
  m.setDataLayout(tm->createDataLayout());
  m.setTargetTriple(tm->getTargetTriple().str());
  std::string err;
  llvm::raw_string_ostream es(err);
  if (llvm::verifyModule(m, &es)) throw InternalError("kernel compiler: invalid module: " + err);
  const bool veclib = im.veclib = libmvec_available(tm->getTargetTriple());
  const std::string key = code_key(CodeKey{im.final_text, tm->getTargetTriple().str(), tm->getTargetCPU().str(),
                                           tm->getTargetFeatureString().str(),
                                           fmt::format("O3 pic veclib={}", veclib), LLVM_VERSION_STRING,
                                           MODELC_VERSION, compiler_build_id()});
  if (std::optional<std::string> cached = im.cache.load(key)) return *(im.object = std::move(*cached));
  optimize_module(m, tm.get(), veclib);
  llvm::SmallString<0> object;
  {
    llvm::raw_svector_ostream os(object);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
      throw InternalError("kernel compiler: the host backend cannot emit an object file");
    pm.run(m);
  }
  im.cache.store(key, object.str());
  return *(im.object = std::string(object.str()));
}

std::string CodeletCompiler::shared_object() {
  Impl& im = *impl_;
  if (im.finished) throw InternalError("kernel compiler: shared_object() after finish()");
  const std::string& object = host_object(im);
  TempDir dir;
  const std::string obj = dir.file("kernels.o"), so = dir.file("kernels.so"), log = dir.file("link.log");
  write_file(obj, object);
  // -z defs: an unresolved symbol is a link error here, not a dlopen error on another
  // machine; -Bsymbolic: the kernels never bind to same-named symbols of other objects.
  std::vector<std::string> argv = {"cc", "-shared", "-o", so, obj, "-Wl,-z,defs", "-Wl,-Bsymbolic", "-lm"};
  if (im.veclib) argv.push_back("-lmvec");
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

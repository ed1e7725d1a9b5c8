// The guard rails of docs/architecture.md, checked on the source tree:
//  - no source file (.h, .cc, .def, .cu under compiler/, runtime/, kernels/, tools/, tests/)
//    has more than 600 lines;
//  - no function of compiler/, runtime/, kernels/ or tools/ has more than 80 lines unless the
//    comment right above it says why ("Long by design: ..."). A function is found by its
//    shape: a line at column 0 or 2 that ends a signature with "{" and the first line after
//    it that is "}" at the same indent (the project's format).
// Usage: check_sizes SOURCE_DIR. Prints every violation as file:line: what, and exits 1 if
// there is one.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxFileLines = 600;
constexpr size_t kMaxFunctionLines = 80;

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

bool source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cc" || e == ".def" || e == ".cu";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: check_sizes SOURCE_DIR\n";
    return 2;
  }
  const fs::path root = argv[1];
  const std::regex signature(R"(^( {0,2})[A-Za-z~].*\)( const)?( noexcept)?( override)? \{$)");
  const std::regex control(R"(^\s*(if|for|while|switch|else|do|namespace|struct|class|enum|union|TEST|TEST_F|TEST_P)\b)");
  int problems = 0;
  size_t files = 0, functions = 0;
  for (const char* dir : {"compiler", "runtime", "kernels", "tools", "tests"}) {
    const bool check_functions = std::string(dir) != "tests";
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      if (!e.is_regular_file() || !source(e.path())) continue;
      const std::vector<std::string> lines = read_lines(e.path());
      const std::string name = fs::relative(e.path(), root).string();
      ++files;
      if (lines.size() > kMaxFileLines) {
        std::cout << name << ":" << lines.size() << ": " << lines.size() << " lines, more than " << kMaxFileLines << "\n";
        ++problems;
      }
      if (!check_functions) continue;
      for (size_t i = 0; i < lines.size(); ++i) {
        std::smatch m;
        if (!std::regex_match(lines[i], m, signature) || std::regex_search(lines[i], control)) continue;
        const std::string close = m[1].str() + "}";
        size_t j = i + 1;
        while (j < lines.size() && lines[j].rfind(close, 0) != 0) ++j;
        ++functions;
        const size_t length = j - i + 1;
        bool reason = false;
        for (size_t k = i >= 3 ? i - 3 : 0; k < i; ++k) reason |= lines[k].find("Long by design") != std::string::npos;
        if (length > kMaxFunctionLines && !reason) {
          std::cout << name << ":" << i + 1 << ": a function of " << length << " lines, more than " << kMaxFunctionLines
                    << " without a reason (\"// Long by design: ...\" above it)\n";
          ++problems;
        }
        i = j;
      }
    }
  }
  std::cout << "checked " << files << " files and " << functions << " functions: " << problems << " problem(s)\n";
  return problems ? 1 : 0;
}

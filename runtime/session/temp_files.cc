#include "runtime/session/temp_files.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <system_error>

namespace modelc::rt {

namespace fs = std::filesystem;

std::string temp_prefix(const std::string& prefix) { return fmt::format("{}{}.", prefix, getpid()); }

size_t remove_stale_temporaries(const fs::path& dir, const std::string& prefix) {
  size_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec);
  if (ec) return 0;
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  // Best effort: the walk stops quietly where the directory cannot be read on.
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!e.is_regular_file(ec)) continue;
    const char* p = name.data() + prefix.size();
    const char* end = name.data() + name.size();
    long pid = 0;
    auto [next, err] = std::from_chars(p, end, pid);
    bool stale;
    if (err == std::errc() && next != p && next < end && *next == '.' && pid > 0) {
      stale = pid != getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    } else {
      const auto written = fs::last_write_time(e.path(), ec);
      stale = !ec && written < hour_ago;
    }
    if (stale && fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace modelc::rt

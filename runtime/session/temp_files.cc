#include "runtime/session/temp_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <charconv>
#include <chrono>
#include <system_error>

#include "runtime/base/error.h"

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

namespace {

[[noreturn]] void cannot_write(const std::string& path, const std::string& why) {
  throw RuntimeError(fmt::format("{}: cannot write: {}", path, why));
}

void write_all(int fd, const std::string& bytes, const std::string& path) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) cannot_write(path, std::strerror(n < 0 ? errno : ENOSPC));
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const fs::path parent = fs::path(path).parent_path();
  const fs::path dir = parent.empty() ? fs::path(".") : parent;
  const std::string prefix = fs::path(path).filename().string() + ".tmp.";
  remove_stale_temporaries(dir, prefix);
  std::string tmp;
  int fd = -1;
  for (unsigned attempt = 0; fd < 0; ++attempt) {
    tmp = (dir / temp_prefix(prefix)).string() + std::to_string(attempt);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 100)) cannot_write(path, std::strerror(errno));
  }
  try {
    write_all(fd, bytes, path);
    if (::fsync(fd) != 0) cannot_write(path, fmt::format("fsync: {}", std::strerror(errno)));
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0) cannot_write(path, std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) cannot_write(path, std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable once the directory is synced (best effort: not every file system can).
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace modelc::rt

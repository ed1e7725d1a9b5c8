// The leftovers of killed writers (runtime/session/temp_files.h): a checkpoint or plan write
// removes the temporaries beside its target whose writer no longer runs (a process that
// exited, so its id is free) and the pid-less ones of earlier versions once they are an hour
// old; it keeps those of a live writer (pid 1), young pid-less ones, other files, and its own
// result.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "runtime/session/checkpoint.h"
#include "runtime/session/temp_files.h"
#include "tests/data/data_test_util.h"

namespace modelc::rt {
namespace {

using testing::TempDir;

// A process id that was just in use and no longer is.
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

void touch(const std::string& path, std::chrono::hours age = std::chrono::hours(0)) {
  std::ofstream(path) << "partial";
  std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now() - age);
}

std::vector<std::string> entries(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TempFiles, ACheckpointWriteRemovesWhatKilledWritersLeft) {
  TempDir dir;
  const std::string prefix = ".ck.safetensors.tmp.";
  const pid_t dead = dead_pid();
  touch(dir / (prefix + std::to_string(dead) + ".a1b2c3"));       // killed writer: removed
  touch(dir / (prefix + std::to_string(dead) + ".zzzzzz"));       // another of its files: removed
  touch(dir / (prefix + "1.q9w8e7"));                             // pid 1 runs: kept
  touch(dir / (prefix + "Ab3xYz"), std::chrono::hours(2));        // an old pid-less one: removed
  touch(dir / (prefix + "Cd4uVw"));                               // a young pid-less one: kept
  touch(dir / ".other.safetensors.tmp.123.abcdef");               // another target's: kept
  touch(dir / "notes.txt");
  save_checkpoint(dir / "ck.safetensors", {{"w", HostTensor(ElemType::F32, {2})}});
  EXPECT_EQ(entries(dir), (std::vector<std::string>{".ck.safetensors.tmp.1.q9w8e7", ".ck.safetensors.tmp.Cd4uVw",
                                                    ".other.safetensors.tmp.123.abcdef", "ck.safetensors", "notes.txt"}));
  EXPECT_EQ(load_checkpoint(dir / "ck.safetensors").tensors.size(), 1u);
}

TEST(TempFiles, NamesCarryTheWritersPid) {
  EXPECT_EQ(temp_prefix("x.tmp."), "x.tmp." + std::to_string(getpid()) + ".");
  TempDir dir;
  touch(dir / temp_prefix("y.tmp.") + "0");  // this process runs: never stale
  EXPECT_EQ(remove_stale_temporaries(dir.path(), "y.tmp."), 0u);
  touch(dir / ("y.tmp." + std::to_string(dead_pid()) + ".0"));
  EXPECT_EQ(remove_stale_temporaries(dir.path(), "y.tmp."), 1u);
  EXPECT_EQ(remove_stale_temporaries(dir / "missing", "y.tmp."), 0u);  // no directory: nothing, no error
}

}  // namespace
}  // namespace modelc::rt

// The temporary files the atomic writers (checkpoints, plans) leave beside their target
// while they write: named PREFIX<pid>.<suffix>, with the writer's process id, so that a
// later writer can tell the leftovers of a killed one from the file of one still running.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace modelc::rt {

// PREFIX<pid>. for this process: what a writer's temporary name starts with.
std::string temp_prefix(const std::string& prefix);

// Removes the files of `dir` named PREFIX<pid>.* whose process no longer runs, and those named
// PREFIX* without a pid (the random names earlier versions used) that are older than an hour.
// Best effort: a file it cannot remove stays. Returns how many it removed. (A writer in
// another pid namespace sharing the directory looks dead from here: do not share a checkpoint
// directory between containers that write to it at the same time.)
size_t remove_stale_temporaries(const std::filesystem::path& dir, const std::string& prefix);

// Writes `bytes` to `path` atomically: to a temporary NAME.tmp.<pid>.N beside it (created
// exclusively, with the mode a new file gets), fsync'ed, renamed over `path`, the directory
// fsync'ed (best effort). Stale temporaries of killed writers are removed first. On any
// failure the temporary is removed, `path` is untouched, and RuntimeError says
// "PATH: cannot write: REASON" (strerror: "No space left on device").
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace modelc::rt

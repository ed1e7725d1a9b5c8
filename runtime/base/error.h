// The runtime's error type. Library code never exits: a bad feed, an id out of range or a
// Program the runtime cannot run throws a RuntimeError whose message names the function or
// op, its source location, the buffer or input concerned and what is wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace modelc::rt {

class RuntimeError : public std::runtime_error {
 public:
  explicit RuntimeError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace modelc::rt

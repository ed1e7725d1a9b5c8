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

// The text of a JSON library error as a person reads it: nlohmann's
// "[json.exception.parse_error.101] parse error at line 1, ..." without its bracketed id.
inline std::string json_error_text(const std::exception& e) {
  std::string s = e.what();
  if (s.rfind("[json.exception.", 0) == 0)
    if (size_t end = s.find("] "); end != std::string::npos) s.erase(0, end + 2);
  return s;
}

}  // namespace modelc::rt

#include "runtime/base/bytes.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace modelc {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::abs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.2f} {}", v, units[u]);
}

std::optional<int64_t> parse_bytes(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = text.substr(pos);
  if (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);
  static const std::map<std::string, double> scale = {
      {"", 1},          {"B", 1},         {"KiB", 1024.0},         {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},          {"GB", 1e9},        {"TB", 1e12},
      {"K", 1024.0},    {"M", 1048576.0}, {"G", 1073741824.0}};
  auto it = scale.find(unit);
  if (it == scale.end() || !(v >= 0) || !std::isfinite(v)) return std::nullopt;
  double bytes = v * it->second;
  if (bytes > 9.2e18) return std::nullopt;
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace modelc

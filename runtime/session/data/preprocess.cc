#include "runtime/session/data/preprocess.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace modelc::rt {

namespace {

std::string floats_text(const std::vector<float>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? "," : "", v[i]);  // shortest round trip
  return s;
}

std::vector<float> floats_of(const Checkpoint& c, const std::string& key) {
  const std::string& s = c.text(key);
  std::vector<float> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    float v = 0;
    auto [p, ec] = std::from_chars(s.data() + at, s.data() + end, v);
    if (at == end || ec != std::errc() || p != s.data() + end || !std::isfinite(v))
      throw CheckpointError(fmt::format("{}: metadata '{}' is not a comma-separated list of finite numbers (item {}: "
                                        "'{}')", c.path, key, out.size() + 1, s.substr(at, end - at)));
    out.push_back(v);
    at = end + 1;
  }
  return out;
}

int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

}  // namespace

void put_preprocessing(std::map<std::string, std::string>& metadata, const Dataset& ds) {
  if (ds.vocab().has_chars()) {
    std::string hex;
    for (uint8_t ch : ds.vocab().chars) hex += fmt::format("{:02x}", ch);
    metadata["data.vocab"] = hex;
  }
  if (!ds.feature_mean().empty()) {
    metadata["data.mean"] = floats_text(ds.feature_mean());
    metadata["data.std"] = floats_text(ds.feature_std());
  }
}

std::optional<Vocab> recorded_vocab(const Checkpoint& c) {
  if (!c.has("data.vocab")) return std::nullopt;
  const std::string& hex = c.text("data.vocab");
  auto bad = [&](const std::string& why) {
    return CheckpointError(fmt::format("{}: metadata 'data.vocab' {} (it holds the vocabulary's bytes in id order as "
                                       "hex digits, two per byte, rising)", c.path, why));
  };
  if (hex.empty() || hex.size() % 2) throw bad(fmt::format("has {} hex digits, not a positive even number", hex.size()));
  Vocab v;
  v.ids.fill(-1);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = hex_digit(hex[i]), lo = hex_digit(hex[i + 1]);
    if (hi < 0 || lo < 0) throw bad(fmt::format("has '{}' at offset {}, not two lowercase hex digits", hex.substr(i, 2), i));
    const auto byte = static_cast<uint8_t>(hi * 16 + lo);
    if (!v.chars.empty() && byte <= v.chars.back())
      throw bad(fmt::format("lists byte 0x{:02x} after 0x{:02x}", byte, v.chars.back()));
    v.ids[byte] = static_cast<int32_t>(v.chars.size());
    v.chars.push_back(byte);
  }
  v.size = static_cast<int64_t>(v.chars.size());
  return v;
}

std::optional<Standardization> recorded_standardization(const Checkpoint& c) {
  if (!c.has("data.mean") && !c.has("data.std")) return std::nullopt;
  Standardization s{floats_of(c, "data.mean"), floats_of(c, "data.std")};
  if (s.mean.size() != s.std.size())
    throw CheckpointError(fmt::format("{}: metadata 'data.mean' has {} columns and 'data.std' {}", c.path, s.mean.size(),
                                      s.std.size()));
  for (size_t i = 0; i < s.std.size(); ++i)
    if (!(s.std[i] > 0))
      throw CheckpointError(fmt::format("{}: metadata 'data.std' column {} is {}, not positive", c.path, i + 1, s.std[i]));
  return s;
}

}  // namespace modelc::rt

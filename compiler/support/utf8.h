// UTF-8 decoding shared by the file loader and the diagnostic renderer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace modelc {

// Length (1..4) of the well-formed UTF-8 sequence that starts at s[i], or 0 if it is not
// one: a stray continuation byte, a lead byte 0xC0/0xC1 or >= 0xF5, a truncated or
// overlong sequence, a surrogate, or a code point above U+10FFFF.
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = c >= 0xF5 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(i + k) & 0x3F);
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

}  // namespace modelc

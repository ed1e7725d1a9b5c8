// Byte counts as people read and write them: "80GiB", "1.5GB", "512 MiB". One formatter for
// the compiler's reports and the runtime's messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace modelc {

// "1.50 GiB", "312.00 KiB", "96 B" (binary units).
std::string format_bytes(int64_t bytes);

// Parses a number with an optional unit: B, KiB/MiB/GiB/TiB (and K/M/G, binary),
// KB/MB/GB/TB (decimal); "4096" is bytes; one space may separate the unit. nullopt when
// malformed, negative, or beyond 2^63.
std::optional<int64_t> parse_bytes(const std::string& text);

}  // namespace modelc

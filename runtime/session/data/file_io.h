// Reading whole data files for the loaders: plain or gzip-compressed (zlib reads both
// transparently), with errors that name the file. The error type of every data source.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace modelc::rt {

// A bad data file or data specification. The message names the file (and the line, column,
// record or tensor where there is one) and what is wrong.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The whole content of `path`, decompressed when it is gzip (any file zlib recognises by its
// magic bytes; other files are returned as they are). Throws DataError when the file is
// missing, a directory, unreadable, a truncated or corrupt gzip stream, or larger than
// `max_bytes` once decompressed.
std::vector<uint8_t> read_data_file(const std::string& path, uint64_t max_bytes = uint64_t{1} << 34);

// `path` joined to `base_dir` unless it is absolute or base_dir is empty.
std::string resolve_data_path(const std::string& base_dir, const std::string& path);

}  // namespace modelc::rt

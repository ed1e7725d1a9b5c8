// Whole-file reads through zlib's gz* API, which decompresses gzip and passes other files
// through unchanged.
#include "runtime/session/data/file_io.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace modelc::rt {

std::string resolve_data_path(const std::string& base_dir, const std::string& path) {
  if (base_dir.empty() || path.empty() || path.front() == '/') return path;
  return (std::filesystem::path(base_dir) / path).string();
}

std::vector<uint8_t> read_data_file(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw DataError(path + ": no such file");
  if (std::filesystem::is_directory(st)) throw DataError(path + ": is a directory, not a data file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw DataError(path + ": cannot open: " + std::strerror(errno));
  gzbuffer(f, 1 << 17);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      gzclose(f);
      if (code == Z_ERRNO) msg = std::strerror(errno);
      throw DataError(path + ": read error: " + msg);
    }
    if (n == 0) break;
    if (out.size() + static_cast<uint64_t>(n) > max_bytes) {
      gzclose(f);
      throw DataError(path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  // A truncated gzip stream reads as a short file; zlib reports it only through gzerror.
  int code = Z_OK;
  const char* msg = gzerror(f, &code);
  std::string err = code != Z_OK ? std::string(msg) : "";
  int rc = gzclose(f);
  if (code != Z_OK) throw DataError(path + ": corrupt or truncated gzip data: " + err);
  if (rc == Z_BUF_ERROR) throw DataError(path + ": truncated gzip data (the stream ends early)");
  if (rc != Z_OK) throw DataError(path + ": error closing the file");
  return out;
}

}  // namespace modelc::rt

// Writers of the array files people bring (.npy, .npz, safetensors of arrays), written
// from their published formats for the tests: NumPy's format (numpy.lib.format), a zip
// archive (PKWARE's APPNOTE: stored or raw deflate, optionally with zip64 extras as
// np.savez writes them) and safetensors' header.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace modelc::rt::testing {

struct NpyOptions {
  int version = 1;       // 1: a 2-byte header length; 2 and 3: 4 bytes
  bool fortran = false;  // the header says fortran_order: True (the data must be so laid out)
  bool quoted = true;    // descr is a dtype string; false: written as given (a structured dtype's list)
};

// A .npy file of `descr` ("<f8", "|b1", ">i4", ...) and `shape` holding `data` as given.
inline std::vector<uint8_t> npy_bytes(const std::string& descr, const std::vector<int64_t>& shape,
                                      const std::vector<uint8_t>& data, NpyOptions o = {}) {
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i) sh += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  sh += ")";
  std::string h = "{'descr': " + (o.quoted ? "'" + descr + "'" : descr) + ", 'fortran_order': " + (o.fortran ? "True" : "False") + ", 'shape': " + sh + ", }";
  const size_t pre = o.version == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(o.version), 0};
  for (size_t k = 0; k < pre - 8; ++k) b.push_back(static_cast<uint8_t>(h.size() >> (8 * k)));
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct ZipMember {
  std::string name;
  std::vector<uint8_t> data;
};

inline void put_le(std::vector<uint8_t>& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A zip archive of `members`, deflated or stored; zip64: every local header carries the
// zip64 extra with 0xFFFFFFFF sizes (as Python's zipfile with force_zip64, which np.savez uses).
inline std::vector<uint8_t> zip_bytes(const std::vector<ZipMember>& members, bool deflated, bool zip64 = false) {
  std::vector<uint8_t> out, dir;
  for (const ZipMember& m : members) {
    std::vector<uint8_t> body = m.data;
    if (deflated) {
      z_stream s{};
      deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
      body.assign(deflateBound(&s, static_cast<uLong>(m.data.size())), 0);
      s.next_in = const_cast<Bytef*>(m.data.data());
      s.avail_in = static_cast<uInt>(m.data.size());
      s.next_out = body.data();
      s.avail_out = static_cast<uInt>(body.size());
      if (deflate(&s, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate failed");
      body.resize(s.total_out);
      deflateEnd(&s);
    }
    const uint32_t crc = static_cast<uint32_t>(crc32(0L, m.data.data(), static_cast<uInt>(m.data.size())));
    const uint64_t offset = out.size();
    const uint16_t method = deflated ? 8 : 0;
    put_le(out, 0x04034b50, 4);
    put_le(out, 45, 2);
    put_le(out, 0, 2);
    put_le(out, method, 2);
    put_le(out, 0, 4);  // time, date
    put_le(out, crc, 4);
    put_le(out, zip64 ? 0xFFFFFFFFu : body.size(), 4);
    put_le(out, zip64 ? 0xFFFFFFFFu : m.data.size(), 4);
    put_le(out, m.name.size(), 2);
    put_le(out, zip64 ? 20 : 0, 2);
    out.insert(out.end(), m.name.begin(), m.name.end());
    if (zip64) {
      put_le(out, 1, 2);
      put_le(out, 16, 2);
      put_le(out, m.data.size(), 8);
      put_le(out, body.size(), 8);
    }
    out.insert(out.end(), body.begin(), body.end());
    put_le(dir, 0x02014b50, 4);
    put_le(dir, 45, 2);
    put_le(dir, 45, 2);
    put_le(dir, 0, 2);
    put_le(dir, method, 2);
    put_le(dir, 0, 4);
    put_le(dir, crc, 4);
    put_le(dir, body.size(), 4);
    put_le(dir, m.data.size(), 4);
    put_le(dir, m.name.size(), 2);
    put_le(dir, 0, 2);  // extra
    put_le(dir, 0, 2);  // comment
    put_le(dir, 0, 2);  // disk
    put_le(dir, 0, 2);  // internal attributes
    put_le(dir, 0, 4);  // external attributes
    put_le(dir, offset, 4);
    dir.insert(dir.end(), m.name.begin(), m.name.end());
  }
  const uint64_t dir_at = out.size();
  out.insert(out.end(), dir.begin(), dir.end());
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);
  put_le(out, members.size(), 2);
  put_le(out, members.size(), 2);
  put_le(out, dir.size(), 4);
  put_le(out, dir_at, 4);
  put_le(out, 0, 2);
  return out;
}

struct StEntry {
  std::string name, dtype;  // "F64", "I64", "U8", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// A safetensors file of `entries` in this order.
inline std::vector<uint8_t> safetensors_bytes(const std::vector<StEntry>& entries) {
  std::string h = "{";
  uint64_t off = 0;
  for (const StEntry& e : entries) {
    std::string sh;
    for (size_t i = 0; i < e.shape.size(); ++i) sh += (i ? "," : "") + std::to_string(e.shape[i]);
    h += (h.size() > 1 ? "," : "") + std::string("\"") + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":[" + sh +
         "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + e.data.size()) + "]}";
    off += e.data.size();
  }
  h += "}";
  while (h.size() % 8) h += ' ';
  std::vector<uint8_t> b;
  put_le(b, h.size(), 8);
  b.insert(b.end(), h.begin(), h.end());
  for (const StEntry& e : entries) b.insert(b.end(), e.data.begin(), e.data.end());
  return b;
}

}  // namespace modelc::rt::testing

// Readers of .npy, .npz and safetensors arrays, and their conversion to model input types.
#include "runtime/session/data/arrays.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "runtime/session/data/file_io.h"

namespace modelc::rt {

int64_t RawArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string RawArray::dtype() const {
  if (kind == 'b') return "bool";
  if (kind == 'B') return "bfloat16";
  const char* base = kind == 'f' ? "float" : kind == 'i' ? "int" : "uint";
  return fmt::format("{}{}", base, itemsize * 8);
}

namespace {

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The element count of `shape`, or -1 when a dim is negative or the product overflows.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// --- .npy --------------------------------------------------------------------------------

// The value of key `key` in the header's Python dict literal, as written between its ':'
// and the next top-level ',' or '}' (a tuple's commas are inside parentheses).
std::string dict_value(const std::string& h, const std::string& key, const std::string& origin) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) k = h.find("\"" + key + "\"");
  if (k == std::string::npos) throw DataError(fmt::format("{}: the .npy header has no '{}'", origin, key));
  size_t p = h.find(':', k);
  if (p == std::string::npos) throw DataError(fmt::format("{}: malformed .npy header at '{}'", origin, key));
  int depth = 0;
  size_t e = p + 1;
  for (; e < h.size(); ++e) {
    const char c = h[e];
    if (c == '(' || c == '[') ++depth;
    else if (c == ')' || c == ']') --depth;
    else if ((c == ',' || c == '}') && depth == 0) break;
  }
  std::string v = h.substr(p + 1, e - p - 1);
  const size_t a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t");
  return a == std::string::npos ? "" : v.substr(a, b - a + 1);
}

// descr "<f4", "|u1", ">i8", "|b1": sets kind and itemsize; true when the data is big-endian.
bool parse_descr(std::string d, RawArray& a) {
  if (d.size() < 2 || (d.front() != '\'' && d.front() != '"'))
    throw DataError(fmt::format("{}: dtype {} is a structured or unusual dtype; modelc reads arrays of one numeric "
                                "type (save the fields as separate arrays)", a.origin, d));
  d = d.substr(1, d.size() - 2);
  if (d.size() < 3) throw DataError(fmt::format("{}: unknown dtype '{}'", a.origin, d));
  const char order = d[0], kind = d[1];
  int size = 0;
  for (size_t i = 2; i < d.size(); ++i) {
    if (d[i] < '0' || d[i] > '9' || size > 100) throw DataError(fmt::format("{}: unknown dtype '{}'", a.origin, d));
    size = size * 10 + (d[i] - '0');
  }
  const bool ok = (kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
                  ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
                  (kind == 'b' && size == 1);
  if (!ok)
    throw DataError(fmt::format("{}: dtype '{}' is not one modelc reads (float16/32/64, int and uint 8-64, bool; "
                                "complex, strings, dates and objects are not data a model takes)", a.origin, d));
  a.kind = kind;
  a.itemsize = size;
  return order == '>' && size > 1;
}

std::vector<int64_t> parse_shape(const std::string& v, const std::string& origin) {
  if (v.size() < 2 || v.front() != '(' || v.back() != ')')
    throw DataError(fmt::format("{}: the .npy shape '{}' is not a tuple", origin, v));
  std::vector<int64_t> shape;
  std::string cur;
  auto flush = [&] {
    const size_t a = cur.find_first_not_of(" L"), b = cur.find_last_not_of(" L");
    if (a == std::string::npos) return;
    const std::string t = cur.substr(a, b - a + 1);
    int64_t d = 0;
    for (char c : t) {
      if (c < '0' || c > '9' || __builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, c - '0', &d))
        throw DataError(fmt::format("{}: the .npy shape '{}' holds '{}', not a size", origin, v, t));
    }
    shape.push_back(d);
    cur.clear();
  };
  for (size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] == ',') flush();
    else cur += v[i];
  }
  flush();
  return shape;
}

// C order from Fortran order: element (i0, ..., ik) sits at i0 + d0 (i1 + d1 (...)).
void fortran_to_c(RawArray& a) {
  const size_t n = static_cast<size_t>(a.numel()), w = static_cast<size_t>(a.itemsize), r = a.shape.size();
  if (r < 2 || n == 0) return;
  std::vector<uint8_t> out(a.bytes.size());
  std::vector<int64_t> idx(r, 0);
  for (size_t c = 0; c < n; ++c) {
    int64_t f = 0;
    for (size_t k = r; k-- > 0;) f = f * a.shape[k] + idx[k];
    std::memcpy(out.data() + c * w, a.bytes.data() + static_cast<size_t>(f) * w, w);
    for (size_t k = r; k-- > 0;) {  // next C-order index: the last axis fastest
      if (++idx[k] < a.shape[k]) break;
      idx[k] = 0;
    }
  }
  a.bytes = std::move(out);
}

void byteswap(RawArray& a) {
  const size_t w = static_cast<size_t>(a.itemsize);
  for (size_t i = 0; i + w <= a.bytes.size(); i += w)
    for (size_t j = 0; j < w / 2; ++j) std::swap(a.bytes[i + j], a.bytes[i + w - 1 - j]);
}

}  // namespace

RawArray parse_npy(const std::vector<uint8_t>& b, const std::string& origin) {
  RawArray a;
  a.origin = origin;
  static const uint8_t kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (b.size() < 10 || std::memcmp(b.data(), kMagic, 6) != 0)
    throw DataError(fmt::format("{}: not a .npy file (no \\x93NUMPY magic)", origin));
  const int major = b[6];
  if (major < 1 || major > 3) throw DataError(fmt::format("{}: .npy format version {}.{} is unknown", origin, major, b[7]));
  const int lenbytes = major == 1 ? 2 : 4;
  if (b.size() < static_cast<size_t>(8 + lenbytes)) throw DataError(fmt::format("{}: truncated .npy header", origin));
  const uint64_t hlen = le(b.data() + 8, lenbytes), start = 8 + static_cast<uint64_t>(lenbytes) + hlen;
  if (start > b.size()) throw DataError(fmt::format("{}: truncated .npy header ({} bytes announced)", origin, hlen));
  const std::string h(b.begin() + 8 + lenbytes, b.begin() + static_cast<std::ptrdiff_t>(start));
  const bool swap = parse_descr(dict_value(h, "descr", origin), a);
  const std::string fo = dict_value(h, "fortran_order", origin);
  if (fo != "True" && fo != "False") throw DataError(fmt::format("{}: fortran_order is '{}', not True or False", origin, fo));
  a.shape = parse_shape(dict_value(h, "shape", origin), origin);
  const int64_t n = checked_numel(a.shape);
  int64_t want = 0;
  if (n < 0 || __builtin_mul_overflow(n, a.itemsize, &want))
    throw DataError(fmt::format("{}: the shape is too large", origin));
  if (b.size() - start != static_cast<uint64_t>(want))
    throw DataError(fmt::format("{}: a {} array of shape [{}] needs {} bytes of data, the file holds {}{}", origin, a.dtype(),
                                fmt::join(a.shape, ","), want, b.size() - start,
                                b.size() - start < static_cast<uint64_t>(want) ? " (truncated)" : ""));
  a.bytes.assign(b.begin() + static_cast<std::ptrdiff_t>(start), b.end());
  if (swap) byteswap(a);
  if (fo == "True") fortran_to_c(a);
  return a;
}

RawArray read_npy(const std::string& path) { return parse_npy(read_data_file(path), path); }

// --- .npz (zip) --------------------------------------------------------------------------

namespace {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, offset = 0;
};

// The central directory's entries, zip64 fields included.
std::vector<ZipEntry> zip_directory(const std::vector<uint8_t>& z, const std::string& path) {
  auto fail = [&](const std::string& what) { return DataError(fmt::format("{}: not a readable .npz (zip) archive: {}", path, what)); };
  if (z.size() < 22) throw fail("too short");
  size_t eocd = std::string::npos;
  for (size_t i = z.size() - 22 + 1; i-- > 0 && z.size() - i <= 22 + 65535;)
    if (le(&z[i], 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) throw fail("no end-of-central-directory record");
  uint64_t count = le(&z[eocd + 10], 2), dir = le(&z[eocd + 16], 4);
  if ((count == 0xFFFF || dir == 0xFFFFFFFF) && eocd >= 20 && le(&z[eocd - 20], 4) == 0x07064b50) {
    const uint64_t at = le(&z[eocd - 12], 8);
    if (at + 56 > z.size() || le(&z[at], 4) != 0x06064b50) throw fail("a damaged zip64 end record");
    count = le(&z[at + 32], 8);
    dir = le(&z[at + 48], 8);
  }
  std::vector<ZipEntry> out;
  uint64_t p = dir;
  for (uint64_t k = 0; k < count; ++k) {
    if (p + 46 > z.size() || le(&z[p], 4) != 0x02014b50) throw fail("a damaged central directory");
    ZipEntry e;
    e.method = static_cast<uint16_t>(le(&z[p + 10], 2));
    e.crc = static_cast<uint32_t>(le(&z[p + 16], 4));
    e.csize = le(&z[p + 20], 4);
    e.usize = le(&z[p + 24], 4);
    e.offset = le(&z[p + 42], 4);
    const uint64_t nl = le(&z[p + 28], 2), xl = le(&z[p + 30], 2), cl = le(&z[p + 32], 2);
    if (p + 46 + nl + xl + cl > z.size()) throw fail("a damaged central directory");
    e.name.assign(reinterpret_cast<const char*>(&z[p + 46]), nl);
    for (uint64_t x = p + 46 + nl; x + 4 <= p + 46 + nl + xl;) {  // the zip64 extra: the fields that overflowed
      const uint64_t id = le(&z[x], 2), len = le(&z[x + 2], 2);
      uint64_t f = x + 4;
      if (id == 1)
        for (uint64_t* v : {&e.usize, &e.csize, &e.offset})
          if (*v == 0xFFFFFFFF && f + 8 <= x + 4 + len) *v = le(&z[f], 8), f += 8;
      x += 4 + len;
    }
    out.push_back(std::move(e));
    p += 46 + nl + xl + cl;
  }
  return out;
}

std::vector<uint8_t> zip_member(const std::vector<uint8_t>& z, const ZipEntry& e, const std::string& origin) {
  auto fail = [&](const std::string& what) { return DataError(fmt::format("{}: {}", origin, what)); };
  if (e.offset + 30 > z.size() || le(&z[e.offset], 4) != 0x04034b50) throw fail("damaged local header in the archive");
  const uint64_t data = e.offset + 30 + le(&z[e.offset + 26], 2) + le(&z[e.offset + 28], 2);
  if (data > z.size() || e.csize > z.size() - data) throw fail("the archive is truncated");
  if (e.usize > (uint64_t{1} << 40)) throw fail("the member is implausibly large");
  std::vector<uint8_t> out(static_cast<size_t>(e.usize));
  if (e.method == 0) {
    if (e.csize != e.usize) throw fail("a stored member whose sizes disagree");
    std::memcpy(out.data(), &z[data], out.size());
  } else if (e.method == 8) {
    z_stream s{};
    if (inflateInit2(&s, -MAX_WBITS) != Z_OK) throw fail("zlib cannot start");
    s.next_in = const_cast<Bytef*>(&z[data]);
    s.avail_in = static_cast<uInt>(e.csize);
    s.next_out = out.data();
    s.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&s, Z_FINISH);
    const uint64_t got = s.total_out;
    inflateEnd(&s);
    if (rc != Z_STREAM_END || got != e.usize) throw fail("corrupt deflate data in the archive");
  } else {
    throw fail(fmt::format("compression method {} (modelc reads stored and deflate, as np.savez and "
                           "np.savez_compressed write)", e.method));
  }
  const uLong crc = crc32(0L, out.data(), static_cast<uInt>(out.size()));
  if (static_cast<uint32_t>(crc) != e.crc) throw fail("CRC mismatch: the archive member is damaged");
  return out;
}

}  // namespace

NamedArrays read_npz(const std::string& path) {
  std::vector<uint8_t> z = read_data_file(path);
  NamedArrays out;
  for (const ZipEntry& e : zip_directory(z, path)) {
    if (e.name.empty() || e.name.back() == '/') continue;
    std::string name = e.name.ends_with(".npy") ? e.name.substr(0, e.name.size() - 4) : e.name;
    const std::string origin = fmt::format("{}: array '{}'", path, name);
    out.emplace_back(name, parse_npy(zip_member(z, e, origin), origin));
  }
  if (out.empty()) throw DataError(fmt::format("{}: the archive holds no arrays", path));
  return out;
}

// --- safetensors -------------------------------------------------------------------------

NamedArrays read_safetensors_arrays(const std::string& path) {
  using json = nlohmann::ordered_json;
  std::vector<uint8_t> f = read_data_file(path);
  auto fail = [&](const std::string& what) { return DataError(fmt::format("{}: {}", path, what)); };
  if (f.size() < 8) throw fail("too short for a safetensors file");
  const uint64_t hlen = le(f.data(), 8);
  if (hlen > f.size() - 8) throw fail(fmt::format("header length {} runs past the end of the file", hlen));
  json header;
  try {
    header = json::parse(f.begin() + 8, f.begin() + 8 + static_cast<std::ptrdiff_t>(hlen));
  } catch (const json::exception&) {
    throw fail("the header is not valid JSON (not a safetensors file?)");
  }
  if (!header.is_object()) throw fail("the header is not a JSON object");
  static const std::map<std::string, std::pair<char, int>> kTypes = {
      {"F64", {'f', 8}}, {"F32", {'f', 4}}, {"F16", {'f', 2}}, {"BF16", {'B', 2}}, {"I64", {'i', 8}},
      {"I32", {'i', 4}}, {"I16", {'i', 2}}, {"I8", {'i', 1}},  {"U64", {'u', 8}},  {"U32", {'u', 4}},
      {"U16", {'u', 2}}, {"U8", {'u', 1}},  {"BOOL", {'b', 1}}};
  const uint64_t base = 8 + hlen, data = f.size() - base;
  NamedArrays out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    RawArray a;
    a.origin = fmt::format("{}: tensor '{}'", path, it.key());
    const json& v = it.value();
    auto bad = [&](const std::string& what) { return DataError(fmt::format("{}: {}", a.origin, what)); };
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") || !v["shape"].is_array() ||
        !v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw bad("needs a dtype, a shape and two data_offsets");
    auto t = kTypes.find(v["dtype"].get<std::string>());
    if (t == kTypes.end()) throw bad(fmt::format("dtype '{}' is not one modelc reads", v["dtype"].get<std::string>()));
    a.kind = t->second.first;
    a.itemsize = t->second.second;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw bad("the shape holds something other than sizes");
      a.shape.push_back(d.get<int64_t>());
    }
    const json& o = v["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned()) throw bad("data_offsets are not offsets");
    const uint64_t lo = o[0].get<uint64_t>(), hi = o[1].get<uint64_t>();
    const int64_t n = checked_numel(a.shape);
    int64_t want = 0;
    if (n < 0 || __builtin_mul_overflow(n, a.itemsize, &want)) throw bad("the shape is too large");
    if (lo > hi || hi > data) throw bad(fmt::format("data_offsets [{}, {}] lie outside the {} bytes of data", lo, hi, data));
    if (hi - lo != static_cast<uint64_t>(want))
      throw bad(fmt::format("data_offsets give {} bytes, a {} array of shape [{}] needs {}", hi - lo, a.dtype(),
                            fmt::join(a.shape, ","), want));
    a.bytes.assign(f.begin() + static_cast<std::ptrdiff_t>(base + lo), f.begin() + static_cast<std::ptrdiff_t>(base + hi));
    out.emplace_back(it.key(), std::move(a));
  }
  if (out.empty()) throw fail("the file holds no tensors");
  return out;
}

NamedArrays read_arrays(const std::string& path) {
  if (path.ends_with(".npz")) return read_npz(path);
  if (path.ends_with(".safetensors")) return read_safetensors_arrays(path);
  NamedArrays out;
  out.emplace_back("", read_npy(path));
  return out;
}

// --- conversion --------------------------------------------------------------------------

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  if (exp == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(man), -24);
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

// Element i as a double (floats) or an integer (the rest); `is_float` says which.
struct Element {
  bool is_float = false;
  double f = 0;
  __int128 i = 0;
  std::string str() const {
    if (is_float) return fmt::format("{}", f);
    return i >= 0 ? fmt::format("{}", static_cast<unsigned long long>(i)) : fmt::format("{}", static_cast<long long>(i));
  }
};

Element element(const RawArray& a, int64_t k) {
  const uint8_t* p = a.bytes.data() + k * a.itemsize;
  const uint64_t bits = le(p, a.itemsize);
  Element e;
  if (a.kind == 'f' || a.kind == 'B') {
    e.is_float = true;
    e.f = a.kind == 'B'           ? static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits) << 16))
          : a.itemsize == 2       ? static_cast<double>(half_to_float(static_cast<uint16_t>(bits)))
          : a.itemsize == 4       ? static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits)))
                                  : std::bit_cast<double>(bits);
  } else if (a.kind == 'i') {
    const int shift = 64 - 8 * a.itemsize;
    e.i = static_cast<int64_t>(bits << shift) >> shift;  // sign-extended
  } else {
    e.i = bits;
  }
  return e;
}

}  // namespace

std::vector<uint8_t> convert_array(const RawArray& a, DType to, const std::string& input) {
  const int64_t n = a.numel(), per = a.shape.empty() || a.shape[0] == 0 ? 1 : n / a.shape[0];
  auto refuse = [&](int64_t k, const Element& e, const char* why) {
    return DataError(fmt::format("{}: element {} (example {}) is {}, {} input '{}' ({})", a.origin, k, k / per, e.str(), why,
                                 input, dtype_name(to)));
  };
  if (to == DType::F16 || to == DType::BF16) {
    const bool same = (to == DType::F16 && a.kind == 'f' && a.itemsize == 2) || (to == DType::BF16 && a.kind == 'B');
    if (!same)
      throw DataError(fmt::format("{}: a {} array cannot feed input '{}' ({}): give an array of that type", a.origin,
                                  a.dtype(), input, dtype_name(to)));
    return a.bytes;
  }
  if (to == DType::I32 && (a.kind == 'f' || a.kind == 'B'))
    throw DataError(fmt::format("{}: a {} array cannot feed input '{}' (i32, integer ids or labels): convert it "
                                "(numpy: .astype(np.int32)) if its values are whole numbers", a.origin, a.dtype(), input));
  if (to == DType::Bool && (a.kind == 'f' || a.kind == 'B'))
    throw DataError(fmt::format("{}: a {} array cannot feed input '{}' (bool): give a bool array (numpy: x != 0)", a.origin,
                                a.dtype(), input));
  std::vector<uint8_t> out(static_cast<size_t>(n) * dtype_bytes(to));
  for (int64_t k = 0; k < n; ++k) {
    const Element e = element(a, k);
    if (to == DType::F32) {
      const float v = e.is_float ? static_cast<float>(e.f) : static_cast<float>(static_cast<double>(e.i));
      if (e.is_float && std::isfinite(e.f) && !std::isfinite(v)) throw refuse(k, e, "beyond the range of");
      std::memcpy(out.data() + k * 4, &v, 4);
    } else if (to == DType::I32) {
      if (e.i < std::numeric_limits<int32_t>::min() || e.i > std::numeric_limits<int32_t>::max())
        throw refuse(k, e, "outside the range of");
      const auto v = static_cast<int32_t>(e.i);
      std::memcpy(out.data() + k * 4, &v, 4);
    } else {  // bool
      if (e.i != 0 && e.i != 1) throw refuse(k, e, "not 0 or 1, as it must be for");
      out[static_cast<size_t>(k)] = static_cast<uint8_t>(e.i);
    }
  }
  return out;
}

}  // namespace modelc::rt

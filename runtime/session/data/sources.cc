// The four data sources: IDX, CSV, text and uint16 token files, each validated as it is
// read, with errors that name the file and the place in it.
#include "runtime/session/data/sources.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/session/data/file_io.h"

namespace modelc::rt {

int64_t Examples::feature_numel() const {
  int64_t n = 1;
  for (int64_t d : feature_shape) n *= d;
  return n;
}

int64_t Examples::label_numel() const {
  int64_t n = 1;
  for (int64_t d : label_shape) n *= d;
  return n;
}

void Examples::copy(int64_t i, void* features_out, void* labels_out) const {
  if (i < 0 || i >= count) throw DataError(fmt::format("{}: example {} out of range (the source has {})", origin, i, count));
  if (context > 0) {
    const int32_t* w = tokens.data() + i * context;
    std::memcpy(features_out, w, static_cast<size_t>(context) * sizeof(int32_t));
    std::memcpy(labels_out, w + 1, static_cast<size_t>(context) * sizeof(int32_t));
    return;
  }
  const int64_t n = feature_numel();
  std::memcpy(features_out, features.data() + i * n, static_cast<size_t>(n) * sizeof(float));
  if (label_type == ElemType::F32) std::memcpy(labels_out, &targets[static_cast<size_t>(i)], sizeof(float));
  else std::memcpy(labels_out, &labels[static_cast<size_t>(i)], sizeof(int32_t));
}

char Vocab::char_of(int32_t id) const {
  if (!has_chars()) throw DataError("token vocabulary has no characters (a tokens() source)");
  if (id < 0 || id >= size) throw DataError(fmt::format("token id {} out of range: the vocabulary has {} characters", id, size));
  return static_cast<char>(chars[static_cast<size_t>(id)]);
}

std::string Vocab::decode(const int32_t* p, size_t n) const {
  std::string s;
  s.reserve(n);
  for (size_t i = 0; i < n; ++i) s += char_of(p[i]);
  return s;
}

std::vector<int32_t> Vocab::encode(const std::string& s) const {
  std::vector<int32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    int32_t id = has_chars() ? ids[static_cast<uint8_t>(s[i])] : -1;
    if (id < 0) {
      const auto byte = static_cast<uint8_t>(s[i]);
      const std::string shown = byte >= 0x20 && byte < 0x7f ? fmt::format("'{}' ", s[i]) : "";
      throw DataError(fmt::format("the character {}(byte 0x{:02x}) at offset {} is not in the vocabulary of {} "
                                  "characters the model was trained with", shown, static_cast<unsigned>(byte), i, size));
    }
    out.push_back(id);
  }
  return out;
}

namespace {

struct IdxFile {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
  size_t data_offset = 0;
};

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads and validates one IDX file of unsigned bytes with `ndim` dimensions.
IdxFile read_idx(const std::string& path, size_t ndim, const char* what) {
  IdxFile f;
  f.bytes = read_data_file(path);
  const auto& b = f.bytes;
  if (b.size() < 4) throw DataError(fmt::format("{}: truncated IDX file: {} bytes, too short for the magic number", path, b.size()));
  if (b[0] != 0 || b[1] != 0)
    throw DataError(fmt::format("{}: bad magic number 0x{:08x}: not an IDX file", path, be32(b.data())));
  if (b[2] != 0x08)
    throw DataError(fmt::format("{}: IDX element type 0x{:02x} is not supported (only unsigned bytes, 0x08)", path, b[2]));
  if (b[3] != ndim)
    throw DataError(fmt::format("{}: IDX {} file has {} dimensions, expected {} (magic 0x{:08x}, expected 0x{:08x})", path,
                                what, b[3], ndim, be32(b.data()), 0x800u + ndim));
  f.data_offset = 4 + 4 * ndim;
  if (b.size() < f.data_offset)
    throw DataError(fmt::format("{}: truncated IDX header: {} bytes, the header needs {}", path, b.size(), f.data_offset));
  uint64_t total = 1;
  for (size_t i = 0; i < ndim; ++i) {
    uint32_t d = be32(b.data() + 4 + 4 * i);
    if (d == 0) throw DataError(fmt::format("{}: IDX dimension {} is 0", path, i));
    f.dims.push_back(d);
    if (__builtin_mul_overflow(total, uint64_t{d}, &total) || total > (uint64_t{1} << 40))
      throw DataError(fmt::format("{}: IDX dimensions are absurdly large", path));
  }
  const uint64_t have = b.size() - f.data_offset;
  std::string dims_str = fmt::format("{}", fmt::join(f.dims, " x "));
  if (have < total)
    throw DataError(fmt::format("{}: truncated IDX file: the header declares {} {} ({} bytes of data), the file has {}",
                                path, dims_str, what, total, have));
  if (have > total)
    throw DataError(fmt::format("{}: {} trailing bytes after the {} {} the header declares", path, have - total, dims_str, what));
  return f;
}

constexpr double kMaxF32 = std::numeric_limits<float>::max();

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Parses a finite number spanning all of [p, e); accepts a leading '+'.
bool parse_number(const char* p, const char* e, double& v) {
  if (p < e && *p == '+') ++p;
  if (p == e) return false;
  auto [end, ec] = std::from_chars(p, e, v);
  return ec == std::errc() && end == e && std::isfinite(v);
}

// The text of a CSV field for a message, at most 40 bytes of it: printable ASCII as it is,
// a NUL as \0, a byte-order mark as U+FEFF, any other byte as \xNN (so that the message is
// neither cut at a NUL nor garbled by raw bytes).
std::string shown(const char* a, const char* z) {
  std::string s;
  const char* stop = z - a > 40 ? a + 40 : z;
  for (const char* c = a; c < stop; ++c) {
    const auto u = static_cast<unsigned char>(*c);
    if (z - c >= 3 && std::memcmp(c, "\xEF\xBB\xBF", 3) == 0) {
      s += "U+FEFF";
      c += 2;
    } else if (u == 0) {
      s += "\\0";
    } else if (u < 0x20 || u >= 0x7F) {
      s += fmt::format("\\x{:02x}", u);
    } else {
      s += *c;
    }
  }
  if (stop < z) s += "...";
  return s;
}

}  // namespace

Examples load_idx(const std::string& images_path, const std::string& labels_path, bool normalize) {
  IdxFile img = read_idx(images_path, 3, "images");
  IdxFile lab = read_idx(labels_path, 1, "labels");
  if (img.dims[0] != lab.dims[0])
    throw DataError(fmt::format("{}: {} labels, but {} has {} images", labels_path, lab.dims[0], images_path, img.dims[0]));
  Examples ex;
  ex.origin = images_path;
  ex.labels_origin = labels_path;
  ex.feature_type = ElemType::F32;
  ex.feature_shape = {img.dims[1], img.dims[2]};
  ex.count = img.dims[0];
  const size_t n = static_cast<size_t>(ex.count * img.dims[1] * img.dims[2]);
  ex.features.resize(n);
  const uint8_t* src = img.bytes.data() + img.data_offset;
  const float scale = normalize ? 1.0f / 255.0f : 1.0f;
  for (size_t i = 0; i < n; ++i) ex.features[i] = static_cast<float>(src[i]) * scale;
  ex.labels.assign(lab.bytes.begin() + static_cast<std::ptrdiff_t>(lab.data_offset), lab.bytes.end());
  return ex;
}

namespace {

// One parsed CSV field: its value and where it is, for messages.
struct CsvField {
  double v;
  int64_t col;
  const char *a, *z;
};

// Splits the line [line_start, eol) at commas into `out`; each field must be a finite number.
void split_csv_row(const std::string& path, int64_t line, const char* line_start, const char* eol, std::vector<CsvField>& out) {
  out.clear();
  for (const char* f = line_start;;) {
    const char* comma = static_cast<const char*>(std::memchr(f, ',', static_cast<size_t>(eol - f)));
    const char* a = f;
    const char* z = comma ? comma : eol;
    while (a < z && is_space(*a)) ++a;
    while (z > a && is_space(z[-1])) --z;
    const int64_t col = (a - line_start) + 1;
    const size_t field = out.size() + 1;
    double v = 0;
    if (a == z) throw DataError(fmt::format("{}:{}:{}: field {} is empty", path, line, col, field));
    if (!parse_number(a, z, v))
      throw DataError(fmt::format("{}:{}:{}: field {} '{}' is not a number", path, line, col, field, shown(a, z)));
    out.push_back({v, col, a, z});
    if (!comma) return;
    f = comma + 1;
  }
}

}  // namespace

Examples load_csv(const std::string& path, int64_t label_column, bool header, ElemType label_type, bool labeled) {
  if (label_column < -1) throw DataError(fmt::format("{}: label_column {} is invalid: use a 0-based column or -1 for the last", path, label_column));
  std::vector<uint8_t> bytes = read_data_file(path);
  const char* p = reinterpret_cast<const char*>(bytes.data());
  const char* end = p + bytes.size();
  // A UTF-8 byte-order mark (spreadsheets write one) is skipped; columns count after it.
  if (end - p >= 3 && std::memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;
  Examples ex;
  ex.origin = path;
  ex.labels_origin = path;
  ex.feature_type = ElemType::F32;
  ex.label_type = label_type;
  ex.labeled = labeled;
  int64_t width = -1, label_col = -1, width_line = 0, line = 0;
  std::vector<CsvField> row;
  while (p < end) {
    const char* eol = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (!eol) eol = end;
    const char* line_start = p;
    ++line;
    p = eol < end ? eol + 1 : end;
    if (header && line == 1) continue;
    const char* q = line_start;
    while (q < eol && is_space(*q)) ++q;
    if (q == eol) continue;  // blank line
    split_csv_row(path, line, line_start, eol, row);
    const auto field = static_cast<int64_t>(row.size());
    if (width < 0) {
      width = field;
      width_line = line;
      if (width < (labeled ? 2 : 1))
        throw DataError(fmt::format("{}:{}: a row has {} field; needs at least one feature and a label", path, line, width));
      label_col = !labeled ? -1 : label_column == -1 ? width - 1 : label_column;
      if (label_col >= width)
        throw DataError(fmt::format("{}: label_column {} is out of range: rows have {} fields (0..{})", path, label_column, width, width - 1));
      ex.feature_shape = {labeled ? width - 1 : width};
    } else if (field != width) {
      throw DataError(fmt::format("{}:{}: row has {} fields, expected {} as on line {}", path, line, field, width, width_line));
    }
    for (int64_t i = 0; i < width; ++i) {
      const CsvField& c = row[static_cast<size_t>(i)];
      if (i == label_col && label_type == ElemType::F32) {
        if (std::fabs(c.v) > kMaxF32)
          throw DataError(fmt::format("{}:{}:{}: target '{}' is too large for f32 (at most {:g} in magnitude)", path, line,
                                      c.col, shown(c.a, c.z), kMaxF32));
        ex.targets.push_back(static_cast<float>(c.v));
      } else if (i == label_col) {
        // Negative labels are read (cross_entropy's ignore_index is -100 by default); the
        // model's index limits then say which values it takes (Dataset::check_indices).
        if (c.v != std::floor(c.v) || c.v < -2147483648.0 || c.v > 2147483647.0)
          throw DataError(fmt::format("{}:{}:{}: label '{}' is not an integer class label (an i32)", path, line, c.col,
                                      shown(c.a, c.z)));
        ex.labels.push_back(static_cast<int32_t>(c.v));
      } else if (std::fabs(c.v) > kMaxF32) {  // features are f32: the value would become infinite
        throw DataError(fmt::format("{}:{}:{}: field {} '{}' is too large for f32 (at most {:g} in magnitude)", path, line,
                                    c.col, i + 1, shown(c.a, c.z), kMaxF32));
      } else {
        ex.features.push_back(static_cast<float>(c.v));
      }
    }
    if (!labeled) (label_type == ElemType::F32 ? ex.targets.push_back(0.0f) : ex.labels.push_back(0));
    ex.lines.push_back(line);
    ++ex.count;
  }
  if (ex.count == 0) throw DataError(fmt::format("{}: no data rows", path));
  return ex;
}

namespace {

Examples windows(const std::string& path, std::vector<int32_t> tokens, int64_t context, const char* unit) {
  if (context < 1) throw DataError(fmt::format("{}: context must be positive, got {}", path, context));
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n - 1 < context)
    throw DataError(fmt::format("{}: {} {}, too few for one window of context + 1 = {}", path, n, unit, static_cast<uint64_t>(context) + 1));
  Examples ex;
  ex.origin = path;
  ex.labels_origin = path;
  ex.feature_type = ElemType::I32;
  ex.feature_shape = {context};
  ex.label_shape = {context};
  ex.context = context;
  ex.count = (n - 1) / context;
  ex.tokens = std::move(tokens);
  return ex;
}

}  // namespace

Examples load_text(const std::string& path, int64_t context, Vocab& vocab) {
  std::vector<uint8_t> bytes = read_data_file(path);
  vocab = Vocab{};
  vocab.ids.fill(-1);
  std::array<bool, 256> seen{};
  for (uint8_t c : bytes) seen[c] = true;
  for (int c = 0; c < 256; ++c)
    if (seen[static_cast<size_t>(c)]) {
      vocab.ids[static_cast<size_t>(c)] = static_cast<int32_t>(vocab.chars.size());
      vocab.chars.push_back(static_cast<uint8_t>(c));
    }
  vocab.size = static_cast<int64_t>(vocab.chars.size());
  std::vector<int32_t> tokens(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) tokens[i] = vocab.ids[bytes[i]];
  Examples ex = windows(path, std::move(tokens), context, "characters");
  ex.text = true;
  return ex;
}

Examples load_tokens(const std::string& path, int64_t context, int64_t vocab_size, Vocab& vocab) {
  if (vocab_size < 1 || vocab_size > 65536)
    throw DataError(fmt::format("{}: vocab {} is out of range: uint16 tokens allow 1..65536", path, vocab_size));
  std::vector<uint8_t> bytes = read_data_file(path);
  if (bytes.size() % 2 != 0)
    throw DataError(fmt::format("{}: {} bytes, an odd count: not a stream of little-endian uint16 tokens", path, bytes.size()));
  std::vector<int32_t> tokens(bytes.size() / 2);
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t t = bytes[2 * i] | (bytes[2 * i + 1] << 8);
    if (t >= vocab_size)
      throw DataError(fmt::format("{}: token {} (at byte offset {}) is {}, not below vocab = {}", path, i, 2 * i, t, vocab_size));
    tokens[i] = t;
  }
  vocab = Vocab{};
  vocab.ids.fill(-1);
  vocab.size = vocab_size;
  return windows(path, std::move(tokens), context, "tokens");
}

}  // namespace modelc::rt

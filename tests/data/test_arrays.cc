// The array readers (.npy, .npz, safetensors of arrays) on random arrays of every dtype they
// take, written by tests/data/array_writer.h from the published formats; their conversion to
// model input types with every refusal; and the array data sources npy(), npz() and
// safetensors() as a Dataset: named batches, splits, held-out files and index checks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "runtime/session/data/arrays.h"
#include "runtime/session/data/dataset.h"
#include "runtime/session/data/file_io.h"
#include "tests/data/array_writer.h"
#include "tests/data/data_test_util.h"

namespace modelc::rt {
namespace {

using testing::expect_error;
using testing::TempDir;

struct Kind {
  const char* descr;  // numpy's, little-endian
  char kind;
  int size;
};
const Kind kKinds[] = {{"<f8", 'f', 8}, {"<f4", 'f', 4}, {"<f2", 'f', 2}, {"<i8", 'i', 8}, {"<i4", 'i', 4},
                       {"<i2", 'i', 2}, {"|i1", 'i', 1}, {"|u1", 'u', 1}, {"<u2", 'u', 2}, {"<u4", 'u', 4},
                       {"<u8", 'u', 8}, {"|b1", 'b', 1}};

// Random little-endian elements of kind k: small integers (so every integer type holds them
// and they convert to i32 and f32 exactly), floats exactly representable in half precision.
std::vector<uint8_t> random_elements(const Kind& k, int64_t n, std::mt19937_64& rng, std::vector<double>& values) {
  std::vector<uint8_t> b;
  for (int64_t i = 0; i < n; ++i) {
    double v = k.kind == 'b' ? static_cast<double>(rng() & 1)
               : k.kind == 'u' ? static_cast<double>(rng() % 100)
               : k.kind == 'i' ? static_cast<double>(static_cast<int64_t>(rng() % 200) - 100)
                               : static_cast<double>(static_cast<int64_t>(rng() % 2048) - 1024) / 8.0;
    values.push_back(v);
    uint64_t bits = 0;
    if (k.kind == 'f' && k.size == 8) bits = std::bit_cast<uint64_t>(v);
    else if (k.kind == 'f' && k.size == 4) bits = std::bit_cast<uint32_t>(static_cast<float>(v));
    else if (k.kind == 'f') {  // half: v = m * 2^e exactly, from the float's bits
      const uint32_t f = std::bit_cast<uint32_t>(static_cast<float>(v));
      const uint32_t sign = (f >> 16) & 0x8000, exp = (f >> 23) & 0xFF, man = f & 0x7FFFFF;
      bits = v == 0 ? sign : sign | ((exp - 112) << 10) | (man >> 13);
    } else {
      bits = static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    testing::put_le(b, bits, k.size);
  }
  return b;
}

std::vector<int64_t> random_shape(std::mt19937_64& rng) {
  std::vector<int64_t> s(1 + rng() % 3);
  for (int64_t& d : s) d = 1 + static_cast<int64_t>(rng() % 5);
  return s;
}

std::vector<float> as_f32(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

TEST(Npy, EveryDtypeByteOrderAndVersionReadsAsWritten) {
  auto rng = testing::test_rng(11);
  TempDir dir;
  for (const Kind& k : kKinds)
    for (int version : {1, 2, 3})
      for (bool big : {false, true}) {
        const std::vector<int64_t> shape = random_shape(rng);
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<double> values;
        std::vector<uint8_t> le = random_elements(k, n, rng, values), data = le;
        std::string descr = k.descr;
        if (big && k.size > 1) {
          descr[0] = '>';
          for (size_t i = 0; i < data.size(); i += static_cast<size_t>(k.size))
            std::reverse(data.begin() + static_cast<std::ptrdiff_t>(i), data.begin() + static_cast<std::ptrdiff_t>(i) + k.size);
        }
        testing::write_file(dir / "a.npy", testing::npy_bytes(descr, shape, data, {.version = version}));
        const RawArray a = read_npy(dir / "a.npy");
        SCOPED_TRACE(fmt::format("{} version {} shape {}", descr, version, shape_str(shape)));
        EXPECT_EQ(a.kind, k.kind);
        EXPECT_EQ(a.itemsize, k.size);
        EXPECT_EQ(a.shape, shape);
        EXPECT_EQ(a.bytes, le);
        const std::vector<float> f = as_f32(convert_array(a, DType::F32, "x"));
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(f[static_cast<size_t>(i)], static_cast<float>(values[static_cast<size_t>(i)]));
        if (k.kind != 'f') {
          const std::vector<uint8_t> ib = convert_array(a, DType::I32, "x");
          for (int64_t i = 0; i < n; ++i) {
            int32_t v;
            std::memcpy(&v, ib.data() + 4 * i, 4);
            EXPECT_EQ(v, static_cast<int32_t>(values[static_cast<size_t>(i)]));
          }
        }
      }
}

TEST(Npy, FortranOrderIsTransposedToCOrder) {
  auto rng = testing::test_rng(12);
  TempDir dir;
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<int64_t> shape = random_shape(rng);
    shape.push_back(2 + static_cast<int64_t>(rng() % 3));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<int32_t> c(static_cast<size_t>(n)), f(static_cast<size_t>(n));
    for (int32_t& v : c) v = static_cast<int32_t>(rng() % 1000);
    // Element (i0..ik) at C offset sum i_j * prod(d_{j+1..}) and Fortran offset sum i_j * prod(d_{..j-1}).
    for (int64_t ci = 0; ci < n; ++ci) {
      int64_t rest = ci, fi = 0, stride = 1;
      std::vector<int64_t> idx(shape.size());
      for (size_t j = shape.size(); j-- > 0;) idx[j] = rest % shape[j], rest /= shape[j];
      for (size_t j = 0; j < shape.size(); ++j) fi += idx[j] * stride, stride *= shape[j];
      f[static_cast<size_t>(fi)] = c[static_cast<size_t>(ci)];
    }
    testing::write_file(dir / "f.npy", testing::npy_bytes("<i4", shape, testing::bytes_of(f), {.fortran = true}));
    EXPECT_EQ(read_npy(dir / "f.npy").bytes, testing::bytes_of(c)) << shape_str(shape);
  }
}

TEST(Npy, BadFilesAreRefusedNamingTheFile) {
  TempDir dir;
  const std::string p = dir / "bad.npy";
  auto refused = [&](const std::vector<uint8_t>& b, const std::string& what) {
    testing::write_file(p, b);
    expect_error<DataError>([&] { read_npy(p); }, {p, what});
  };
  const std::vector<uint8_t> four = testing::bytes_of(std::vector<float>{1, 2, 3, 4});
  refused({'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0}, "not a .npy file");
  refused(testing::npy_bytes("<f4", {5}, four), "needs 20 bytes of data, the file holds 16 (truncated)");
  refused(testing::npy_bytes("<c16", {1}, std::vector<uint8_t>(16)), "dtype '<c16' is not one modelc reads");
  refused(testing::npy_bytes("<U3", {1}, std::vector<uint8_t>(12)), "dtype '<U3' is not one modelc reads");
  refused(testing::npy_bytes("[('a', '<f4')]", {4}, four, {.quoted = false}), "structured");
  std::vector<uint8_t> v9 = testing::npy_bytes("<f4", {4}, four);
  v9[6] = 9;
  refused(v9, "version 9.0 is unknown");
  refused({0x93, 'N', 'U', 'M', 'P'}, "not a .npy file");
  std::vector<uint8_t> short_header = testing::npy_bytes("<f4", {4}, four);
  short_header.resize(40);
  refused(short_header, "truncated .npy header");
}

TEST(ConvertArray, RefusesWhatTheInputCannotHoldNamingTheElement) {
  auto arr = [](const char* descr, std::vector<int64_t> shape, std::vector<uint8_t> data) {
    RawArray a = parse_npy(testing::npy_bytes(descr, shape, data), "a.npy");
    return a;
  };
  std::vector<int64_t> big = {1, 2, 3, int64_t{1} << 40, 5, 6};
  expect_error<DataError>([&] { convert_array(arr("<i8", {3, 2}, testing::bytes_of(big)), DType::I32, "ids"); },
                          {"a.npy: element 3 (example 1) is 1099511627776", "outside the range of input 'ids' (i32)"});
  std::vector<uint64_t> huge = {uint64_t{1} << 63};
  expect_error<DataError>([&] { convert_array(arr("<u8", {1}, testing::bytes_of(huge)), DType::I32, "ids"); },
                          {"is 9223372036854775808", "outside the range"});
  std::vector<double> wide = {1.0, 1e300};
  expect_error<DataError>([&] { convert_array(arr("<f8", {2}, testing::bytes_of(wide)), DType::F32, "x"); },
                          {"element 1 (example 1) is 1e+300", "beyond the range of input 'x' (f32)"});
  expect_error<DataError>([&] { convert_array(arr("<f8", {2}, testing::bytes_of(wide)), DType::I32, "y"); },
                          {"a float64 array cannot feed input 'y' (i32", "astype(np.int32)"});
  expect_error<DataError>([&] { convert_array(arr("<f4", {1}, testing::bytes_of(std::vector<float>{1})), DType::Bool, "m"); },
                          {"a float32 array cannot feed input 'm' (bool)"});
  expect_error<DataError>([&] { convert_array(arr("|u1", {2}, {1, 2}), DType::Bool, "m"); },
                          {"element 1 (example 1) is 2", "not 0 or 1"});
  expect_error<DataError>([&] { convert_array(arr("<f4", {1}, testing::bytes_of(std::vector<float>{1})), DType::F16, "h"); },
                          {"a float32 array cannot feed input 'h' (f16)"});
  // NaN and infinities are values a float input takes as they are.
  std::vector<double> special = {NAN, INFINITY, -INFINITY};
  const std::vector<float> f = as_f32(convert_array(arr("<f8", {3}, testing::bytes_of(special)), DType::F32, "x"));
  EXPECT_TRUE(std::isnan(f[0]));
  EXPECT_EQ(f[1], INFINITY);
  EXPECT_EQ(f[2], -INFINITY);
  EXPECT_EQ(convert_array(arr("<i2", {3}, testing::bytes_of(std::vector<int16_t>{0, 1, 1})), DType::Bool, "m"),
            (std::vector<uint8_t>{0, 1, 1}));
}

TEST(Npz, StoredDeflatedAndZip64ArchivesGiveTheirArrays) {
  auto rng = testing::test_rng(13);
  TempDir dir;
  for (bool deflate : {false, true})
    for (bool zip64 : {false, true}) {
      std::vector<testing::ZipMember> members;
      std::vector<std::vector<uint8_t>> expect;
      for (int k = 0; k < 3; ++k) {
        const Kind& kind = kKinds[rng() % std::size(kKinds)];
        std::vector<double> values;
        const std::vector<int64_t> shape = random_shape(rng);
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        expect.push_back(random_elements(kind, n, rng, values));
        members.push_back({fmt::format("a{}.npy", k), testing::npy_bytes(kind.descr, shape, expect.back())});
      }
      testing::write_file(dir / "d.npz", testing::zip_bytes(members, deflate, zip64));
      const NamedArrays got = read_npz(dir / "d.npz");
      ASSERT_EQ(got.size(), 3u);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(got[static_cast<size_t>(k)].first, fmt::format("a{}", k));
        EXPECT_EQ(got[static_cast<size_t>(k)].second.bytes, expect[static_cast<size_t>(k)]) << "deflate " << deflate;
        EXPECT_EQ(got[static_cast<size_t>(k)].second.origin, fmt::format("{}: array 'a{}'", dir / "d.npz", k));
      }
    }
}

TEST(Npz, DamagedArchivesAreRefused) {
  TempDir dir;
  const std::string p = dir / "d.npz";
  const std::vector<uint8_t> good = testing::zip_bytes(
      {{"x.npy", testing::npy_bytes("<f4", {64}, testing::bytes_of(std::vector<float>(64, 1.5f)))}}, true);
  auto refused = [&](std::vector<uint8_t> b, const std::string& what) {
    testing::write_file(p, b);
    expect_error<DataError>([&] { read_npz(p); }, {p, what});
  };
  std::vector<uint8_t> flipped = good;
  flipped[40] ^= 0x10;  // inside the deflate stream
  testing::write_file(p, flipped);
  try {
    read_npz(p);
    ADD_FAILURE() << "a damaged member was read";
  } catch (const DataError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("CRC mismatch") != std::string::npos || m.find("corrupt deflate") != std::string::npos) << m;
  }
  refused(std::vector<uint8_t>(good.begin(), good.begin() + 30), "no end-of-central-directory record");
  std::vector<uint8_t> stored = testing::zip_bytes({{"x.npy", testing::npy_bytes("|u1", {3}, {1, 2, 3})}}, false);
  stored[8] = 12;  // compression method 12: bzip2
  for (size_t i = 0; i + 4 < stored.size(); ++i)
    if (stored[i] == 0x50 && stored[i + 1] == 0x4b && stored[i + 2] == 1 && stored[i + 3] == 2) stored[i + 10] = 12;
  refused(stored, "compression method 12");
  refused(testing::zip_bytes({}, false), "holds no arrays");
}

TEST(SafetensorsArrays, EveryDtypeAndBadHeaders) {
  auto rng = testing::test_rng(14);
  TempDir dir;
  const std::pair<const char*, Kind> kinds[] = {{"F64", kKinds[0]}, {"F32", kKinds[1]}, {"F16", kKinds[2]}, {"I64", kKinds[3]},
                                                {"I32", kKinds[4]}, {"I16", kKinds[5]}, {"I8", kKinds[6]},  {"U8", kKinds[7]},
                                                {"U16", kKinds[8]}, {"U32", kKinds[9]}, {"U64", kKinds[10]}, {"BOOL", kKinds[11]}};
  std::vector<testing::StEntry> entries;
  for (const auto& [name, k] : kinds) {
    std::vector<double> values;
    const std::vector<int64_t> shape = random_shape(rng);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    entries.push_back({fmt::format("t_{}", name), name, shape, random_elements(k, n, rng, values)});
  }
  testing::write_file(dir / "a.safetensors", testing::safetensors_bytes(entries));
  const NamedArrays got = read_safetensors_arrays(dir / "a.safetensors");
  ASSERT_EQ(got.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(got[i].first, entries[i].name);
    EXPECT_EQ(got[i].second.shape, entries[i].shape);
    EXPECT_EQ(got[i].second.bytes, entries[i].data);
    EXPECT_EQ(got[i].second.kind, kinds[i].second.kind);
  }
  const std::string p = dir / "b.safetensors";
  testing::write_file(p, testing::safetensors_bytes({{"x", "F32", {3}, std::vector<uint8_t>(8)}}));
  expect_error<DataError>([&] { read_safetensors_arrays(p); }, {p, "tensor 'x'", "give 8 bytes", "needs 12"});
  testing::write_file(p, testing::safetensors_bytes({{"x", "C64", {1}, std::vector<uint8_t>(8)}}));
  expect_error<DataError>([&] { read_safetensors_arrays(p); }, {"dtype 'C64' is not one modelc reads"});
  testing::write_file(p, std::vector<uint8_t>{200, 0, 0, 0, 0, 0, 0, 0, '{', '}'});
  expect_error<DataError>([&] { read_safetensors_arrays(p); }, {p, "runs past the end"});
}

// A data set of x f64 [n, 2, 3] (a model input of [6] values), ids i64 [n] and y u8 [n].
struct ArraySet {
  int64_t n;
  std::vector<double> x;
  std::vector<int64_t> ids;
  std::vector<uint8_t> y;
};

ArraySet write_set(const TempDir& dir, std::mt19937_64& rng, int64_t n, const std::string& prefix) {
  ArraySet s{n, {}, {}, {}};
  for (int64_t i = 0; i < n * 6; ++i) s.x.push_back(static_cast<double>(rng() % 1000) / 4.0);
  for (int64_t i = 0; i < n; ++i) s.ids.push_back(static_cast<int64_t>(rng() % 10)), s.y.push_back(static_cast<uint8_t>(rng() % 2));
  testing::write_file(dir / (prefix + "x.npy"), testing::npy_bytes("<f8", {n, 2, 3}, testing::bytes_of(s.x)));
  testing::write_file(dir / (prefix + "ids.npy"), testing::npy_bytes("<i8", {n}, testing::bytes_of(s.ids)));
  testing::write_file(dir / (prefix + "y.npy"), testing::npy_bytes("|u1", {n}, s.y));
  testing::write_file(dir / (prefix + "d.npz"),
                      testing::zip_bytes({{"feat.npy", testing::npy_bytes("<f8", {n, 2, 3}, testing::bytes_of(s.x))},
                                          {"ids.npy", testing::npy_bytes("<i8", {n}, testing::bytes_of(s.ids))},
                                          {"y.npy", testing::npy_bytes("|u1", {n}, s.y)}}, true));
  return s;
}

const std::vector<InputSpec> kInputs = {{"x", DType::F32, {6}}, {"ids", DType::I32, {}}, {"y", DType::F32, {}}};

// Every named batch holds, row for row, the arrays' examples at the split's indices.
void expect_rows(const Dataset& ds, const ArraySet& s, Split split) {
  std::vector<int64_t> pos;
  for (int64_t p = 0; p < ds.size(split); ++p) pos.push_back(p);
  std::vector<std::pair<std::string, HostTensor>> b;
  ds.gather_named(split, pos, b);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].first, "x");
  EXPECT_EQ(b[0].second.shape, (std::vector<int64_t>{ds.size(split), 6}));
  for (size_t r = 0; r < pos.size(); ++r) {
    const auto i = static_cast<size_t>(ds.indices(split)[r]);
    for (size_t j = 0; j < 6; ++j) EXPECT_EQ(b[0].second.f32()[r * 6 + j], static_cast<float>(s.x[i * 6 + j]));
    EXPECT_EQ(b[1].second.i32()[r], s.ids[i]);
    EXPECT_EQ(b[2].second.f32()[r], static_cast<float>(s.y[i]));
  }
}

TEST(ArraySource, NpyAndNpzGiveEveryInputByNameRowForRow) {
  auto rng = testing::test_rng(15);
  TempDir dir;
  const int64_t n = 20 + static_cast<int64_t>(rng() % 30);
  const ArraySet s = write_set(dir, rng, n, "");
  DataSpec npy{"npy", {{"input.x", "x.npy"}, {"input.ids", "ids.npy"}, {"input.y", "y.npy"}}, {}, {}};
  auto a = Dataset::open_arrays(npy, dir.path().string(), 5, 0.25, kInputs);
  EXPECT_TRUE(a->named());
  EXPECT_EQ(a->size(Split::Heldout), std::llround(static_cast<double>(n) * 0.25));
  EXPECT_EQ(a->size(Split::Train) + a->size(Split::Heldout), n);
  expect_rows(*a, s, Split::Train);
  expect_rows(*a, s, Split::Heldout);
  DataSpec npz{"npz", {{"path", "d.npz"}, {"test", ""}, {"input.x", "feat"}, {"input.ids", "ids"}, {"input.y", "y"}}, {}, {}};
  auto b = Dataset::open_arrays(npz, dir.path().string(), 5, 0.25, kInputs);
  EXPECT_EQ(b->indices(Split::Train), a->indices(Split::Train));  // the same split from the same seed
  expect_rows(*b, s, Split::Heldout);
  // A held-out file: the training arrays all train, the test file's all evaluate, in order.
  const ArraySet t = write_set(dir, rng, 7, "test_");
  npz.strs["test"] = "test_d.npz";
  auto c = Dataset::open_arrays(npz, dir.path().string(), 5, 0.25, kInputs);
  EXPECT_EQ(c->size(Split::Train), n);
  EXPECT_EQ(c->size(Split::Heldout), 7);
  expect_rows(*c, t, Split::Heldout);
  // whole: one split of every example in file order.
  auto w = Dataset::open_arrays(npy, dir.path().string(), 5, 0.0, kInputs, /*whole=*/true);
  EXPECT_EQ(w->size(Split::Heldout), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(w->indices(Split::Heldout)[static_cast<size_t>(i)], i);
  expect_rows(*w, s, Split::Heldout);
}

TEST(ArraySource, MismatchedArraysAreRefusedNamingFileArrayAndInput) {
  auto rng = testing::test_rng(16);
  TempDir dir;
  write_set(dir, rng, 12, "");
  write_set(dir, rng, 9, "other_");
  const std::string base = dir.path().string();
  DataSpec npy{"npy", {{"input.x", "x.npy"}, {"input.ids", "other_ids.npy"}, {"input.y", "y.npy"}}, {}, {}};
  expect_error<DataError>([&] { Dataset::open_arrays(npy, base, 1, 0.2, kInputs); },
                          {"other_ids.npy: 9 examples, but", "x.npy has 12"});
  npy.strs["input.ids"] = "ids.npy";
  std::vector<InputSpec> wrong = kInputs;
  wrong[0].example_shape = {5};
  expect_error<DataError>([&] { Dataset::open_arrays(npy, base, 1, 0.2, wrong); },
                          {"x.npy: a float64 array of shape [12,2,3] gives examples of shape [2,3] (6 values); input 'x' "
                           "takes examples of shape [5] (5 values)"});
  DataSpec npz{"npz", {{"path", "d.npz"}, {"input.x", "x"}, {"input.ids", "ids"}, {"input.y", "y"}}, {}, {}};
  expect_error<DataError>([&] { Dataset::open_arrays(npz, base, 1, 0.2, kInputs); },
                          {"d.npz: no array 'x' for input 'x' (the file holds 'feat', 'ids', 'y')", "x = \"ARRAY\""});
  npy.strs.erase("input.y");
  expect_error<DataError>([&] { Dataset::open_arrays(npy, base, 1, 0.2, kInputs); }, {"input 'y' is bound to no file"});
  // An optional input may be absent: no field.
  std::vector<InputSpec> opt = kInputs;
  opt[2].optional = true;
  std::vector<std::pair<std::string, HostTensor>> b;
  Dataset::open_arrays(npy, base, 1, 0.2, opt)->gather_named(Split::Train, std::vector<int64_t>{0}, b);
  EXPECT_EQ(b.size(), 2u);
}

TEST(ArraySource, IndexLimitsNameTheArrayAndExample) {
  TempDir dir;
  const int64_t n = 10;
  std::vector<int64_t> ids(n, 3);
  ids[7] = 42;
  testing::write_file(dir / "ids.npy", testing::npy_bytes("<i8", {n}, testing::bytes_of(ids)));
  DataSpec npy{"npy", {{"input.ids", "ids.npy"}}, {}, {}};
  auto ds = Dataset::open_arrays(npy, dir.path().string(), 1, 0.2, {{"ids", DType::I32, {}}});
  Program p;
  p.model = "m";
  Function fn;
  fn.name = "eval";
  BufferDesc d;
  d.name = "ids";
  d.type = ElemType::I32;
  d.role = BufferRole::Input;
  d.index_limit = 10;
  d.index_note = "embed's table has 10 rows";
  fn.feeds.push_back({"ids", 0, 0});
  p.buffers.push_back(d);
  p.functions.push_back(fn);
  expect_error<DataError>([&] { ds->check_indices(p, "ids", false); },
                          {"ids.npy: element 7 (example 7) is 42", "input 'ids' takes values in [0, 10)", "10 rows"});
}

}  // namespace
}  // namespace modelc::rt

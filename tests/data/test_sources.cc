// The data sources on small generated files: IDX (plain and gzip), CSV, text and token
// files, and every kind of bad file each one rejects.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/session/data/file_io.h"
#include "runtime/session/data/sources.h"
#include "tests/data/data_test_util.h"

namespace modelc::rt {
namespace {

using testing::expect_error;
using testing::TempDir;

struct IdxSet {
  uint32_t n, rows, cols;
  std::vector<uint8_t> pixels, labels;
};

IdxSet random_idx(std::mt19937_64& rng) {
  IdxSet s;
  s.n = static_cast<uint32_t>(rng() % 20 + 3);
  s.rows = static_cast<uint32_t>(rng() % 5 + 2);
  s.cols = static_cast<uint32_t>(rng() % 5 + 2);
  for (uint32_t i = 0; i < s.n * s.rows * s.cols; ++i) s.pixels.push_back(static_cast<uint8_t>(rng()));
  for (uint32_t i = 0; i < s.n; ++i) s.labels.push_back(static_cast<uint8_t>(rng() % 10));
  return s;
}

void write_idx(const IdxSet& s, const std::string& img, const std::string& lab, bool gz) {
  auto w = gz ? testing::write_gzip : static_cast<void (*)(const std::string&, const std::vector<uint8_t>&)>(testing::write_file);
  w(img, testing::idx_bytes({s.n, s.rows, s.cols}, s.pixels));
  w(lab, testing::idx_bytes({s.n}, s.labels));
}

TEST(IdxSource, ReadsPlainAndGzip) {
  auto rng = testing::test_rng(1);
  TempDir dir;
  for (bool gz : {false, true}) {
    for (bool normalize : {true, false}) {
      IdxSet s = random_idx(rng);
      write_idx(s, dir / "img", dir / "lab", gz);
      Examples ex = load_idx(dir / "img", dir / "lab", normalize);
      ASSERT_EQ(ex.count, s.n);
      EXPECT_EQ(ex.feature_shape, (std::vector<int64_t>{s.rows, s.cols}));
      EXPECT_TRUE(ex.label_shape.empty());
      std::vector<float> feat(ex.feature_numel());
      for (uint32_t i = 0; i < s.n; ++i) {
        int32_t label = -1;
        ex.copy(i, feat.data(), &label);
        EXPECT_EQ(label, s.labels[i]);
        for (size_t j = 0; j < feat.size(); ++j) {
          float want = s.pixels[i * feat.size() + j] * (normalize ? 1.0f / 255.0f : 1.0f);
          ASSERT_FLOAT_EQ(feat[j], want) << "example " << i << " pixel " << j << " gz " << gz;
        }
      }
    }
  }
}

TEST(IdxSource, RejectsBadFiles) {
  auto rng = testing::test_rng(2);
  TempDir dir;
  IdxSet s = random_idx(rng);
  const auto img = testing::idx_bytes({s.n, s.rows, s.cols}, s.pixels);
  const auto lab = testing::idx_bytes({s.n}, s.labels);
  const std::string good_img = dir / "good_img", good_lab = dir / "good_lab", bad = dir / "bad";
  testing::write_file(good_img, img);
  testing::write_file(good_lab, lab);
  auto check = [&](const std::vector<uint8_t>& bytes, bool as_images, const std::vector<std::string>& parts) {
    testing::write_file(bad, bytes);
    std::vector<std::string> p = parts;
    p.push_back(bad);
    expect_error<DataError>([&] { as_images ? load_idx(bad, good_lab, true) : load_idx(good_img, bad, true); }, p);
  };
  expect_error<DataError>([&] { load_idx(dir / "missing", good_lab, true); }, {"missing", "no such file"});
  expect_error<DataError>([&] { load_idx(dir.path().string(), good_lab, true); }, {"is a directory"});
  check({}, true, {"truncated", "0 bytes"});
  check({0, 0, 8}, true, {"truncated"});
  auto magic = img;
  magic[0] = 0x12;
  check(magic, true, {"bad magic number 0x12000803", "not an IDX file"});
  auto type = img;
  type[2] = 0x0D;
  check(type, true, {"element type 0x0d is not supported"});
  check(lab, true, {"has 1 dimensions, expected 3"});
  check(img, false, {"has 3 dimensions, expected 1"});
  check(std::vector<uint8_t>(img.begin(), img.begin() + 10), true, {"truncated IDX header"});
  const size_t cut = 16 + rng() % (img.size() - 16);
  check(std::vector<uint8_t>(img.begin(), img.begin() + static_cast<std::ptrdiff_t>(cut)), true, {"truncated IDX file", "bytes of data"});
  auto extra = img;
  extra.push_back(7);
  check(extra, true, {"1 trailing bytes"});
  check(testing::idx_bytes({s.n, 0, s.cols}, {}), true, {"dimension 1 is 0"});
  check(testing::idx_bytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}), true, {"absurdly large"});
  auto fewer = s.labels;
  fewer.pop_back();
  check(testing::idx_bytes({s.n - 1}, fewer), false, {fmt::format("{} labels, but", s.n - 1), fmt::format("has {} images", s.n)});
  // The images' side of the disagreement: both files are named, with what each holds.
  auto more = s.pixels;
  more.resize(more.size() + s.rows * s.cols, 7);
  check(testing::idx_bytes({s.n + 1, s.rows, s.cols}, more), true,
        {good_lab + ": " + std::to_string(s.n) + " labels, but", fmt::format("has {} images", s.n + 1)});
}

TEST(IdxSource, RejectsTruncatedAndCorruptGzip) {
  auto rng = testing::test_rng(3);
  TempDir dir;
  IdxSet s = random_idx(rng);
  write_idx(s, dir / "img.gz", dir / "lab", true);
  const auto gz = testing::read_file(dir / "img.gz");
  ASSERT_GT(gz.size(), 20u);
  for (int trial = 0; trial < 8; ++trial) {
    // Past the 10-byte gzip header, so that zlib knows it is gzip and must notice the cut.
    const size_t cut = 10 + rng() % (gz.size() - 10);
    testing::write_file(dir / "cut.gz", std::vector<uint8_t>(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(cut)));
    expect_error<DataError>([&] { load_idx(dir / "cut.gz", dir / "lab", true); }, {dir / "cut.gz", "gzip"});
  }
  for (size_t cut = 0; cut < 10; ++cut) {  // inside the gzip header: still an error naming the file
    testing::write_file(dir / "cut.gz", std::vector<uint8_t>(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(cut)));
    expect_error<DataError>([&] { load_idx(dir / "cut.gz", dir / "lab", true); }, {dir / "cut.gz"});
  }
  auto flipped = gz;
  flipped[10 + rng() % (gz.size() - 18)] ^= 0xFF;  // inside the deflate data
  testing::write_file(dir / "flip.gz", flipped);
  expect_error<DataError>([&] { load_idx(dir / "flip.gz", dir / "lab", true); }, {dir / "flip.gz"});
}

TEST(CsvSource, ReadsRowsWithAndWithoutHeader) {
  auto rng = testing::test_rng(4);
  TempDir dir;
  for (int variant = 0; variant < 6; ++variant) {
    const bool header = variant % 2 == 1, gz = variant >= 4, crlf = variant == 2;
    const int64_t rows = static_cast<int64_t>(rng() % 15 + 2), width = static_cast<int64_t>(rng() % 5 + 2);
    const int64_t label_column = rng() % 2 ? -1 : static_cast<int64_t>(rng() % width);
    const int64_t lc = label_column < 0 ? width - 1 : label_column;
    std::string text = header ? "a,b,c,d,e,f,g\n" : "";
    std::vector<float> feats;
    std::vector<int32_t> labels;
    std::uniform_real_distribution<float> u(-100, 100);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < width; ++c) {
        if (c) text += rng() % 2 ? "," : " , ";
        if (c == lc) {
          labels.push_back(static_cast<int32_t>(rng() % 7));
          text += std::to_string(labels.back());
        } else {
          feats.push_back(u(rng));
          text += fmt::format("{}", feats.back());
        }
      }
      text += crlf ? "\r\n" : "\n";
    }
    text += "\n";  // a blank last line is allowed
    const std::string path = dir / (gz ? "t.csv.gz" : "t.csv");
    if (gz) testing::write_gzip(path, std::vector<uint8_t>(text.begin(), text.end()));
    else testing::write_file(path, text);
    Examples ex = load_csv(path, label_column, header);
    ASSERT_EQ(ex.count, rows) << text;
    EXPECT_EQ(ex.feature_shape, std::vector<int64_t>{width - 1});
    EXPECT_EQ(ex.features, feats);
    EXPECT_EQ(ex.labels, labels);
  }
}

TEST(CsvSource, RejectsBadFiles) {
  TempDir dir;
  const std::string p = dir / "bad.csv";
  auto check = [&](const std::string& text, int64_t label_column, bool header, const std::vector<std::string>& parts) {
    testing::write_file(p, text);
    expect_error<DataError>([&] { load_csv(p, label_column, header); }, parts);
  };
  check("1,2,3\n4,x5,6\n", -1, false, {p + ":2:3:", "field 2 'x5' is not a number"});
  check("h1,h2\n1,2\n3,,4\n", -1, true, {p + ":3:3:", "field 2 is empty"});
  check("1,2,3\n4,5\n", -1, false, {p + ":2:", "row has 2 fields, expected 3 as on line 1"});
  check("1,2,3\n4,5,6,7\n", -1, false, {p + ":2:", "row has 4 fields"});
  check("1,2,3.5\n", -1, false, {p + ":1:", "label '3.5' is not an integer class label (an i32)"});
  check("1,2,3\n1,2,-2147483649\n", -1, false, {p + ":2:5:", "label '-2147483649' is not an integer class label"});
  check("1,2,3\n", 3, false, {p, "label_column 3 is out of range: rows have 3 fields"});
  check("1,2,3\n", -2, false, {p, "label_column -2 is invalid"});
  check("1\n2\n", -1, false, {p + ":1:", "needs at least one feature and a label"});
  check("", -1, false, {p, "no data rows"});
  check("a,b,c\n", -1, true, {p, "no data rows"});
  check("1,nan,0\n", -1, false, {p + ":1:3:", "'nan' is not a number"});
  check("1,1e999,0\n", -1, false, {p + ":1:3:", "is not a number"});
  check("a,b\n1,2\n", -1, false, {p + ":1:1:", "'a' is not a number"});
  expect_error<DataError>([&] { load_csv(dir / "none.csv", -1, false); }, {"none.csv", "no such file"});
}

// Found by fuzz_data (tests/fuzz/data_regressions): values f32 cannot hold, and bytes a
// message must show rather than print raw.
TEST(CsvSource, RefusesValuesBeyondF32AndShowsOddBytes) {
  TempDir dir;
  const std::string p = dir / "odd.csv";
  auto check = [&](const std::string& text, const std::vector<std::string>& parts) {
    testing::write_file(p, text);
    expect_error<DataError>([&] { load_csv(p, -1, false); }, parts);
  };
  check("1,2,0\n1,1e300,0\n", {p + ":2:3:", "field 2 '1e300' is too large for f32"});
  check("-3.5e38,2,0\n", {p + ":1:1:", "field 1 '-3.5e38' is too large for f32"});
  check("1,2,1e300\n", {p + ":1:5:", "label '1e300' is not an integer class label"});
  check(std::string("1,2\0x,0\n", 8), {p + ":1:3:", "field 2 '2\\0x' is not a number"});
  check("1,\x01\xff,0\n", {p + ":1:3:", "field 2 '\\x01\\xff' is not a number"});
  check("1,2,0\n\xEF\xBB\xBF" "3,4,1\n", {p + ":2:1:", "field 1 'U+FEFF3' is not a number"});
  check("1," + std::string(60, '9') + "x,0\n", {"'" + std::string(40, '9') + "...' is not a number"});
  // f32's largest value itself is accepted; a leading byte-order mark is skipped.
  testing::write_file(p, "\xEF\xBB\xBF" "3.4028234e38,-2,1\n");
  Examples ex = load_csv(p, -1, false);
  ASSERT_EQ(ex.count, 1);
  EXPECT_EQ(ex.features, (std::vector<float>{3.4028234e38f, -2.0f}));
  EXPECT_EQ(ex.labels, std::vector<int32_t>{1});
  testing::write_file(p, "\xEF\xBB\xBF" "a,b\n5,7\n");
  EXPECT_EQ(load_csv(p, 0, true).labels, std::vector<int32_t>{5});
  // A negative label is read (an ignored class, -100 by default); the model's limits judge it.
  testing::write_file(p, "1,2,-100\n3,4,2147483647\n");
  EXPECT_EQ(load_csv(p, -1, false).labels, (std::vector<int32_t>{-100, 2147483647}));
}

TEST(TextSource, WindowsAndVocabulary) {
  TempDir dir;
  testing::write_file(dir / "t.txt", "hello world\n");
  Vocab v;
  Examples ex = load_text(dir / "t.txt", 3, v);
  EXPECT_EQ(v.size, 9);  // "\n", " ", d, e, h, l, o, r, w
  EXPECT_EQ(v.char_of(0), '\n');
  EXPECT_EQ(v.char_of(1), ' ');
  EXPECT_EQ(v.id_of('w'), 8);
  EXPECT_EQ(v.id_of('z'), -1);
  ASSERT_EQ(ex.count, 3);  // (12 - 1) / 3
  EXPECT_EQ(ex.feature_type, ElemType::I32);
  const char* want_in[] = {"hel", "lo ", "wor"};
  const char* want_tg[] = {"ell", "o w", "orl"};
  for (int i = 0; i < 3; ++i) {
    int32_t in[3], tg[3];
    ex.copy(i, in, tg);
    EXPECT_EQ(v.decode(in, 3), want_in[i]);
    EXPECT_EQ(v.decode(tg, 3), want_tg[i]);
  }
  EXPECT_EQ(v.encode("low"), (std::vector<int32_t>{5, 6, 8}));
  expect_error<DataError>([&] { v.encode("z"); }, {"not in the vocabulary"});
  expect_error<DataError>([&] { v.char_of(9); }, {"token id 9 out of range", "9 characters"});
  expect_error<DataError>([&] { ex.copy(3, nullptr, nullptr); }, {"t.txt", "example 3 out of range"});
}

TEST(TextSource, RejectsBadFiles) {
  TempDir dir;
  Vocab v;
  testing::write_file(dir / "short.txt", "abc");
  expect_error<DataError>([&] { load_text(dir / "short.txt", 3, v); }, {"short.txt", "3 characters, too few for one window of context + 1 = 4"});
  expect_error<DataError>([&] { load_text(dir / "short.txt", 0, v); }, {"short.txt", "context must be positive"});
  // context + 1 would overflow (fuzz_data).
  expect_error<DataError>([&] { load_text(dir / "short.txt", INT64_MAX, v); }, {"short.txt", "too few for one window"});
  testing::write_file(dir / "empty.txt", "");
  expect_error<DataError>([&] { load_text(dir / "empty.txt", 1, v); }, {"empty.txt", "0 characters"});
  expect_error<DataError>([&] { load_text(dir / "none.txt", 1, v); }, {"none.txt", "no such file"});
}

TEST(TokenSource, ReadsUint16Windows) {
  auto rng = testing::test_rng(5);
  TempDir dir;
  const int64_t vocab = static_cast<int64_t>(rng() % 60000 + 100), context = static_cast<int64_t>(rng() % 7 + 1);
  std::vector<int32_t> toks(static_cast<size_t>(rng() % 200 + 20));
  std::vector<uint8_t> bytes;
  for (auto& t : toks) {
    t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    bytes.push_back(static_cast<uint8_t>(t));
    bytes.push_back(static_cast<uint8_t>(t >> 8));
  }
  testing::write_file(dir / "t.bin", bytes);
  Vocab v;
  Examples ex = load_tokens(dir / "t.bin", context, vocab, v);
  EXPECT_EQ(v.size, vocab);
  EXPECT_FALSE(v.has_chars());
  ASSERT_EQ(ex.count, static_cast<int64_t>(toks.size() - 1) / context);
  std::vector<int32_t> in(static_cast<size_t>(context)), tg(static_cast<size_t>(context));
  for (int64_t i = 0; i < ex.count; ++i) {
    ex.copy(i, in.data(), tg.data());
    for (int64_t k = 0; k < context; ++k) {
      ASSERT_EQ(in[static_cast<size_t>(k)], toks[static_cast<size_t>(i * context + k)]);
      ASSERT_EQ(tg[static_cast<size_t>(k)], toks[static_cast<size_t>(i * context + k + 1)]);
    }
  }
  expect_error<DataError>([&] { v.char_of(0); }, {"no characters"});
}

TEST(TokenSource, RejectsBadFiles) {
  TempDir dir;
  Vocab v;
  testing::write_file(dir / "odd.bin", std::vector<uint8_t>{1, 0, 2});
  expect_error<DataError>([&] { load_tokens(dir / "odd.bin", 1, 10, v); }, {"odd.bin", "3 bytes, an odd count"});
  testing::write_file(dir / "big.bin", std::vector<uint8_t>{1, 0, 2, 0, 10, 0});
  expect_error<DataError>([&] { load_tokens(dir / "big.bin", 1, 10, v); }, {"big.bin", "token 2 (at byte offset 4) is 10, not below vocab = 10"});
  expect_error<DataError>([&] { load_tokens(dir / "big.bin", 1, 0, v); }, {"big.bin", "vocab 0 is out of range"});
  expect_error<DataError>([&] { load_tokens(dir / "big.bin", 1, 65537, v); }, {"vocab 65537 is out of range"});
  expect_error<DataError>([&] { load_tokens(dir / "big.bin", 3, 11, v); }, {"3 tokens, too few"});
}

TEST(FileIo, ResolvesRelativePaths) {
  EXPECT_EQ(resolve_data_path("models", "kjv.txt"), "models/kjv.txt");
  EXPECT_EQ(resolve_data_path("models", "/abs/x"), "/abs/x");
  EXPECT_EQ(resolve_data_path("", "x"), "x");
}

}  // namespace
}  // namespace modelc::rt

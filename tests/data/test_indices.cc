// Dataset::check_indices: labels and token ids checked against the index limits a program
// records on its inputs (rt::BufferDesc::index_limit), with the file, the example and the
// value named; the first bad value is found wherever it is drawn.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/session/data/dataset.h"
#include "runtime/session/data/file_io.h"
#include "tests/data/data_test_util.h"

namespace modelc::rt {
namespace {

using testing::expect_error;
using testing::TempDir;

// A program whose functions feed `features` and `labels`, with the given limits per function
// (0: none), as the compiler writes them.
Program program(std::vector<std::pair<int64_t, int64_t>> limits) {
  Program p;
  p.model = "m";
  for (size_t f = 0; f < limits.size(); ++f) {
    Function fn;
    fn.name = f == 0 ? "eval" : "train_step";
    for (auto [name, limit] : {std::pair<const char*, int64_t>{"features", limits[f].first}, {"labels", limits[f].second}}) {
      BufferDesc d;
      d.name = name;
      d.type = ElemType::I32;
      d.role = BufferRole::Input;
      d.index_limit = limit;
      d.index_note = fmt::format("the limit of {} in {}", name, fn.name);
      fn.feeds.push_back({name, 0, static_cast<uint32_t>(p.buffers.size())});
      p.buffers.push_back(d);
    }
    p.functions.push_back(fn);
  }
  return p;
}

TEST(DataIndices, CsvLabelsNameTheLine) {
  TempDir dir;
  auto rng = testing::test_rng(1);
  const int rows = 40, bad = static_cast<int>(rng() % rows);
  std::string csv = "a,b,label\n";
  int line = 1;
  std::vector<int> line_of;
  for (int i = 0; i < rows; ++i) {
    if (i % 7 == 3) csv += "\n", ++line;  // blank lines do not count as rows, but as lines
    csv += fmt::format("{},{},{}\n", rng() % 100, rng() % 100, i == bad ? 5 + rng() % 3 : rng() % 5);
    line_of.push_back(++line);
  }
  testing::write_file(dir / "d.csv", csv);
  auto ds = Dataset::open({"csv", {{"path", "d.csv"}}, {{"header", 1}}, {}}, dir.path().string(), 1, 0.25);
  ds->check_indices(program({{0, 8}}), "labels", true);  // every label is below 8
  ds->check_indices(program({{0, 0}}), "labels", true);  // no limit: nothing to check
  expect_error<DataError>([&] { ds->check_indices(program({{0, 5}}), "labels", true); },
                          {fmt::format("d.csv:{}: the label is ", line_of[static_cast<size_t>(bad)]),
                           "but input 'labels' takes values in [0, 5): the limit of labels in eval"});
  // The tightest limit of all the functions' feeds, with its note.
  expect_error<DataError>([&] { ds->check_indices(program({{0, 8}, {0, 5}}), "labels", true); },
                          {"[0, 5): the limit of labels in train_step"});
}

// A label every limited feed ignores (BufferDesc::index_ignore, cross_entropy's -100) is
// accepted; a feed that does not ignore it (an embedding of the labels) makes it an error.
TEST(DataIndices, IgnoredLabelsPass) {
  TempDir dir;
  auto rng = testing::test_rng(4);
  std::string csv;
  const int rows = 30;
  for (int i = 0; i < rows; ++i) csv += fmt::format("{},{}\n", i, i % 3 == 0 ? -100 : static_cast<int>(rng() % 4));
  testing::write_file(dir / "d.csv", csv);
  auto ds = Dataset::open({"csv", {{"path", "d.csv"}}, {}, {}}, dir.path().string(), 1, 0.25);
  Program p = program({{0, 4}, {0, 4}});
  for (BufferDesc& b : p.buffers)
    if (b.name == "labels") b.index_ignore = -100;
  ds->check_indices(p, "labels", true);
  expect_error<DataError>([&] { ds->check_indices(program({{0, 4}}), "labels", true); },
                          {"d.csv:1: the label is -100, but input 'labels' takes values in [0, 4): the limit of labels in eval"});
  p.buffers[3].index_ignore.reset();  // train_step's labels: no longer ignoring
  expect_error<DataError>([&] { ds->check_indices(p, "labels", true); }, {"d.csv:1: the label is -100"});
  // Another negative value is not the ignored one.
  csv = "0,1\n1,-1\n2,-100\n";
  testing::write_file(dir / "e.csv", csv);
  auto es = Dataset::open({"csv", {{"path", "e.csv"}}, {}, {}}, dir.path().string(), 1, 0);
  Program q = program({{0, 4}});
  q.buffers[1].index_ignore = -100;
  expect_error<DataError>([&] { es->check_indices(q, "labels", true); },
                          {"e.csv:2: the label is -1, but input 'labels' takes values in [0, 4) (or -100, the ignored "
                           "index): the limit of labels in eval"});
}

TEST(DataIndices, IdxNamesTheLabelsFileAndItsItem) {
  TempDir dir;
  auto write = [&](const std::string& stem, std::vector<uint8_t> labels) {
    const auto n = static_cast<uint32_t>(labels.size());
    testing::write_file(dir / (stem + "-images"), testing::idx_bytes({n, 2, 2}, std::vector<uint8_t>(4 * n, 7)));
    testing::write_file(dir / (stem + "-labels"), testing::idx_bytes({n}, labels));
  };
  auto rng = testing::test_rng(2);
  std::vector<uint8_t> train(30), test(9);
  for (uint8_t& l : train) l = static_cast<uint8_t>(rng() % 10);
  for (uint8_t& l : test) l = static_cast<uint8_t>(rng() % 10);
  const size_t bad = rng() % test.size();
  test[bad] = 10;  // only the test file is wrong
  write("train", train);
  write("test", test);
  DataSpec spec{"idx", {{"images", "train-images"}, {"labels", "train-labels"}, {"test_images", "test-images"},
                        {"test_labels", "test-labels"}}, {}, {}};
  auto ds = Dataset::open(spec, dir.path().string(), 1, 0);
  ds->check_indices(program({{0, 11}}), "labels", true);
  expect_error<DataError>([&] { ds->check_indices(program({{0, 10}}), "labels", true); },
                          {"test-labels: label " + std::to_string(bad) + " (0-based) is 10, but input 'labels' takes values in [0, 10)"});
  // f32 features are never ids.
  ds->check_indices(program({{1, 0}}), "features", false);
}

TEST(DataIndices, TokensSeparateInputsFromTargets) {
  TempDir dir;
  // 41 tokens, context 4: 10 windows; inputs are tokens 0..39, targets 1..40.
  std::vector<uint16_t> tokens(41);
  auto rng = testing::test_rng(3);
  for (uint16_t& t : tokens) t = static_cast<uint16_t>(rng() % 50);
  tokens[0] = 60;   // an input only
  tokens[40] = 70;  // a target only
  std::vector<uint8_t> bytes;
  for (uint16_t t : tokens) bytes.push_back(static_cast<uint8_t>(t)), bytes.push_back(static_cast<uint8_t>(t >> 8));
  testing::write_file(dir / "t.bin", bytes);
  auto ds = Dataset::open({"tokens", {{"path", "t.bin"}}, {{"context", 4}, {"vocab", 100}}, {}}, dir.path().string(), 1, 0.2);
  ds->check_indices(program({{61, 71}}), "features", false);
  ds->check_indices(program({{61, 71}}), "labels", true);
  expect_error<DataError>([&] { ds->check_indices(program({{60, 0}}), "features", false); },
                          {"t.bin: token 0 (byte offset 0) is 60, but input 'features' takes values in [0, 60)"});
  expect_error<DataError>([&] { ds->check_indices(program({{0, 70}}), "labels", true); },
                          {"t.bin: token 40 (byte offset 80) is 70, but input 'labels' takes values in [0, 70)"});
}

TEST(DataIndices, TextSaysHowManyCharactersTheCorpusHas) {
  TempDir dir;
  testing::write_file(dir / "t.txt", std::string("abcabcabcabcabcabcabcxabcabc"));  // 4 distinct bytes
  auto ds = Dataset::open({"text", {{"path", "t.txt"}}, {{"context", 3}}, {}}, dir.path().string(), 1, 0.2);
  ds->check_indices(program({{4, 4}}), "features", false);
  expect_error<DataError>([&] { ds->check_indices(program({{3, 0}}), "features", false); },
                          {"t.txt: the corpus has 4 distinct bytes, so its token ids run to 3; byte 21 (0-based) is id 3",
                           "input 'features' takes values in [0, 3)"});
}

}  // namespace
}  // namespace modelc::rt

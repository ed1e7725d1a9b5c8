// What a checkpoint records of the data's preprocessing (runtime/session/data/preprocess.h):
// a text corpus's vocabulary and csv's standardisation statistics read back exactly, damaged
// fields refused naming the file and field, and a Dataset standardised with recorded
// statistics rather than its own.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/session/data/file_io.h"
#include "runtime/session/data/preprocess.h"
#include "tests/data/data_test_util.h"

namespace modelc::rt {
namespace {

Checkpoint with(std::map<std::string, std::string> md) {
  Checkpoint c;
  c.path = "ck.safetensors";
  c.metadata = std::move(md);
  return c;
}

TEST(Preprocess, AVocabularyAndStatisticsReadBackExactly) {
  testing::TempDir dir;
  std::mt19937_64 rng = testing::test_rng(11);
  std::string text;
  for (int i = 0; i < 400; ++i) text += static_cast<char>(rng() % 2 ? 'a' + rng() % 26 : "\n ,.;:'!?"[rng() % 9]);
  testing::write_file(dir / "t.txt", text);
  auto ds = Dataset::open(DataSpec{"text", {{"path", "t.txt"}}, {{"context", 8}}, {}}, dir.path().string(), 1, 0.2);
  std::map<std::string, std::string> md;
  put_preprocessing(md, *ds);
  ASSERT_TRUE(md.count("data.vocab"));
  EXPECT_FALSE(md.count("data.mean"));
  std::optional<Vocab> v = recorded_vocab(with(md));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->chars, ds->vocab().chars);
  EXPECT_EQ(v->size, ds->vocab().size);
  EXPECT_EQ(v->encode(text.substr(0, 50)), ds->vocab().encode(text.substr(0, 50)));

  std::string csv;
  for (int i = 0; i < 40; ++i)
    csv += fmt::format("{},{},{}\n", std::uniform_real_distribution<double>(-5, 5)(rng),
                       std::uniform_real_distribution<double>(100, 200)(rng), rng() % 3);
  testing::write_file(dir / "c.csv", csv);
  auto cs = Dataset::open(DataSpec{"csv", {{"path", "c.csv"}}, {}, {}}, dir.path().string(), 1, 0.25);
  std::map<std::string, std::string> cm;
  put_preprocessing(cm, *cs);
  EXPECT_FALSE(cm.count("data.vocab"));
  std::optional<Standardization> st = recorded_standardization(with(cm));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->mean, cs->feature_mean());  // shortest round-trip text: bit-exact
  EXPECT_EQ(st->std, cs->feature_std());
  EXPECT_FALSE(recorded_vocab(with({})));
  EXPECT_FALSE(recorded_standardization(with({})));
}

TEST(Preprocess, DamagedFieldsAreRefusedNamingTheFileAndField) {
  auto vocab = [](const std::string& hex) { return [hex] { recorded_vocab(with({{"data.vocab", hex}})); }; };
  testing::expect_error<CheckpointError>(vocab("0a2"), {"ck.safetensors: metadata 'data.vocab' has 3 hex digits"});
  testing::expect_error<CheckpointError>(vocab(""), {"has 0 hex digits"});
  testing::expect_error<CheckpointError>(vocab("0a2G"), {"has '2G' at offset 2"});
  testing::expect_error<CheckpointError>(vocab("20200a"), {"lists byte 0x20 after 0x20"});
  testing::expect_error<CheckpointError>(vocab("41300a"), {"lists byte 0x30 after 0x41"});
  auto stats = [](const std::string& m, const std::string& s) {
    return [m, s] { recorded_standardization(with({{"data.mean", m}, {"data.std", s}})); };
  };
  testing::expect_error<CheckpointError>(stats("1,2", "1"), {"'data.mean' has 2 columns and 'data.std' 1"});
  testing::expect_error<CheckpointError>(stats("1,x", "1,1"), {"'data.mean' is not a comma-separated list", "item 2: 'x'"});
  testing::expect_error<CheckpointError>(stats("1,", "1,1"), {"item 2: ''"});
  testing::expect_error<CheckpointError>(stats("1,nan", "1,1"), {"item 2: 'nan'"});
  testing::expect_error<CheckpointError>(stats("1,2", "1,0"), {"'data.std' column 2 is 0, not positive"});
  testing::expect_error<CheckpointError>([] { recorded_standardization(with({{"data.mean", "1"}})); }, {"data.std"});
}

TEST(Preprocess, ADatasetIsStandardisedWithRecordedStatistics) {
  testing::TempDir dir;
  testing::write_file(dir / "c.csv", "1,10,0\n3,30,1\n5,50,0\n7,70,1\n");
  const Standardization st{{2.0f, 20.0f}, {4.0f, 0.5f}};
  auto ds = Dataset::open(DataSpec{"csv", {{"path", "c.csv"}}, {}, {}}, dir.path().string(), 1, 0.25, ElemType::I32, &st);
  EXPECT_EQ(ds->feature_mean(), st.mean);
  const std::vector<int64_t> pos = {0};
  HostTensor f, l;
  ds->gather(Split::Heldout, pos, {2}, f, l);
  const int64_t row = ds->indices(Split::Heldout)[0];
  const float raw0 = static_cast<float>(1 + 2 * row), raw1 = static_cast<float>(10 + 20 * row);
  EXPECT_EQ(f.f32()[0], (raw0 - 2.0f) / 4.0f);
  EXPECT_EQ(f.f32()[1], (raw1 - 20.0f) / 0.5f);
  const Standardization three{{0, 0, 0}, {1, 1, 1}};
  testing::expect_error<DataError>(
      [&] { Dataset::open(DataSpec{"csv", {{"path", "c.csv"}}, {}, {}}, dir.path().string(), 1, 0.25, ElemType::I32, &three); },
      {"c.csv: the examples have 2 feature columns, the trained model's standardisation statistics 3"});
}

}  // namespace
}  // namespace modelc::rt

// Datasets and loaders: opening from a DataSpec, held-out splits, csv standardisation,
// per-epoch shuffling, batching, the prefetching worker, resuming from a data position and
// the unigram entropy.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>
#include <set>

#include "runtime/session/data/file_io.h"
#include "runtime/session/data/loader.h"
#include "tests/data/data_test_util.h"

namespace modelc::rt {
namespace {

using testing::expect_error;
using testing::TempDir;

// An idx data set of n examples of 3x4 pixels whose first pixel is the example number (so
// batches can be traced back) and whose label is the number mod 10.
DataSpec make_idx(const TempDir& dir, uint32_t n, uint32_t n_test = 0) {
  auto write = [&](const std::string& stem, uint32_t count, uint8_t base) {
    std::vector<uint8_t> px, lab;
    auto rng = testing::test_rng(count);
    for (uint32_t i = 0; i < count; ++i) {
      px.push_back(static_cast<uint8_t>(base + i));
      for (int k = 1; k < 12; ++k) px.push_back(static_cast<uint8_t>(rng()));
      lab.push_back(static_cast<uint8_t>(i % 10));
    }
    testing::write_gzip(dir / (stem + "-images.gz"), testing::idx_bytes({count, 3, 4}, px));
    testing::write_file(dir / (stem + "-labels"), testing::idx_bytes({count}, lab));
  };
  write("train", n, 0);
  DataSpec spec;
  spec.kind = "idx";
  spec.strs["images"] = "train-images.gz";
  spec.strs["labels"] = "train-labels";
  spec.ints["normalize"] = 0;
  if (n_test) {
    write("test", n_test, 200);
    spec.strs["test_images"] = "test-images.gz";
    spec.strs["test_labels"] = "test-labels";
  }
  return spec;
}

// The example numbers in a batch of make_idx data (its first pixel).
std::vector<int> ids(const Batch& b) {
  std::vector<int> out;
  const int64_t per = b.features.numel() / b.size();
  for (int64_t i = 0; i < b.size(); ++i) out.push_back(static_cast<int>(b.features.f32()[i * per]));
  return out;
}

bool same(const Batch& a, const Batch& b) {
  return a.epoch == b.epoch && a.index == b.index && a.features.shape == b.features.shape && a.features.bytes == b.features.bytes &&
         a.labels.shape == b.labels.shape && a.labels.bytes == b.labels.bytes;
}

TEST(Dataset, IdxWithTestFilesAndRelativePaths) {
  TempDir dir;
  auto ds = Dataset::open(make_idx(dir, 30, 7), dir.path().string(), 1, 0.5);
  EXPECT_EQ(ds->size(Split::Train), 30);
  EXPECT_EQ(ds->size(Split::Heldout), 7);  // the test files; the validation fraction is unused
  EXPECT_EQ(ds->feature_shape(), (std::vector<int64_t>{3, 4}));
  EvalLoader ev(ds, Split::Heldout, 4, {12}, 0);
  std::vector<int> seen;
  while (auto b = ev.next())
    for (int i : ids(*b)) seen.push_back(i);
  EXPECT_EQ(seen, (std::vector<int>{200, 201, 202, 203, 204, 205, 206}));
}

// csv() for a model whose target input is f32: the label column is a float target (any
// finite value), batched as f32 beside the features; other sources refuse an f32 target.
TEST(Dataset, CsvFloatTargetsForRegression) {
  TempDir dir;
  std::string text;
  std::vector<float> targets;
  auto rng = testing::test_rng(3);
  std::uniform_real_distribution<double> u(-50, 50);
  for (int i = 0; i < 20; ++i) {
    targets.push_back(static_cast<float>(u(rng)));
    text += fmt::format("{},{},{}\n", i, 2 * i, targets.back());
  }
  testing::write_file(dir / "r.csv", text);
  DataSpec spec{"csv", {{"path", "r.csv"}}, {{"normalize", 0}}, {}};
  auto ds = Dataset::open(spec, dir.path().string(), 1, 0.25, ElemType::F32);
  EXPECT_EQ(ds->label_type(), ElemType::F32);
  EvalLoader ev(ds, Split::Train, 4, {2}, 0);
  int64_t seen = 0;
  while (auto b = ev.next()) {
    ASSERT_EQ(b->labels.type, ElemType::F32);
    for (int64_t i = 0; i < b->size(); ++i) {
      const auto row = static_cast<size_t>(b->features.f32()[i * 2]);  // column 0 is the row number
      EXPECT_EQ(b->labels.f32()[i], std::stof(fmt::format("{}", targets[row]))) << "row " << row;
      ++seen;
    }
  }
  EXPECT_EQ(seen, ds->size(Split::Train));
  // The same file for a classifier: the targets are not class numbers.
  testing::expect_error<DataError>([&] { Dataset::open(spec, dir.path().string(), 1, 0.25); },
                                   {"r.csv:1:", "is not an integer class label (an i32)"});
  testing::expect_error<DataError>([&] { Dataset::open(make_idx(dir, 10), dir.path().string(), 1, 0.25, ElemType::F32); },
                                   {"idx() gives class labels (i32), but the model's target input is f32"});
  testing::write_file(dir / "big.csv", "1,2,1e39\n");
  testing::expect_error<DataError>([&] { Dataset::open(DataSpec{"csv", {{"path", "big.csv"}}, {}, {}}, dir.path().string(),
                                                       1, 0.25, ElemType::F32); },
                                   {"big.csv:1:5:", "target '1e39' is too large for f32"});
}

TEST(Dataset, HeldOutSplitIsDisjointSeededAndSized) {
  TempDir dir;
  DataSpec spec = make_idx(dir, 40);
  const uint64_t seed = testing::test_seed();
  auto a = Dataset::open(spec, dir.path().string(), seed, 0.25);
  EXPECT_EQ(a->size(Split::Train), 30);
  EXPECT_EQ(a->size(Split::Heldout), 10);
  std::set<int64_t> all(a->indices(Split::Train).begin(), a->indices(Split::Train).end());
  for (int64_t i : a->indices(Split::Heldout)) EXPECT_TRUE(all.insert(i).second) << "example " << i << " in both splits";
  EXPECT_EQ(all.size(), 40u);
  auto b = Dataset::open(spec, dir.path().string(), seed, 0.25);
  EXPECT_EQ(a->indices(Split::Heldout), b->indices(Split::Heldout));
  auto c = Dataset::open(spec, dir.path().string(), seed + 1, 0.25);
  EXPECT_NE(a->indices(Split::Heldout), c->indices(Split::Heldout));
  auto d = Dataset::open(spec, dir.path().string(), seed, 0.0);  // none given: 0.1
  EXPECT_EQ(d->size(Split::Heldout), 4);
  auto e = Dataset::open(spec, dir.path().string(), seed, 0.001);  // at least one held out
  EXPECT_EQ(e->size(Split::Heldout), 1);
}

TEST(Dataset, CsvIsStandardisedWithTrainStatistics) {
  auto rng = testing::test_rng(7);
  TempDir dir;
  std::string text = "x,const,y,label\n";
  std::vector<std::array<double, 3>> raw;
  std::normal_distribution<double> nd(5, 3);
  for (int r = 0; r < 50; ++r) {
    raw.push_back({nd(rng), 2.0, nd(rng) * 10});
    text += fmt::format("{},{},{},{}\n", raw.back()[0], raw.back()[1], raw.back()[2], r % 3);
  }
  testing::write_file(dir / "d.csv", text);
  DataSpec spec{"csv", {{"path", "d.csv"}}, {{"header", 1}}, {}};
  auto ds = Dataset::open(spec, dir.path().string(), testing::test_seed(), 0.2);
  ASSERT_EQ(ds->size(Split::Train), 40);
  for (size_t j = 0; j < 3; ++j) {
    double s = 0, q = 0;
    for (int64_t i : ds->indices(Split::Train)) s += raw[static_cast<size_t>(i)][j];
    const double mean = s / 40;
    for (int64_t i : ds->indices(Split::Train)) q += std::pow(raw[static_cast<size_t>(i)][j] - mean, 2);
    EXPECT_NEAR(ds->feature_mean()[j], mean, 1e-4 * (1 + std::fabs(mean)));
    if (j == 1) EXPECT_EQ(ds->feature_std()[j], 1.0f);  // a constant column is only centred
    else EXPECT_NEAR(ds->feature_std()[j], std::sqrt(q / 40), 1e-4 * std::sqrt(q / 40));
  }
  for (Split split : {Split::Train, Split::Heldout}) {
    EvalLoader ev(ds, split, 64, {3}, 0);
    auto b = ev.next();
    ASSERT_TRUE(b);
    const auto& idx = ds->indices(split);
    ASSERT_EQ(b->size(), static_cast<int64_t>(idx.size()));
    for (size_t r = 0; r < idx.size(); ++r) {
      for (size_t j = 0; j < 3; ++j) {
        double want = (raw[static_cast<size_t>(idx[r])][j] - ds->feature_mean()[j]) / ds->feature_std()[j];
        EXPECT_NEAR(b->features.f32()[r * 3 + j], want, 1e-4);
      }
      EXPECT_EQ(b->labels.i32()[r], idx[r] % 3);
    }
    EXPECT_FALSE(ev.next());
  }
  spec.ints["normalize"] = 0;
  auto plain = Dataset::open(spec, dir.path().string(), testing::test_seed(), 0.2);
  EXPECT_TRUE(plain->feature_mean().empty());
}

TEST(Dataset, TextHoldsOutTheTailAndKnowsItsEntropy) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 25; ++i) text += "aaab";
  testing::write_file(dir / "t.txt", text);
  DataSpec spec{"text", {{"path", "t.txt"}}, {{"context", 3}}, {}};
  auto ds = Dataset::open(spec, dir.path().string(), 5, 0.0);
  ASSERT_EQ(ds->size(Split::Train) + ds->size(Split::Heldout), 33);  // (100 - 1) / 3 windows
  EXPECT_EQ(ds->size(Split::Heldout), 3);
  EXPECT_EQ(ds->indices(Split::Heldout), (std::vector<int64_t>{30, 31, 32}));
  EXPECT_EQ(ds->vocab().size, 2);
  EXPECT_EQ(ds->feature_type(), ElemType::I32);
  // Training targets are characters 1..90: 22 'b' (positions 3, 7, ..., 87) and 68 'a'.
  const double pa = 68.0 / 90, pb = 22.0 / 90;
  EXPECT_NEAR(ds->unigram_entropy(), -(pa * std::log(pa) + pb * std::log(pb)), 1e-12);
  TrainLoader tl(ds, 4, {3}, 1, {}, 0);
  Batch b = tl.next();
  EXPECT_EQ(b.features.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(b.labels.shape, (std::vector<int64_t>{4, 3}));
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 2; ++k) EXPECT_EQ(b.features.i32()[r * 3 + k + 1], b.labels.i32()[r * 3 + k]);
  // A uniform text over four characters in windows that cover it evenly: entropy ln 4.
  testing::write_file(dir / "u.txt", "abcdabcdabcdabcdabcdabcdabcdabcdabcdabcdabcd" "a");
  auto u = Dataset::open({"text", {{"path", "u.txt"}}, {{"context", 4}}, {}}, dir.path().string(), 5, 0.1);
  EXPECT_NEAR(u->unigram_entropy(), std::log(4.0), 1e-12);
}

TEST(Dataset, TokensFromASpec) {
  TempDir dir;
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 51; ++i) {
    bytes.push_back(static_cast<uint8_t>(i % 5 * 100));
    bytes.push_back(static_cast<uint8_t>(i % 5));
  }
  testing::write_file(dir / "t.bin", bytes);
  auto ds = Dataset::open({"tokens", {{"path", "t.bin"}}, {{"context", 5}, {"vocab", 2000}}, {}}, dir.path().string(), 3, 0.2);
  EXPECT_EQ(ds->vocab().size, 2000);
  EXPECT_EQ(ds->size(Split::Train), 8);  // 10 windows, the last 2 held out
  EXPECT_EQ(ds->size(Split::Heldout), 2);
  EXPECT_NEAR(ds->unigram_entropy(), std::log(5.0), 1e-12);  // targets 1..40 cycle through 5 ids
  EvalLoader ev(ds, Split::Heldout, 8, {5}, 0);
  auto b = ev.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->features.i32()[1], 100 + 256);  // window 8 starts at token 40
  expect_error<DataError>([&] { Dataset::open({"tokens", {{"path", "t.bin"}}, {{"context", 5}, {"vocab", 1000}}, {}}, dir.path().string(), 3, 0); },
                          {"t.bin", "not below vocab = 1000"});
}

TEST(Dataset, RejectsBadSpecs) {
  TempDir dir;
  const std::string base = dir.path().string();
  DataSpec idx = make_idx(dir, 10);
  expect_error<DataError>([&] { Dataset::open({"parquet", {}, {}, {}}, base, 0, 0); }, {"unknown data source 'parquet'"});
  expect_error<DataError>([&] { Dataset::open({"text", {}, {{"context", 3}}, {}}, base, 0, 0); }, {"text()", "missing argument 'path'"});
  testing::write_file(dir / "t.txt", "abcdefgh");
  expect_error<DataError>([&] { Dataset::open({"text", {{"path", "t.txt"}}, {}, {}}, base, 0, 0); }, {"missing argument 'context'"});
  expect_error<DataError>([&] { Dataset::open({"text", {{"path", "t.txt"}}, {}, {{"context", 2.5}}}, base, 0, 0); },
                          {"'context' must be an integer"});
  auto half = idx;
  half.strs["test_images"] = "train-images.gz";
  expect_error<DataError>([&] { Dataset::open(half, base, 0, 0); }, {"both test_images and test_labels"});
  expect_error<DataError>([&] { Dataset::open(idx, base, 0, 1.0); }, {"train-images.gz", "validation fraction 1 must be below 1"});
  expect_error<DataError>([&] { Dataset::open(idx, dir / "elsewhere", 0, 0); }, {"elsewhere/train-images.gz", "no such file"});
  testing::write_file(dir / "one.csv", "1,2\n");
  expect_error<DataError>([&] { Dataset::open({"csv", {{"path", "one.csv"}}, {}, {}}, base, 0, 0); }, {"one.csv", "too few to hold out"});
  testing::write_file(dir / "other-images", testing::idx_bytes({2, 4, 3}, std::vector<uint8_t>(24)));
  testing::write_file(dir / "other-labels", testing::idx_bytes({2}, {0, 1}));
  auto shapes = idx;
  shapes.strs["test_images"] = "other-images";
  shapes.strs["test_labels"] = "other-labels";
  expect_error<DataError>([&] { Dataset::open(shapes, base, 0, 0); }, {"other-images", "test images are [4,3], the training images [3,4]"});
  auto ds = Dataset::open(idx, base, 0, 0);
  expect_error<DataError>([&] { ds->check_input("images", ElemType::F32, {1, 28, 28}); },
                          {"train-images.gz", "input 'images' wants examples of shape [1,28,28] (784 values), the data gives [3,4] (12 values)"});
  expect_error<DataError>([&] { ds->check_input("tokens", ElemType::I32, {12}); }, {"the data gives f32 features, input 'tokens' is i32"});
  expect_error<DataError>([&] { TrainLoader(ds, 10, {12}, 0); }, {"training split has 9 examples, fewer than one batch of 10"});
  expect_error<DataError>([&] { TrainLoader(ds, 0, {12}, 0); }, {"batch size 0 must be positive"});
  expect_error<DataError>([&] { EvalLoader(ds, Split::Heldout, 0, {12}); }, {"batch size 0 must be positive"});
  expect_error<DataError>([&] { TrainLoader(ds, 2, {2, 5}, 0); }, {"wants examples of shape [2,5]"});
  expect_error<DataError>([&] { TrainLoader(ds, 2, {12}, 0, {0, 4}); }, {"data position epoch 0 batch 4 is outside an epoch of 4 batches"});
  expect_error<DataError>([&] { TrainLoader(ds, 2, {12}, 0, {-1, 0}); }, {"outside an epoch"});
}

TEST(Loader, ShufflesPerEpochDeterministically) {
  TempDir dir;
  auto ds = Dataset::open(make_idx(dir, 64, 4), dir.path().string(), 0, 0);
  const uint64_t seed = testing::test_seed();
  auto epochs = [&](uint64_t s, int n) {
    TrainLoader tl(ds, 8, {1, 3, 4}, s, {}, 0);
    EXPECT_EQ(tl.batches_per_epoch(), 8);
    std::vector<std::vector<int>> out(static_cast<size_t>(n));
    for (int e = 0; e < n; ++e)
      for (int k = 0; k < 8; ++k) {
        Batch b = tl.next();
        EXPECT_EQ(b.epoch, e);
        EXPECT_EQ(b.index, k);
        EXPECT_EQ(b.features.shape, (std::vector<int64_t>{8, 1, 3, 4}));
        EXPECT_EQ(b.labels.shape, (std::vector<int64_t>{8}));
        for (int i : ids(b)) out[static_cast<size_t>(e)].push_back(i);
        for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(b.labels.i32()[r], ids(b)[static_cast<size_t>(r)] % 10);
      }
    return out;
  };
  auto a = epochs(seed, 3);
  for (const auto& ep : a) {  // each epoch is a permutation of all 64 examples
    std::vector<int> sorted = ep;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> want(64);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted, want);
  }
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  EXPECT_EQ(a, epochs(seed, 3));
  EXPECT_NE(a[0], epochs(seed + 1, 1)[0]);
  EXPECT_EQ(shuffled_indices(1000, 42, 3), shuffled_indices(1000, 42, 3));
  EXPECT_NE(shuffled_indices(1000, 42, 3), shuffled_indices(1000, 42, 4));
}

TEST(Loader, DropsTheLastPartialTrainingBatchAndKeepsItForEvaluation) {
  TempDir dir;
  auto ds = Dataset::open(make_idx(dir, 23, 11), dir.path().string(), 0, 0);
  TrainLoader tl(ds, 5, {12}, testing::test_seed(), {}, 0);
  EXPECT_EQ(tl.batches_per_epoch(), 4);
  std::set<int> epoch0;
  for (int k = 0; k < 4; ++k)
    for (int i : ids(tl.next())) EXPECT_TRUE(epoch0.insert(i).second);
  EXPECT_EQ(epoch0.size(), 20u);
  EXPECT_EQ(tl.next().epoch, 1);
  EvalLoader ev(ds, Split::Heldout, 4, {3, 4});
  EXPECT_EQ(ev.batches(), 3);
  std::vector<int64_t> sizes;
  while (auto b = ev.next()) {
    sizes.push_back(b->size());
    EXPECT_EQ(b->features.shape, (std::vector<int64_t>{b->size(), 3, 4}));
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 3}));
  EXPECT_FALSE(ev.next());
}

TEST(Loader, PrefetchGivesTheSameBatchesAsSynchronousLoading) {
  TempDir dir;
  auto ds = Dataset::open(make_idx(dir, 50, 9), dir.path().string(), 0, 0);
  const uint64_t seed = testing::test_seed();
  TrainLoader sync(ds, 7, {12}, seed, {}, 0), pre(ds, 7, {12}, seed, {}, 3);
  for (int k = 0; k < 30; ++k) ASSERT_TRUE(same(sync.next(), pre.next())) << "batch " << k;
  EXPECT_EQ(sync.position(), pre.position());
  EvalLoader es(ds, Split::Heldout, 4, {12}, 0), ep(ds, Split::Heldout, 4, {12}, 2);
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(same(*es.next(), *ep.next()));
  EXPECT_FALSE(ep.next());
  EXPECT_FALSE(ep.next());
}

TEST(Loader, AnyWorkerCountGivesTheSameBatches) {
  TempDir dir;
  auto ds = Dataset::open(make_idx(dir, 61, 9), dir.path().string(), 0, 0);
  const uint64_t seed = testing::test_seed();
  TrainLoader one(ds, 5, {12}, seed, {}, 0);
  std::vector<Batch> want;
  for (int k = 0; k < 40; ++k) want.push_back(one.next());  // several epochs of 12 batches
  for (int workers : {2, 3, 4})
    for (int prefetch : {1, 2, 8}) {
      TrainLoader many(ds, 5, {12}, seed, {}, prefetch, workers);
      for (int k = 0; k < 40; ++k) ASSERT_TRUE(same(many.next(), want[static_cast<size_t>(k)])) << workers << " workers, batch " << k;
      TrainLoader resumed(ds, 5, {12}, seed, {2, 3}, prefetch, workers);
      ASSERT_TRUE(same(resumed.next(), want[static_cast<size_t>(2 * one.batches_per_epoch() + 3)]));
      EvalLoader e1(ds, Split::Heldout, 2, {12}, 0), en(ds, Split::Heldout, 2, {12}, prefetch, workers);
      while (auto b = e1.next()) ASSERT_TRUE(same(*b, *en.next()));
      EXPECT_FALSE(en.next());
    }
}

TEST(Loader, ResumesFromASavedPosition) {
  TempDir dir;
  auto ds = Dataset::open(make_idx(dir, 45, 5), dir.path().string(), 0, 0);
  const uint64_t seed = testing::test_seed();
  auto rng = testing::test_rng(9);
  for (int trial = 0; trial < 4; ++trial) {
    const int before = static_cast<int>(rng() % 20) + (trial == 0 ? 0 : 1), after = 12;
    TrainLoader whole(ds, 4, {12}, seed, {}, 2);
    std::vector<Batch> want;
    for (int k = 0; k < before + after; ++k) want.push_back(whole.next());
    TrainLoader first(ds, 4, {12}, seed, {}, 2);
    for (int k = 0; k < before; ++k) first.next();
    std::map<std::string, std::string> meta;
    put_position(meta, first.position());
    EXPECT_EQ(first.position(), (DataPosition{before / 11, before % 11}));
    TrainLoader resumed(ds, 4, {12}, seed, get_position(meta, "ck"), 2);
    for (int k = 0; k < after; ++k) ASSERT_TRUE(same(resumed.next(), want[static_cast<size_t>(before + k)])) << "batch " << before + k;
  }
  expect_error<DataError>([] { get_position({}, "ck.safetensors"); }, {"ck.safetensors", "no 'data.epoch'"});
  expect_error<DataError>([] { get_position({{"data.epoch", "1"}, {"data.batch", "x"}}, "ck.safetensors"); },
                          {"ck.safetensors", "'data.batch' is 'x', not a non-negative integer"});
  expect_error<DataError>([] { get_position({{"data.epoch", "-1"}, {"data.batch", "0"}}, "c"); }, {"'data.epoch' is '-1'"});
}

TEST(BatchStream, RethrowsWorkerErrorsAfterEarlierBatches) {
  for (int workers : {1, 2, 3})
    for (int prefetch : {0, 1, 3}) {
      // Batch 3 fails, and 5 too (another worker's, made first): batch 3's error comes, after 0, 1, 2.
      BatchStream s([](int64_t k) {
        if (k == 5) throw DataError("boom at 5");
        if (k == 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          throw DataError("boom at 3");
        }
        Batch b;
        b.index = k;
        return b;
      }, -1, prefetch, workers);
      for (int k = 0; k < 3; ++k) EXPECT_EQ(s.next()->index, k);
      expect_error<DataError>([&] { s.next(); }, {"boom at 3"});
      expect_error<DataError>([&] { s.next(); }, {"boom at 3"});
    }
}

TEST(BatchStream, StopsCleanlyAndStaysBounded) {
  std::atomic<int64_t> made{0};
  {
    BatchStream s([&](int64_t k) {
      made = k + 1;
      Batch b;
      b.index = k;
      return b;
    }, -1, 2);
    EXPECT_EQ(s.next()->index, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_LE(made.load(), 4);  // one taken, two queued, one being made
  }  // the destructor stops and joins a worker blocked on a full queue
  BatchStream finite([](int64_t k) { Batch b; b.index = k; return b; }, 2, 4);
  EXPECT_TRUE(finite.next());
  EXPECT_TRUE(finite.next());
  EXPECT_FALSE(finite.next());
  // Several workers stay within max(prefetch, workers) batches ahead, and stop when destroyed.
  made = 0;
  {
    std::atomic<int64_t> highest{-1};
    BatchStream s([&](int64_t k) {
      int64_t h = highest.load();
      while (k > h && !highest.compare_exchange_weak(h, k)) {
      }
      Batch b;
      b.index = k;
      return b;
    }, -1, 2, 3);
    for (int k = 0; k < 5; ++k) EXPECT_EQ(s.next()->index, k);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_LE(highest.load(), 5 + 2);  // batches 5, 6, 7 at most: three past the last taken
  }
  BatchStream finite3([](int64_t k) { Batch b; b.index = k; return b; }, 5, 2, 3);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(finite3.next()->index, k);
  EXPECT_FALSE(finite3.next());
}

}  // namespace
}  // namespace modelc::rt

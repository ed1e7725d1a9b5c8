// The watches on a held-out metric (runtime/base/metric_watch.h): the plateau schedule
// against torch.optim.lr_scheduler.ReduceLROnPlateau's learning rates
// (tests/runtime/torch_plateau.txt, written by tools/torch_plateau.py), early stopping
// against its definition written out here, the state's round trip through checkpoint
// metadata and every malformed value refused, and Session::set_lr_factor.
#include "runtime/base/metric_watch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "runtime/base/error.h"

namespace modelc::rt {
namespace {

struct PlateauCase {
  std::string name;
  Schedule s;
  std::vector<std::pair<double, double>> steps;  // metric, torch's lr after it
};

std::vector<PlateauCase> read_cases() {
  std::ifstream f(MODELC_SOURCE_DIR "/tests/runtime/torch_plateau.txt");
  EXPECT_TRUE(f) << "tests/runtime/torch_plateau.txt is missing";
  std::vector<PlateauCase> cases;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    if (line.starts_with("case ")) {
      PlateauCase c;
      std::string word, tmode, mode;
      in >> word >> c.name >> c.s.lr >> c.s.factor >> c.s.watch.patience >> c.s.watch.threshold >> tmode >>
          c.s.cooldown >> c.s.min_lr >> mode;
      c.s.kind = "plateau";
      c.s.watch.metric = "loss";
      c.s.watch.relative = tmode == "rel";
      c.s.watch.maximize = mode == "max";
      cases.push_back(c);
      continue;
    }
    std::string m, lr;
    in >> m >> lr;  // "nan" is read by strtod, not by >> double
    cases.back().steps.emplace_back(std::strtod(m.c_str(), nullptr), std::strtod(lr.c_str(), nullptr));
  }
  return cases;
}

TEST(MetricWatch, PlateauIsTorchReduceLROnPlateau) {
  const std::vector<PlateauCase> cases = read_cases();
  ASSERT_EQ(cases.size(), 6u);
  for (const PlateauCase& c : cases) {
    WatchState st = start_watch(c.s.watch);
    int reductions = 0;
    for (size_t k = 0; k < c.steps.size(); ++k) {
      reductions += plateau_step(c.s, st, c.steps[k].first, static_cast<int64_t>(k));
      const double lr = c.s.lr * st.lr_factor, want = c.steps[k].second;
      EXPECT_NEAR(lr, want, 1e-12 * want) << c.name << " evaluation " << k;
    }
    // Each case reduces the learning rate at least once (the cases are chosen to).
    EXPECT_GT(reductions, 0) << c.name;
  }
}

// Early stopping by its definition: stop at the first evaluation that ends `patience`
// evaluations in a row none of which beat the best before it by more than min_delta.
int64_t stop_index(const std::vector<double>& v, const MetricWatch& w) {
  double best = w.maximize ? -INFINITY : INFINITY;
  int64_t since = 0;
  for (size_t k = 0; k < v.size(); ++k) {
    const bool better = w.maximize ? v[k] - w.threshold > best : v[k] + w.threshold < best;
    if (better) best = v[k], since = 0;
    else if (++since >= w.patience && since > 0) return static_cast<int64_t>(k);
  }
  return -1;
}

TEST(MetricWatch, EarlyStoppingStopsAfterPatienceEvaluationsWithoutImprovement) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> noise(-1, 1);
  int stopped = 0;
  for (int trial = 0; trial < 200; ++trial) {
    MetricWatch w{"loss", trial % 2 == 1, trial % 5, trial % 3 == 0 ? 0.0 : 0.01, false};
    std::vector<double> v;
    double x = 1;
    for (int k = 0; k < 40; ++k) {
      x *= k < 10 ? 0.9 : 1.0;
      v.push_back((w.maximize ? -x : x) + 0.02 * noise(rng));
    }
    if (trial % 7 == 0) v[3] = NAN;
    WatchState st = start_watch(w);
    int64_t got = -1;
    for (size_t k = 0; k < v.size() && got < 0; ++k)
      if (early_stopping_step(w, st, v[k], static_cast<int64_t>(k))) got = static_cast<int64_t>(k);
    EXPECT_EQ(got, stop_index(v, w)) << "trial " << trial;
    stopped += got >= 0;
    if (got >= 0) {
      EXPECT_GE(st.best_step, 0);
      EXPECT_EQ(st.best, v[static_cast<size_t>(st.best_step)]);
    }
  }
  EXPECT_GT(stopped, 100);
}

TEST(MetricWatch, NanNeverImproves) {
  MetricWatch w{"loss", false, 2, 0.0, false};
  WatchState st = start_watch(w);
  EXPECT_FALSE(early_stopping_step(w, st, NAN, 0));
  EXPECT_TRUE(early_stopping_step(w, st, NAN, 1));
  EXPECT_EQ(st.best_step, -1);
}

TEST(MetricWatch, StateRoundTripsThroughMetadata) {
  WatchState st{0.1 + 0.2, 17, 3, 2, 1.0 / 3};
  std::map<std::string, std::string> md;
  put_watch(md, "plateau", st);
  WatchState back = read_watch(md, "plateau", "ck.safetensors");
  EXPECT_EQ(back.best, st.best);
  EXPECT_EQ(back.best_step, 17);
  EXPECT_EQ(back.bad, 3);
  EXPECT_EQ(back.cooldown, 2);
  EXPECT_EQ(back.lr_factor, st.lr_factor);
  put_watch(md, "fresh", start_watch(MetricWatch{"loss", false, 1, 0, false}));
  EXPECT_EQ(read_watch(md, "fresh", "x").best, std::numeric_limits<double>::infinity());
}

TEST(MetricWatch, MalformedMetadataIsRefusedNamingTheFileAndKey) {
  std::map<std::string, std::string> good;
  put_watch(good, "p", WatchState{});
  auto refused = [&](const std::string& key, const std::string& value, const std::string& words) {
    std::map<std::string, std::string> md = good;
    if (value.empty()) md.erase(key);
    else md[key] = value;
    try {
      read_watch(md, "p", "ck.safetensors");
      ADD_FAILURE() << key << " = " << value << " was accepted";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused("p.best", "", "ck.safetensors: metadata 'p.best' is missing");
  refused("p.best", "abc", "ck.safetensors: metadata 'p.best' is 'abc', not a number");
  refused("p.best", "nan", "not a number");
  refused("p.bad", "1.5", "metadata 'p.bad' is 1.5, not a whole number of at least 0");
  refused("p.best_step", "-2", "not a whole number of at least -1");
  refused("p.cooldown", "1e300", "not a whole number");
  refused("p.lr_factor", "0", "metadata 'p.lr_factor' is 0, not a factor greater than 0");
  refused("p.lr_factor", "inf", "not a factor greater than 0");
}

}  // namespace
}  // namespace modelc::rt

// modelrun's evaluation: one pass over the held-out split, reporting the loss, the accuracy of
// a classifier and every other scalar output of the model by name (an `mae` the model
// computes, a second loss), each the example-weighted mean over the split.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/session/data/dataset.h"
#include "runtime/session/session.h"

namespace modelrun {

struct EvalResult {
  double loss = 0, accuracy = NAN;
  int64_t examples = 0;
  std::vector<std::pair<std::string, double>> metrics;  // the other scalar outputs, in the model's order
};

// What the data feeds: the model's two inputs and one example's shape of the first (an array
// source feeds its batches' named inputs), and how the loader makes the batches.
struct EvalFeeds {
  std::string features, labels;
  std::vector<int64_t> example_shape;
  int prefetch = 2, workers = 1;
};

// The accuracy is computed when the model outputs `logits` whose leading dims are the
// labels' (i32 labels only); the metrics are the eval function's rank-0 float outputs other
// than `loss`.
EvalResult evaluate(modelc::rt::Session& s, const EvalFeeds& f, const std::shared_ptr<const modelc::rt::Dataset>& ds,
                    int64_t batch);

// Adds to `correct` and `predictions` the argmax predictions of `logits` [..., classes] that
// equal the i32 labels [...]; false (nothing added) when they are not shaped so.
bool count_correct(const modelc::rt::HostTensor& logits, const modelc::rt::HostTensor& labels, int64_t& correct,
                   int64_t& predictions);

// The names of the metrics evaluate reports for program p (for the metrics file's columns).
std::vector<std::string> metric_names(const modelc::rt::Program& p);

// "  accuracy 84.31%  mae 45.2210": what follows the loss in a report line.
std::string eval_summary(const EvalResult& r);

// The metrics file's row of an evaluation at `step`.
std::vector<std::pair<std::string, double>> eval_row(const EvalResult& r, int64_t step);

}  // namespace modelrun

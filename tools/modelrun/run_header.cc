#include "tools/modelrun/run_header.h"

#include <fmt/format.h>

#include <cstdio>

namespace modelrun {

using namespace modelc;

std::string count_of(int64_t n, std::string_view word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

void print_train_header(rt::Session& s, const std::string& model, const rt::Dataset& data, const rt::TrainSettings& t,
                        int64_t total, int64_t batch, int64_t per_epoch) {
  int64_t params = 0;
  for (const std::string& p : s.param_names()) params += s.param(p).numel();
  fmt::print(stderr, "model {}: {} in {}; {} training and {} held-out examples ({})\n", model,
             count_of(params, "parameter"), count_of(static_cast<int64_t>(s.param_names().size()), "tensor"),
             data.size(rt::Split::Train), data.size(rt::Split::Heldout), data.origin());
  const std::string micro =
      t.accumulate > 1 ? fmt::format("{} micro-batches of {}; ", t.accumulate, batch / t.accumulate) : "";
  fmt::print(stderr, "training {} of {} ({}{} per epoch) on {}, {}, optimizer {}, lr {}\n", count_of(total, "step"),
             count_of(batch, "example"), micro, per_epoch, s.device(), count_of(s.threads(), "thread"), t.optimizer,
             t.schedule.lr);
  if (!s.device_note().empty()) fmt::print(stderr, "not on CUDA: {}\n", s.device_note());
}

}  // namespace modelrun

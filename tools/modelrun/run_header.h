// What modelrun prints about a run before it starts: counts as a person writes them and
// the training header (the model, its data, the steps, the batch and its micro-batches).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/base/program.h"
#include "runtime/session/data/dataset.h"
#include "runtime/session/session.h"

namespace modelrun {

// "1 tensor", "4 tensors".
std::string count_of(int64_t n, std::string_view word);

// The header of `modelrun train` (stderr): `batch` is the effective batch of a step, which
// `t.accumulate` micro-batches share.
void print_train_header(modelc::rt::Session& s, const std::string& model, const modelc::rt::Dataset& data,
                        const modelc::rt::TrainSettings& t, int64_t total, int64_t batch, int64_t per_epoch);

}  // namespace modelrun

// What a trained model needs to see new data as it saw its training data, kept in the
// checkpoint's metadata so that predict and generate (and an application) apply it without
// the training corpus:
//   data.vocab         text(): the vocabulary's bytes in id order, as lowercase hex
//                      ("0a2021..." : id 0 is '\n', id 1 ' ', ...)
//   data.mean/std      csv() with normalize: the training split's per-column statistics,
//                      comma-separated, as the features were standardised
// Sources with nothing to record (idx: a fixed /255, tokens: ids as they are) write nothing.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/session/checkpoint.h"
#include "runtime/session/data/dataset.h"

namespace modelc::rt {

void put_preprocessing(std::map<std::string, std::string>& metadata, const Dataset& ds);

// The vocabulary the checkpoint records (nullopt: none). Throws CheckpointError naming the
// file and the field when it is malformed (odd length, not hex, bytes not strictly rising).
std::optional<Vocab> recorded_vocab(const Checkpoint& c);

// The csv statistics the checkpoint records (nullopt: none). Throws CheckpointError when
// they are malformed or of different lengths.
std::optional<Standardization> recorded_standardization(const Checkpoint& c);

}  // namespace modelc::rt

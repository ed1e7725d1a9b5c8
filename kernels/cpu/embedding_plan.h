// embedding and embedding_grad planned once for every device: the operands' checks and the
// message for an id out of range. The CPU twin (kernels/cpu/embedding.cc) checks the ids
// before it copies; the CUDA ops (kernels/cuda/) check them in the kernel and report the
// first bad one with embedding_id_error's words (kernels/cuda/errors.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/library.h"

namespace modelc::kernels {

// embedding(ids i32[...], table f32[rows, width]) -> f32[..., width];
// embedding_grad(ids i32[...], grad f32[..., width]; rows) -> f32[rows, width].
struct EmbeddingPlan {
  int64_t ids = 0;  // how many ids
  int64_t rows = 0, width = 0;
};
EmbeddingPlan plan_embedding(const LibCall& c);
EmbeddingPlan plan_embedding_grad(const LibCall& c);

// "id 7 at position 3 of the ids [2,4] is out of range for a table of 5 rows" (the call's
// fail() puts the op and its location in front).
std::string embedding_id_error(int64_t id, int64_t position, const std::vector<int64_t>& ids_shape, int64_t rows);

// The CPU kernels (kernels/library_ops.def): the ids are checked before anything is copied.
void embedding_cpu(const LibCall& c);
void embedding_grad_cpu(const LibCall& c);

}  // namespace modelc::kernels

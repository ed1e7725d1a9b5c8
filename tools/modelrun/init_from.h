// `modelrun train --init-from FILE [--init-only PATTERN ...]`: a run that starts from another
// run's weights (fine-tuning), as PyTorch's model.load_state_dict(torch.load(...),
// strict=...) does. Only parameters and buffers are read (never optimizer state, the step or
// the data position: the run starts at step 0); every tensor taken must have the model's
// dtype and shape.
#pragma once

#include <string>
#include <vector>

#include "runtime/session/session.h"

namespace modelrun {

// Without patterns every parameter and buffer of the model must be in the file (tensors the
// model lacks are ignored, and counted); with patterns (shell globs on names: "conv.*",
// "block.?.norm.*"), exactly the parameters and buffers they match are taken, each must be
// in the file, and a pattern that matches none of the model's is an error. Returns a line
// saying what was taken. Throws rt::CheckpointError naming the file and the tensor.
std::string init_from(modelc::rt::Session& s, const std::string& path, const std::vector<std::string>& only);

}  // namespace modelrun

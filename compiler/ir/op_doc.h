// The op reference: every callable op of the registry with its signature, what it
// computes, how it runs and its gradient, as the Markdown of docs/ops.md
// (`modelc --list-ops`; tests/golden checks that the file is what the registry says).
#pragma once

#include <string>

namespace modelc {

std::string op_reference_markdown();

}  // namespace modelc

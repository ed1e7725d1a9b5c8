// Checks of the parts of a model file that are calls to fixed vocabularies rather than
// ops: parameter initializers and the settings of a train section.
#pragma once

#include "compiler/frontend/ast.h"
#include "compiler/ir/train_config.h"
#include "compiler/ir/types.h"

namespace modelc {

class Sema;

// `init` is the initializer expression of a parameter of type `t`; fills `out` with
// init = "<name>" and its arguments (defaults included; fan_in/fan_out where they matter).
bool check_initializer(Sema& s, const ast::Expr& init, const TensorType& t, Attrs& out);

bool check_train(Sema& s, const ast::Train& t, TrainConfig& out);

}  // namespace modelc

// Clang builds only (grammar/CMakeLists.txt puts this folder first on the include path of
// modelc_grammar and its users). Debian's ANTLR 4.9 runtime headers do not compile with
// clang 14 against libstdc++: misc/InterpreterDataReader.h default-constructs a
// dfa::Vocabulary, whose `const std::vector<std::string>` members have no initializer, and
// clang (unlike gcc) deems that constructor deleted. Nothing of ours uses InterpreterData, so
// this wrapper includes that one header with a default member initializer spliced into its
// `vocabulary` member, then the real antlr4-runtime.h (whose copy of it `#pragma once` skips).
#pragma once

#include "antlr4-common.h"
#include "atn/ATN.h"
#include "Vocabulary.h"

#define vocabulary vocabulary{::antlr4::dfa::Vocabulary::EMPTY_VOCABULARY}
#include "misc/InterpreterDataReader.h"
#undef vocabulary

#include_next "antlr4-runtime.h"

// .plan files: a compiled Program on disk (docs/plan-format.md). `modelc x.model -o x.plan`
// writes one; `modelrun train x.plan` (or any embedding application) reads it with a
// runtime that links neither LLVM nor ANTLR, and the Program it gets is the one the
// compiler built in process: same buffers, kernels, functions and train settings, and
// host code that computes bit-identical results.
//
// The format: a fixed 48-byte little-endian header (magic "MODELCPL", format version,
// flags, section count, section table offset and CRC, total size, header CRC), a section
// table (kind, offset, size, CRC32 per section) and three sections:
//   'program'  everything in the Program except its host code: a small hand-written
//              little-endian binary encoding (below), plus the host target (PlanTarget)
//   'ptx'      Program::ptx, the kernels for NVPTX (may be empty)
//   'code'     the host kernels as an ELF shared object, loaded with dlopen from a memfd
// Why binary rather than JSON for 'program': floats (Init bounds, library attributes,
// schedules) must survive bit for bit, NaN and infinities included, which JSON cannot
// carry; and one bounds-checked reader of a few primitive types is easier to make total
// (every length checked against what remains, no allocation larger than the input) than a
// schema check over a parsed JSON tree.
//
// A plan's host code is machine code: load only plans you trust, as with any shared
// library. The CRCs catch damage, not tampering.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/program.h"

namespace modelc::rt {

// The version this runtime writes and the only one it reads. Any change to the layout of
// the header, the table or a section is a new version; docs/plan-format.md keeps the policy.
inline constexpr uint32_t kPlanVersion = 5;

// The machine the host code was compiled for. The compiler fills it in
// (compiler/codegen/object.h); read_plan refuses a plan whose x86 features the running
// CPU lacks. Empty: not recorded (nothing is checked).
struct PlanTarget {
  std::string arch;                   // "x86_64"
  std::string cpu;                    // LLVM's name for the CPU: "sapphirerapids", "znver4"
  std::vector<std::string> features;  // enabled target features, LLVM's names: "avx2", "fma", ...
};

// Writes `program` (minus Program::code and the host function pointers) with the host
// code `shared_object` (the bytes of a .so exporting every kernel's name) to `path`:
// checked with check_program first, written to a temporary file in the same directory,
// fsynced and renamed over `path`, so that a failure leaves no half-written plan. Throws
// RuntimeError naming the path and the problem.
void write_plan(const Program& program, const std::string& shared_object, const std::string& path,
                const PlanTarget& target = {});

// Reads a plan: checks the magic, the version, every offset and size against the file,
// every CRC, the Program's consistency (check_program) and the host target; loads the
// host code and resolves every kernel's host function. Program::code keeps the loaded
// code alive. Throws RuntimeError ("x.plan: truncated: ...", "x.plan: plan format version
// 7, this runtime reads version 5", ...). `target`, when given, receives the host target.
std::shared_ptr<Program> read_plan(const std::string& path, PlanTarget* target = nullptr);

// The bytes of a plan, without checking the Program (write_plan checks it). For tests
// that need a plan with a well-formed envelope around a bad Program.
std::string encode_plan(const Program& program, const std::string& shared_object, const PlanTarget& target = {});

// True when the file at `path` starts with the plan magic (false when it cannot be read).
bool is_plan_file(const std::string& path);

// The internal consistency of a Program: buffer, kernel and symbol ids in range, enum
// values valid, kernel and function names present and unique, micro-batches and feeds
// that agree. Throws RuntimeError saying what is wrong.
void check_program(const Program& program);

// The x86 features among `features` (LLVM's names) that the running CPU lacks, for the
// features the runtime knows how to check (checkable_cpu_features()); others are ignored.
std::vector<std::string> missing_cpu_features(const std::vector<std::string>& features);
std::vector<std::string> checkable_cpu_features();

}  // namespace modelc::rt

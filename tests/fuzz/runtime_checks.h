// What the runtime's file-reader fuzzers check for one input, shared by the libFuzzer
// targets (fuzz_runtime.cc: fuzz_plan, fuzz_checkpoint, fuzz_data) and fuzz_runtime_replay
// (their corpora and saved findings, run by ctest in every build), so that the replay
// cannot drift from the fuzzer.
//
// Each check writes the input to files in `dir` (the readers take paths) and calls the
// reader. A clean refusal is an exception of the reader's documented type (DataError,
// CheckpointError, RuntimeError) whose message starts with the file's path and holds no
// control character but newlines. Returned as problems, each a bug: any other exception
// (std::bad_alloc or std::length_error from a size taken from the input, InternalError,
// ...), a message that does not name the file or shows raw control bytes, and an accepted
// input that breaks the reader's promises (a CSV feature that is not finite, a tensor whose
// bytes do not match its shape, ...). A crash, a sanitizer report or a hang is a bug too,
// which the fuzzer (or ctest's timeout) reports by itself.
#pragma once

#include <zlib.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <string>
#include <typeinfo>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/tensor.h"
#include "runtime/session/checkpoint.h"
#include "runtime/session/data/file_io.h"
#include "runtime/session/data/sources.h"
#include "runtime/session/plan.h"

namespace modelc::fuzz {

using Problems = std::vector<std::string>;

inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// A refusal's message: names one of `paths` first, no control bytes but '\n'.
inline void check_message(const std::string& msg, const std::vector<std::string>& paths, Problems& problems) {
  bool named = false;
  for (const std::string& p : paths) named = named || msg.rfind(p, 0) == 0;
  if (!named) problems.push_back("the error does not start with the file's path: " + msg);
  for (char c : msg)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') {
      problems.push_back("the error shows a raw control byte: " + msg);
      break;
    }
}

// When set (fuzz_runtime_replay -v), each input's outcome is printed: accepted, or the error.
inline bool& verbose() {
  static bool v = false;
  return v;
}

// Runs `body`; an exception of type Clean is checked with check_message, any other is a
// problem named by its type.
template <typename Clean, typename Body>
void run_reader(const char* what, const std::vector<std::string>& paths, Problems& problems, Body&& body) {
  try {
    body();
    if (verbose()) std::fprintf(stderr, "  accepted\n");
  } catch (const Clean& e) {
    if (verbose()) std::fprintf(stderr, "  refused: %s\n", e.what());
    check_message(e.what(), paths, problems);
  } catch (const std::exception& e) {
    problems.push_back(std::string(what) + " threw " + typeid(e).name() + ": " + e.what());
  }
}

// ---- data sources (fuzz_data) -----------------------------------------------------------
// Byte 0 chooses the loader (value % 4: idx, csv, text, tokens); bytes 1..2 (a) and 3..4
// (b), little-endian, its arguments; the rest is the file. idx: the images file's length is
// a, the images file comes first, then the labels file; b & 1: normalize. csv: a & 1:
// header, label_column (a >> 1) % 64 - 1, or -2 when a >> 1 is 0x7FFF. text, tokens: the
// context is a, or for a from 0xFFF0 up one of 0, -1, INT64_MAX, INT64_MIN, 2^31, 2^40;
// tokens: the vocabulary is b + 1, or 0, 65537, -1 when byte 0 >> 2 is 1, 2, 3.

inline int64_t fuzz_context(uint16_t c) {
  static const int64_t kOdd[] = {0, -1, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                 int64_t{1} << 31, int64_t{1} << 40};
  return c >= 0xFFF0 ? kOdd[(c - 0xFFF0) % 6] : c;
}

inline void check_examples(const rt::Examples& ex, Problems& problems) {
  if (ex.count <= 0) problems.push_back("loaded with no examples");
  if (ex.context > 0) {
    if (static_cast<int64_t>(ex.tokens.size()) < ex.count * ex.context + 1) problems.push_back("too few tokens for the windows");
  } else {
    if (static_cast<int64_t>(ex.features.size()) != ex.count * ex.feature_numel()) problems.push_back("features do not match count");
    if (static_cast<int64_t>(ex.labels.size()) != ex.count) problems.push_back("labels do not match count");
    for (float v : ex.features)
      if (!std::isfinite(v)) {
        problems.push_back("a feature is not finite");
        break;
      }
    for (int32_t l : ex.labels)
      if (l < 0) {
        problems.push_back("a label is negative");
        break;
      }
  }
  if (ex.count <= 0) return;
  std::vector<uint8_t> feat(static_cast<size_t>(ex.feature_numel()) * 4);
  std::vector<int32_t> lab(static_cast<size_t>(ex.label_numel()));
  ex.copy(0, feat.data(), lab.data());
  ex.copy(ex.count - 1, feat.data(), lab.data());
}

inline Problems check_data(const uint8_t* data, size_t size, const std::string& dir) {
  Problems problems;
  if (size < 5) return problems;
  const uint8_t kind = data[0] % 4;
  const uint16_t a = static_cast<uint16_t>(data[1] | data[2] << 8), b = static_cast<uint16_t>(data[3] | data[4] << 8);
  const uint8_t* body = data + 5;
  const size_t n = size - 5;
  const std::string p1 = dir + "/input.data", p2 = dir + "/labels.data";
  run_reader<rt::DataError>("the data loader", {p1, p2}, problems, [&] {
    rt::Vocab vocab;
    if (kind == 0) {
      const size_t split = std::min<size_t>(a, n);
      write_bytes(p1, body, split);
      write_bytes(p2, body + split, n - split);
      rt::Examples ex = rt::load_idx(p1, p2, b & 1);
      check_examples(ex, problems);
      if (b & 1)
        for (float v : ex.features)
          if (v < 0 || v > 1) problems.push_back("a normalized pixel is outside [0, 1]");
    } else if (kind == 1) {
      write_bytes(p1, body, n);
      const int64_t label_column = (a >> 1) == 0x7FFF ? -2 : int64_t{a >> 1} % 64 - 1;
      check_examples(rt::load_csv(p1, label_column, a & 1), problems);
    } else if (kind == 2) {
      write_bytes(p1, body, n);
      rt::Examples ex = rt::load_text(p1, fuzz_context(a), vocab);
      check_examples(ex, problems);
      std::string s = vocab.decode(ex.tokens.data(), ex.tokens.size());
      if (vocab.encode(s) != ex.tokens) problems.push_back("text: decode then encode does not give the tokens back");
    } else {
      write_bytes(p1, body, n);
      static const int64_t kOddVocab[] = {0, 65537, -1};
      const int64_t vocab_size = (data[0] >> 2) >= 1 && (data[0] >> 2) <= 3 ? kOddVocab[(data[0] >> 2) - 1] : int64_t{b} + 1;
      rt::Examples ex = rt::load_tokens(p1, fuzz_context(a), vocab_size, vocab);
      check_examples(ex, problems);
      for (int32_t t : ex.tokens)
        if (t < 0 || t >= vocab_size) {
          problems.push_back("a token is outside the vocabulary");
          break;
        }
    }
  });
  return problems;
}

// ---- safetensors checkpoints (fuzz_checkpoint) ------------------------------------------

inline Problems check_checkpoint(const uint8_t* data, size_t size, const std::string& dir) {
  Problems problems;
  const std::string path = dir + "/input.safetensors";
  write_bytes(path, data, size);
  run_reader<rt::CheckpointError>("load_checkpoint", {path}, problems, [&] {
    rt::Checkpoint ck = rt::load_checkpoint(path);
    uint64_t total = 0;
    std::vector<rt::TensorSpec> specs;
    for (const auto& [name, t] : ck.tensors) {
      uint64_t numel = 1;
      bool overflow = false;
      for (int64_t d : t.shape) overflow = overflow || d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
      if (overflow || __builtin_mul_overflow(numel, uint64_t{dtype_bytes(t.type)}, &numel) || numel != t.bytes.size())
        problems.push_back("tensor '" + name + "': its bytes do not match its shape " + t.shape_str());
      total += t.bytes.size();
      specs.push_back({name, t.type, t.shape});
      if (ck.find(name) == nullptr) problems.push_back("find('" + name + "') finds nothing");
    }
    if (total + 8 > size) problems.push_back("the tensors hold more bytes than the file");
    rt::check_against(ck, specs);
    for (const auto& [key, value] : ck.metadata) {
      try {
        (void)ck.count(key);
      } catch (const rt::CheckpointError& e) {
        check_message(e.what(), {path}, problems);
      }
      try {
        (void)ck.seed(key);
      } catch (const rt::CheckpointError& e) {
        check_message(e.what(), {path}, problems);
      }
    }
  });
  return problems;
}

// ---- plans (fuzz_plan) --------------------------------------------------------------------
// Almost every mutation of a plan would only meet a CRC mismatch, so before writing the
// input the check recomputes (zlib crc32) the header's CRC, the section table's CRC and
// the CRC of each 'program' and 'ptx' section that lies inside the input: the fuzzer then
// exercises the program decoder and check_program. The 'code' section's CRC is left as it
// is, so that only intact host code from the seeds ever reaches dlopen (a plan's host code
// is machine code, trusted by design: plan.h). The layout (docs/plan-format.md): header
// 48 bytes, CRC of bytes 0..43 at 44, table offset (u64) at 24, section count (u32) at 16,
// table CRC at 20; 32-byte entries: kind u32 at 0, offset u64 at 8, size u64 at 16, CRC at 24.

inline uint64_t get_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(s[at + static_cast<size_t>(i)])} << (8 * i);
  return v;
}

inline void put32_le(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
}

inline uint32_t crc_of(const std::string& s, uint64_t at, uint64_t n) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(s.data() + at), n));
}

inline std::string fix_plan_crcs(std::string s) {
  if (s.size() < 48) return s;
  const uint64_t table = get_le(s, 24, 8), count = get_le(s, 16, 4);
  if (table >= 48 && count <= 16 && table <= s.size() && count * 32 <= s.size() - table) {
    for (uint64_t i = 0; i < count; ++i) {
      const size_t e = table + i * 32;
      const uint64_t kind = get_le(s, e, 4), off = get_le(s, e + 8, 8), len = get_le(s, e + 16, 8);
      if ((kind == 1 || kind == 2) && off <= s.size() && len <= s.size() - off) put32_le(s, e + 24, crc_of(s, off, len));
    }
    put32_le(s, 20, crc_of(s, table, count * 32));
  }
  put32_le(s, 44, crc_of(s, 0, 44));
  return s;
}

inline Problems check_plan(const uint8_t* data, size_t size, const std::string& dir) {
  Problems problems;
  const std::string path = dir + "/input.plan";
  std::string bytes = fix_plan_crcs(std::string(reinterpret_cast<const char*>(data), size));
  write_bytes(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  run_reader<rt::RuntimeError>("read_plan", {path}, problems, [&] {
    std::shared_ptr<rt::Program> p = rt::read_plan(path);
    try {
      rt::check_program(*p);
    } catch (const rt::RuntimeError& e) {
      problems.push_back(std::string("read_plan accepted a program that check_program refuses: ") + e.what());
    }
    for (const auto& k : p->codelets)
      if (!k.host) problems.push_back("kernel '" + k.name + "' has no host function");
  });
  return problems;
}

}  // namespace modelc::fuzz

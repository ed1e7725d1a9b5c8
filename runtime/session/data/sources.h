// Data sources: the files a `train { data = ... }` section names, read into memory as
// numbered examples of (features, label).
//
//   idx(images, labels)      ubyte IDX files (magic 0x00000803 / 0x00000801), gzip or plain;
//                            features f32 [rows, cols] (/255 when normalized), label i32 []
//   csv(path, label_column)  numeric rows, gzip or plain; features f32 [columns - 1], label i32 []
//                            (a class) or, for a model whose target input is f32, f32 [] (a
//                            regression target)
//   text(path, context)      bytes; features i32 [context] (token ids), label i32 [context]
//   tokens(path, context)    little-endian uint16 ids; same example shapes as text
//
// Text and tokens examples are windows of context + 1 consecutive tokens starting at
// multiples of `context`: window k reads tokens [k*T, k*T + T] and yields inputs
// tokens[k*T .. k*T+T) and targets tokens[k*T+1 .. k*T+T]. Consecutive windows share one
// token (the last target of one is the first input of the next), so every token but the
// first is a target exactly once and a corpus of N tokens gives floor((N-1)/T) windows; the
// tail that does not fill a window is not used.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/program.h"

namespace modelc::rt {

// Examples in memory. Dense sources (idx, csv) keep one feature row and one label per
// example; windowed sources (text, tokens) keep the token stream and cut windows on demand.
struct Examples {
  std::string origin;                  // the file(s) read, for messages
  ElemType feature_type = ElemType::F32;
  std::vector<int64_t> feature_shape;  // per example
  std::vector<int64_t> label_shape;    // per example: {} for a class label, {T} for targets
  int64_t count = 0;

  std::vector<float> features;  // dense: count * feature_numel()
  std::vector<int32_t> labels;  // dense: count (label_type i32)
  ElemType label_type = ElemType::I32;
  std::vector<float> targets;   // dense with label_type f32: count
  std::vector<int32_t> tokens;  // windowed: the whole stream
  int64_t context = 0;          // windowed: T (0: dense)
  // Where each value came from, for messages: the file of the labels (idx: the labels
  // file; else origin), csv: the line of each example, windowed: bytes (text) or uint16s.
  std::string labels_origin;
  std::vector<int64_t> lines;
  bool text = false;
  bool labeled = true;  // false: unlabeled csv, whose labels are zeros standing in
  // Array sources (npy, npz, safetensors): one field per model input, by the input's name,
  // converted to its element type and shaped as one example of it; `count` examples each.
  // The other members above are unused then.
  struct Field {
    std::string name, origin;
    ElemType type = ElemType::F32;
    std::vector<int64_t> shape;  // one example's
    std::vector<uint8_t> bytes;  // count examples, C order
    int64_t example_bytes() const;
  };
  std::vector<Field> fields;

  int64_t feature_numel() const;
  int64_t label_numel() const;
  // Writes example i's features (feature_numel() values of feature_type) and label(s)
  // (label_numel() values of label_type).
  void copy(int64_t i, void* features_out, void* labels_out) const;
};

// The token alphabet of a text corpus: the sorted set of the bytes it contains, id i being
// the i-th smallest byte. Token files have no characters; their vocabulary is just a size.
struct Vocab {
  int64_t size = 0;
  std::vector<uint8_t> chars;      // text: id -> byte (size entries); tokens: empty
  std::array<int32_t, 256> ids{};  // text: byte -> id, -1 where the byte does not occur
  bool has_chars() const { return !chars.empty(); }
  int32_t id_of(uint8_t c) const { return ids[c]; }  // -1: not in the corpus
  char char_of(int32_t id) const;  // throws DataError when id is out of range or a token vocab
  std::string decode(const int32_t* ids, size_t n) const;
  std::vector<int32_t> encode(const std::string& s) const;  // throws on a byte not in the corpus
};

// Each loader throws DataError naming the file and what is wrong.
Examples load_idx(const std::string& images_path, const std::string& labels_path, bool normalize);
// label_column: 0-based index of the label, or -1 for the last column. Features are returned
// as written (standardisation is the Dataset's, with train-split statistics).
// `labeled` false: every column is a feature (new data to predict from); the labels are
// zeros and Examples::labeled is false.
Examples load_csv(const std::string& path, int64_t label_column, bool header, ElemType label_type = ElemType::I32,
                  bool labeled = true);
Examples load_text(const std::string& path, int64_t context, Vocab& vocab);
Examples load_tokens(const std::string& path, int64_t context, int64_t vocab_size, Vocab& vocab);

}  // namespace modelc::rt

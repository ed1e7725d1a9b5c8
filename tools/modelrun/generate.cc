// modelrun generate: a text model continues a prompt, one token per forward pass of the
// predict function (compiler/passes/predict.h), decoding with the vocabulary its checkpoint
// records (runtime/session/data/preprocess.h).
//
// The model reads a window of T tokens and gives next-token scores at every position. A
// prompt shorter than T is padded on the right and the scores are read at its last token;
// that is only right for a causal model (position i reads tokens 0..i), so the first pass
// also runs with another padding and the two must agree. Past T tokens the window slides
// (the oldest token leaves). Every pass recomputes the whole window: there is no key/value
// cache yet.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "runtime/base/philox.h"
#include "runtime/session/data/file_io.h"
#include "runtime/session/data/preprocess.h"
#include "tools/modelrun/commands.h"
#include "tools/modelrun/load.h"
#include "tools/modelrun/train_state.h"

namespace modelrun {

using namespace modelc;

namespace {

struct Sampler {
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;

  // A uniform double in [0, 1): a pure function of (seed, draw).
  double uniform(uint64_t draw) const {
    const PhiloxCounter c = philox4x32_10({philox_detail::lo32(draw), philox_detail::hi32(draw), 0x67656eu, 0},
                                          {philox_detail::lo32(seed), philox_detail::hi32(seed)});
    const uint64_t bits = (static_cast<uint64_t>(c[0] >> 5) << 26) | (c[1] >> 6);  // 53 bits
    return static_cast<double>(bits) * 0x1p-53;
  }

  // The next token from the scores of the first v tokens (the vocabulary's).
  int32_t pick(const float* scores, int64_t v, uint64_t draw) const {
    std::vector<int32_t> order(static_cast<size_t>(v));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),  // ties: the smaller id first, so the order is one on every machine
              [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
    if (temperature == 0) return order.front();
    const size_t keep = top_k > 0 ? std::min<size_t>(static_cast<size_t>(top_k), order.size()) : order.size();
    std::vector<double> p(keep);
    const double top = scores[order.front()];
    double sum = 0;
    for (size_t k = 0; k < keep; ++k) sum += p[k] = std::exp((scores[order[k]] - top) / temperature);
    size_t n = keep;
    if (top_p < 1) {  // the fewest most likely tokens whose probability reaches top_p
      double acc = 0;
      for (n = 0; n < keep && acc < top_p * sum; ++n) acc += p[n];
      n = std::max<size_t>(n, 1);
    }
    double total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n), 0.0);
    double u = uniform(draw) * total;
    for (size_t k = 0; k < n; ++k) {
      if (u < p[k]) return order[k];
      u -= p[k];
    }
    return order[n - 1];
  }
};

void check_options(const GenerateOptions& o) {
  check_options(o.common);
  if (o.tokens < 0) throw UsageError(fmt::format("--tokens: must be a non-negative integer, got {}", o.tokens));
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw UsageError(fmt::format("--temperature: must be a finite number >= 0 (0: always the most likely token), got {}",
                                 o.temperature));
  if (o.top_k < 0) throw UsageError(fmt::format("--top-k: must be a non-negative integer (0: every token), got {}", o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw UsageError(fmt::format("--top-p: must be in (0, 1] (1: every token), got {}", o.top_p));
  if (o.prompt.empty()) throw UsageError("--prompt: give at least one character for the model to continue");
}

// The vocabulary the checkpoint records, or (an older checkpoint) the training data's.
rt::Vocab vocabulary(const rt::Checkpoint& c, const Loaded& l, bool quiet) {
  if (std::optional<rt::Vocab> v = rt::recorded_vocab(c)) return *v;
  const rt::TrainSettings& t = l.program->train;
  if (!t.data || t.data->kind != "text")
    throw std::runtime_error(fmt::format("{}: records no vocabulary, and model '{}' is not trained on text(): generate "
                                         "decodes characters of a text() corpus", c.path, l.program->model));
  auto ds = open_data(l);
  if (!quiet)
    fmt::print(stderr, "note: {} records no vocabulary (an older modelrun wrote it); using the one of {}\n", c.path,
               ds->origin());
  return ds->vocab();
}

// One window's next-token scores at `at`, the window padded with `pad` to `t` tokens; every
// row of a fixed batch holds the same window.
std::vector<float> scores_at(rt::Session& s, const rt::Feed& in, const std::string& output, int64_t rows, int64_t t,
                             const std::vector<int32_t>& window, int32_t pad, int64_t v) {
  rt::HostTensor x(rt::ElemType::I32, {rows, t});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < t; ++k)
      x.i32()[r * t + k] = k < static_cast<int64_t>(window.size()) ? window[static_cast<size_t>(k)] : pad;
  auto out = s.predict({{in.name, x}});
  const rt::HostTensor& lg = out.at(output);
  const int64_t width = lg.shape.back();
  const float* row = lg.f32() + (static_cast<int64_t>(window.size()) - 1) * width;
  return std::vector<float>(row, row + v);
}

}  // namespace

int run_generate(const GenerateOptions& o) {
  return guarded([&] {
    check_options(o);
    Loaded l = compile(o.common, false, std::vector<std::string>{o.output});
    const rt::Program& p = *l.program;
    const rt::Feed& in = predict_feed(l, o.common.file);
    const rt::Function* fn = p.function("predict");
    uint32_t out_buf = rt::kNoBuffer;
    for (const auto& [name, buf] : fn->outputs) out_buf = name == o.output ? buf : out_buf;
    if (out_buf == rt::kNoBuffer)
      throw std::runtime_error(fmt::format("{}: the predict function has no output '{}' (give its name with --output)",
                                           o.common.file, o.output));
    const rt::BufferDesc& ib = p.buffers[in.buffer];
    const rt::BufferDesc& ob = p.buffers[out_buf];
    if (ib.type != rt::ElemType::I32 || ib.shape.size() != 2 || !ib.shape[1].is_constant() || ob.shape.size() != 3 ||
        ob.type != rt::ElemType::F32)
      throw std::runtime_error(fmt::format("model '{}': generate needs an i32 input of token ids [batch, T] with T known "
                                           "and f32 scores '{}' [batch, T, vocabulary]", p.model, o.output));
    const int64_t t = ib.shape[1].eval({});
    const int64_t rows = ib.shape[0].is_constant() ? ib.shape[0].eval({}) : 1;
    rt::Session s(l.program, session_options(o.common));
    const rt::Checkpoint c = load_trained(s, o.checkpoint);
    const rt::Vocab vocab = vocabulary(c, l, o.common.quiet);
    std::vector<int32_t> ids;
    try {
      ids = vocab.encode(o.prompt);
    } catch (const rt::DataError& e) {
      throw std::runtime_error(fmt::format("--prompt: {}", e.what()));
    }
    const int64_t width = ob.shape[2].is_constant() ? ob.shape[2].eval({}) : 0;
    if (width < vocab.size)
      throw std::runtime_error(fmt::format("{}: the vocabulary has {} characters, but model '{}' scores {} tokens", c.path,
                                           vocab.size, p.model, width));
    Sampler sm{o.temperature, o.top_p, o.top_k, static_cast<uint64_t>(o.common.seed.value_or(p.train.seed))};
    fmt::print("{}", o.prompt);
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < o.tokens; ++k) {
      const size_t from = ids.size() > static_cast<size_t>(t) ? ids.size() - static_cast<size_t>(t) : 0;
      const std::vector<int32_t> window(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
      std::vector<float> sc = scores_at(s, in, o.output, rows, t, window, 0, vocab.size);
      if (k == 0 && static_cast<int64_t>(window.size()) < t && vocab.size > 1) {
        const std::vector<float> other = scores_at(s, in, o.output, rows, t, window, static_cast<int32_t>(vocab.size - 1),
                                                   vocab.size);
        for (int64_t j = 0; j < vocab.size; ++j)
          if (std::fabs(sc[static_cast<size_t>(j)] - other[static_cast<size_t>(j)]) >
              1e-4f * (1 + std::fabs(sc[static_cast<size_t>(j)])))
            throw std::runtime_error(fmt::format(
                "model '{}' is not causal: its scores at the prompt's last token change with the tokens after it (token "
                "{}: {} and {}), so a prompt shorter than its window of {} cannot be continued; give a prompt of {} "
                "characters or more", p.model, j, sc[static_cast<size_t>(j)], other[static_cast<size_t>(j)], t, t));
      }
      for (float x : sc)
        if (!std::isfinite(x))
          throw std::runtime_error(fmt::format("model '{}': the scores '{}' are not finite at token {} ({}); the "
                                               "checkpoint's parameters or the model overflow", p.model, o.output, k, x));
      ids.push_back(sm.pick(sc.data(), vocab.size, static_cast<uint64_t>(k)));
      fmt::print("{}", vocab.char_of(ids.back()));
      std::fflush(stdout);
    }
    fmt::print("\n");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!o.common.quiet)
      fmt::print(stderr, "{}: {} tokens in {:.2f} s ({:.1f} tokens/s; window {}, temperature {:g}, top-k {}, top-p {:g}, "
                 "seed {})\n", p.model, o.tokens, secs, secs > 0 ? static_cast<double>(o.tokens) / secs : 0.0, t,
                 o.temperature, o.top_k, o.top_p, sm.seed);
    return 0;
  });
}

}  // namespace modelrun

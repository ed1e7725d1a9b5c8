// Mixed precision end to end (docs/precision.md):
//  - fp16's dynamic loss scaling in the compiled step against the interpreter: an initial
//    scale of 2^30 makes the gradients overflow, so the first steps are skipped (params and
//    optimizer state bit-identical to before), the scale halves each time, and after
//    growth_interval (here 2) clean steps it doubles; the runtime's scaler state equals
//    the interpreter's after every step and its params follow within tolerance;
//  - fashion_mlp trained in bf16 and fp16 reaches the fp32 test accuracy within 1 point
//    (same seed, initialisation and batches; 100 AdamW steps, 5000 test images).
#include <gtest/gtest.h>

#include <cstdio>

#include "compiler/pipeline.h"
#include "compiler/pipeline.h"
#include "runtime/session/data/dataset.h"
#include "runtime/session/data/loader.h"
#include "runtime/session/session.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

rt::HostTensor host(const RefTensor& t) {
  rt::HostTensor h(t.dtype == DType::I32 ? rt::ElemType::I32 : rt::ElemType::F32, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype == DType::I32) h.i32()[i] = static_cast<int32_t>(t[i]);
    else h.f32()[i] = static_cast<float>(t[i]);
  }
  return h;
}

RefTensor ref(const rt::HostTensor& h) {
  RefTensor t(DType::F32, h.shape);
  for (int64_t i = 0; i < h.numel(); ++i) t[i] = h.f32()[i];
  return t;
}

TEST(Precision, Fp16LossScalingSkipsOverflowHalvesAndGrows) {
  TinyModel m = tiny_model(16, 5, true);
  Tensors batch = random_batch(m, 8), params = random_params(m);
  // Small inputs: the weight gradient x^T dz is below the largest gradient dz, so the only
  // overflow is dz's cast to f16, which the interpreter rounds exactly as the kernels do.
  for (double& v : batch.at("x").data) v = round_to_dtype(v / 16, DType::F32);
  Hyper h{.optimizer = "adamw", .lr = 0.0625, .weight_decay = 0.125};
  TrainStepOptions o = h.options();
  o.precision = "fp16";
  o.loss_scale = 0x1p30;
  o.growth_interval = 2;
  Graph step = build_train_step(m.g, o);

  LowerOptions lo;
  lo.eval = false;
  auto prog = lower_program(m.g, &step, nullptr, lo);
  prog->train.schedule = rt::Schedule{};
  prog->train.schedule.lr = h.lr;
  rt::SessionOptions so;
  so.threads = 2;
  rt::Session s(prog, so);
  for (const auto& [name, v] : params) s.set_param(name, host(v));
  std::map<std::string, rt::HostTensor> feed{{"x", host(batch.at("x"))}, {"labels", host(batch.at("labels"))}};

  Tensors states;  // the interpreter's, fed back each step
  double log2_scale = 0, good = 0;  // the rule, followed by hand
  int skips = 0, growths = 0;
  for (int64_t t = 1; t <= 20; ++t) {
    InterpResult r = run_step(step, batch, params, states, h.lr, t);
    const bool skipped = r.outputs.at("skipped")[0] == 1;
    EXPECT_EQ(r.outputs.at("loss_scale")[0], std::ldexp(0x1p30, static_cast<int>(log2_scale))) << "step " << t;
    std::map<std::string, rt::HostTensor> before;
    for (const std::string& name : s.param_names()) before[name] = s.param(name);
    for (const std::string& name : s.state_names()) before[name] = s.state(name);
    s.train_step(feed);
    if (skipped) {
      ++skips;
      log2_scale -= 1;
      good = 0;
      // Params and states bit-identical, in the interpreter and in the runtime.
      for (const auto& [name, v] : r.updates) {
        if (name.starts_with("loss_scaler.")) continue;
        const RefTensor old = params.count(name) ? params.at(name) : states.count(name) ? states.at(name) : RefTensor(v.dtype, v.shape);
        EXPECT_EQ(v.data, old.data) << "interpreter, step " << t << " " << name;
      }
      for (const auto& [name, old] : before) {
        if (name.starts_with("loss_scaler.")) continue;
        const rt::HostTensor now = params.count(name) ? s.param(name) : s.state(name);
        EXPECT_EQ(now.bytes, old.bytes) << "runtime, step " << t << " " << name;
      }
    } else {
      if (++good == 2) {
        ++growths;
        log2_scale += 1;
        good = 0;
      }
      EXPECT_NE(r.updates.at("w").data, params.at("w").data) << "a clean step updates";
      // AdamW's update recomputed from the new moments, with the bias correction of the
      // applied steps (t - skips), as PyTorch's Adam counts them: after the first skips
      // the two counts differ, and 1 - beta1^t by a factor of 2 or more.
      const double applied = static_cast<double>(t - skips);
      const double bc1 = 1 - std::pow(h.beta1, applied), bc2 = 1 - std::pow(h.beta2, applied);
      for (const std::string name : {"w", "b"}) {
        const RefTensor &avg = r.updates.at(name + ".exp_avg"), &avg_sq = r.updates.at(name + ".exp_avg_sq");
        const RefTensor& old = params.at(name);
        const RefTensor& got = r.updates.at(name);
        for (int64_t i = 0; i < got.numel(); ++i) {
          const double delta = (h.lr / bc1) * avg[i] / (std::sqrt(avg_sq[i]) / std::sqrt(bc2) + h.eps);
          const double want = old[i] * (1 - h.lr * h.weight_decay) - delta;
          ASSERT_NEAR(got[i], want, 1e-5 * std::abs(delta) + 1e-6) << "step " << t << " " << name << "[" << i << "], "
                                                                   << skips << " skipped before";
        }
      }
    }
    EXPECT_EQ(r.updates.at("loss_scaler.skipped_steps")[0], skips) << "step " << t;
    EXPECT_EQ(ref(s.state("loss_scaler.skipped_steps"))[0], skips) << "runtime, step " << t;
    EXPECT_EQ(r.updates.at("loss_scaler.log2_scale")[0], log2_scale) << "step " << t;
    EXPECT_EQ(r.updates.at("loss_scaler.good_steps")[0], good) << "step " << t;
    EXPECT_EQ(ref(s.state("loss_scaler.log2_scale"))[0], log2_scale) << "runtime, step " << t;
    EXPECT_EQ(ref(s.state("loss_scaler.good_steps"))[0], good) << "runtime, step " << t;
    // The runtime's params follow the interpreter's.
    for (const std::string name : {"w", "b"}) {
      RefTensor got = ref(s.param(name));
      const RefTensor& want = r.updates.at(name);
      for (int64_t i = 0; i < got.numel(); ++i) ASSERT_NEAR(got[i], want[i], 2e-3) << "step " << t << " " << name;
    }
    for (const auto& [name, v] : r.updates) (params.count(name) ? params : states)[name] = v;
    if (testing::Test::HasFailure()) return;
  }
  EXPECT_GE(skips, 5) << "2^30 should overflow for several halvings";
  EXPECT_GE(growths, 1) << "no growth after clean steps";
}

// Trains fashion_mlp for `steps` steps at `precision` on `data` (its train section's, opened
// once) and returns its test accuracy.
double fashion_accuracy(const std::string& precision, int steps, std::shared_ptr<const rt::Dataset>& data) {
  Compilation c(CompileOptions{});
  ProgramOptions po;
  po.precision = precision;
  auto p = compile_program(c, std::string(MODELC_SOURCE_DIR) + "/models/fashion_mlp.model", po);
  EXPECT_TRUE(p) << c.diags().render();
  if (!p) return 0;
  rt::SessionOptions so;
  so.threads = 2;
  so.total_steps = steps;
  rt::Session s(p, so);
  if (!data)
    data = rt::Dataset::open(*p->train.data, std::string(MODELC_SOURCE_DIR) + "/models/", static_cast<uint64_t>(p->train.seed),
                             p->train.validation);
  rt::TrainLoader loader(data, p->train.batch, {784}, static_cast<uint64_t>(p->train.seed));
  for (int i = 0; i < steps; ++i) {
    rt::Batch b = loader.next();
    const float loss = s.train_step({{"images", b.features}, {"labels", b.labels}});
    EXPECT_TRUE(std::isfinite(loss)) << precision << " step " << i;
  }
  rt::EvalLoader eval(data, rt::Split::Heldout, 1000, {784});
  int64_t right = 0, total = 0;
  // The first 5000 test images (of 10 000): enough to tell a point apart, in half the time.
  while (total < 5000) {
    auto b = eval.next();
    if (!b) break;
    auto out = s.eval({{"images", b->features}, {"labels", b->labels}});
    const rt::HostTensor& logits = out.at("logits");
    for (int64_t r = 0; r < b->size(); ++r) {
      const float* row = logits.f32() + r * 10;
      right += std::max_element(row, row + 10) - row == b->labels.i32()[r];
    }
    total += b->size();
  }
  return static_cast<double>(right) / static_cast<double>(total);
}

TEST(Precision, FashionMlpReachesTheF32AccuracyInBf16AndFp16) {
  const int steps = 100;
  std::shared_ptr<const rt::Dataset> data;
  const double f32 = fashion_accuracy("fp32", steps, data), bf16 = fashion_accuracy("bf16", steps, data),
               fp16 = fashion_accuracy("fp16", steps, data);
  std::printf("fashion_mlp test accuracy after %d steps: fp32 %.2f%%, bf16 %.2f%%, fp16 %.2f%%\n", steps, 100 * f32,
              100 * bf16, 100 * fp16);
  EXPECT_GT(f32, 0.70) << "fp32 did not learn: the comparison would mean nothing";
  EXPECT_NEAR(bf16, f32, 0.01);
  EXPECT_NEAR(fp16, f32, 0.01);
}

}  // namespace
}  // namespace modelc::test

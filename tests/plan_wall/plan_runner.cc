// The wall, proved: this program links modelc_runtime alone (no compiler, no LLVM, no
// ANTLR), loads a .plan that the `modelc` binary wrote, and trains it for a few steps on
// random batches. Two sessions of the same plan must agree bit for bit and every loss must
// be finite. Run by tests/cmake/plan_wall.cmake.
//
//   plan_runner FILE.plan [BATCH]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "runtime/base/error.h"
#include "runtime/session/plan.h"
#include "tests/plan/plan_harness.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: plan_runner FILE.plan [BATCH]\n");
    return 2;
  }
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 8;
  try {
    modelc::rt::PlanTarget target;
    std::shared_ptr<modelc::rt::Program> p = modelc::rt::read_plan(argv[1], &target);
    std::printf("plan %s: model %s, %zu kernels, %zu buffers, compiled for %s (%s, %zu features)\n", argv[1],
                p->model.c_str(), p->codelets.size(), p->buffers.size(), target.arch.c_str(), target.cpu.c_str(),
                target.features.size());
    modelc::plantest::StepResult a = modelc::plantest::run_steps(p, 3, batch);
    modelc::plantest::StepResult b = modelc::plantest::run_steps(p, 3, batch);
    for (size_t i = 0; i < a.losses.size(); ++i) {
      std::printf("step %zu: loss %.9g\n", i + 1, static_cast<double>(a.losses[i]));
      if (!std::isfinite(a.losses[i]) || a.losses[i] != b.losses[i]) {
        std::fprintf(stderr, "step %zu: losses %.9g and %.9g in two sessions\n", i + 1, static_cast<double>(a.losses[i]),
                     static_cast<double>(b.losses[i]));
        return 1;
      }
    }
    for (size_t i = 0; i < a.persistent.size(); ++i)
      if (a.persistent[i].second != b.persistent[i].second) {
        std::fprintf(stderr, "%s differs between two sessions\n", a.persistent[i].first.c_str());
        return 1;
      }
    return 0;
  } catch (const modelc::rt::RuntimeError& e) {
    std::fprintf(stderr, "plan_runner: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan_runner: unexpected error: %s\n", e.what());
    return 1;
  }
}

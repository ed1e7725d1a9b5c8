#!/usr/bin/env python3
"""Writes tests/runtime/torch_plateau.txt: torch.optim.lr_scheduler.ReduceLROnPlateau's
learning rate after each of a sequence of metric values, for several settings, so
tests/runtime/metric_watch_test.cc checks runtime/base/metric_watch.h against it (the
project needs no Python: the file is committed; rerun this after changing the cases).

Each case is one line:
  case NAME lr factor patience threshold threshold_mode cooldown min_lr mode
followed by one line per evaluation:
  metric lr_after
"""
import random
import sys

import torch

CASES = [
    # name, lr, factor, patience, threshold, threshold_mode, cooldown, min_lr, mode
    ("defaults", 0.1, 0.1, 10, 1e-4, "rel", 0, 0.0, "min"),
    ("patience0", 0.1, 0.5, 0, 1e-4, "rel", 0, 0.0, "min"),
    ("abs_cooldown", 1.0, 0.5, 2, 0.01, "abs", 3, 0.0, "min"),
    ("max_rel", 0.3, 0.2, 1, 0.05, "rel", 1, 0.0, "max"),
    ("max_abs_floor", 0.05, 0.3, 1, 0.0, "abs", 0, 0.004, "max"),
    ("min_lr_eps", 1e-7, 0.5, 0, 0.0, "rel", 0, 0.0, "min"),
]


def metrics(rng, mode, n=60):
    # A noisy curve that improves, then stalls, with repeated values and a NaN.
    out, v = [], 2.0
    for k in range(n):
        if k < 15:
            v *= 0.9
        elif k % 17 == 0:
            v *= 0.97
        x = v * (1 + 0.02 * rng.uniform(-1, 1)) if k % 5 else v
        out.append(3 - x if mode == "max" else x)
    out[33] = float("nan")
    return out


def main():
    rng = random.Random(5)
    lines = []
    for name, lr, factor, patience, threshold, tmode, cooldown, min_lr, mode in CASES:
        w = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([w], lr=lr)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, mode=mode, factor=factor, patience=patience, threshold=threshold,
            threshold_mode=tmode, cooldown=cooldown, min_lr=min_lr)
        lines.append(f"case {name} {lr!r} {factor!r} {patience} {threshold!r} {tmode} {cooldown} {min_lr!r} {mode}")
        for m in metrics(rng, mode):
            sched.step(m)
            lines.append(f"{m!r} {opt.param_groups[0]['lr']!r}")
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/runtime/torch_plateau.txt"
    with open(out, "w") as f:
        f.write("# written by tools/torch_plateau.py (torch " + torch.__version__ + ")\n")
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

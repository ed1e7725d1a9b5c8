#!/usr/bin/env python3
"""Writes tests/train/torch_optim.txt: PyTorch's per-step learning rates and losses (CPU,
float32) of 50 training steps of a tiny linear regression, one case per optimizer and
learning-rate schedule of the train section, for tests/train/test_torch_optim.cc (which
needs no Python: it compiles the same model with each case's train lines and compares).
Run it again after changing the cases:
  python3 tools/torch_optim.py > tests/train/torch_optim.txt

Each case is given as the train section spells it; the optimizer is built with only the
arguments the case writes, so torch.optim's own defaults apply to the rest (and the test
checks that modelc's defaults are the same). Schedules are torch.optim.lr_scheduler's
classes (LinearLR, ExponentialLR, PolynomialLR, OneCycleLR, CosineAnnealingLR), after a
warm-up of LinearLR(1 / warmup -> 1) joined by SequentialLR. Lion is not in torch.optim:
it is written below from Chen et al. 2023 (Symbolic Discovery of Optimization Algorithms,
Algorithm 2).
"""
import math
import random
import re
import struct
import sys

import torch
import torch.nn.functional as F

STEPS, BATCHES, B, I, O = 50, 5, 8, 4, 3

# No case uses Adam or AdamW (tools/torch_reference.py compares those on the example models):
# their bias corrections 1 - beta^t are computed in f32 from f32 betas, which is 1.3e-5 off
# PyTorch's double for 1 - 0.999 and moves 50 steps' losses by up to 3e-5, more than the
# float rounding these cases are held to.
CASES = [
    ("rmsprop_defaults", "optimizer = rmsprop()", None),
    ("rmsprop_momentum", "optimizer = rmsprop(momentum = 0.5)", None),
    ("rmsprop_centered", "optimizer = rmsprop(lr = 0.005, alpha = 0.9, eps = 1e-6, weight_decay = 0.1, "
                         "momentum = 0.9, centered = true)", None),
    ("adagrad_defaults", "optimizer = adagrad()", None),
    ("adagrad_all", "optimizer = adagrad(lr = 0.1, lr_decay = 0.01, weight_decay = 0.1, "
                    "initial_accumulator_value = 0.1, eps = 1e-6)", None),
    ("lion_defaults", "optimizer = lion()", None),
    ("lion_all", "optimizer = lion(lr = 0.001, beta1 = 0.8, beta2 = 0.95, weight_decay = 0.5)", None),
    ("adafactor_defaults", "optimizer = adafactor()", None),
    ("adafactor_all", "optimizer = adafactor(lr = 0.05, beta2_decay = -0.5, eps1 = 1e-6, eps2 = 0.01, d = 2.0, "
                      "weight_decay = 0.1)", "schedule = cosine(warmup = 5)"),
    ("linear", "optimizer = sgd(lr = 0.1, momentum = 0.9)", "schedule = linear(warmup = 5, end_factor = 0.1)"),
    ("linear_defaults", "optimizer = adagrad(lr = 0.1)", "schedule = linear()"),
    ("exponential", "optimizer = sgd(lr = 0.2)", "schedule = exponential(gamma = 0.95)"),
    ("exponential_warmup", "optimizer = lion(lr = 0.01, weight_decay = 0.1)", "schedule = exponential(gamma = 0.9, warmup = 3)"),
    ("polynomial_defaults", "optimizer = sgd(lr = 0.2)", "schedule = polynomial()"),
    ("polynomial", "optimizer = rmsprop(lr = 0.01)", "schedule = polynomial(power = 2.0, warmup = 4)"),
    ("onecycle_defaults", "optimizer = rmsprop()", "schedule = onecycle()"),
    ("onecycle", "optimizer = sgd(lr = 0.01, momentum = 0.9)",
     "schedule = onecycle(max_lr = 0.2, pct_start = 0.25, div_factor = 10.0, final_div_factor = 100.0)"),
    ("cosine", "optimizer = sgd(lr = 0.1, momentum = 0.9)", "schedule = cosine(warmup = 5, min_lr = 0.001)"),
    # Parameter groups and frozen parameters (EXTRA: their train lines, and how torch builds them).
    ("groups_lion", "optimizer = lion(lr = 0.01, weight_decay = 0.5)", "schedule = cosine(warmup = 5)"),
    ("groups_sgd", "optimizer = sgd(lr = 0.05, momentum = 0.9, weight_decay = 0.1)", None),
    ("freeze_sgd", "optimizer = sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.01)", None),
]

# name -> (the case's extra train line, torch's param groups of [w, b] given the base lr, or
# None to freeze b). Group 0 has the base lr: the lr recorded is its.
EXTRA = {
    "groups_lion": ('param_groups = [param_group("b", weight_decay = 0.0, lr_scale = 3.0)]',
                    lambda w, b, lr: [{"params": [w]}, {"params": [b], "weight_decay": 0.0, "lr": 3 * lr}]),
    "groups_sgd": ('param_groups = [param_group("w", lr_scale = 0.5), param_group("*", weight_decay = 0.0)]',
                   lambda w, b, lr: [{"params": [b], "weight_decay": 0.0}, {"params": [w], "lr": 0.5 * lr}]),
    "freeze_sgd": ('freeze = ["b"]', None),
}


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_((m * beta1 + p.grad * (1 - beta1)).sign(), alpha=-group["lr"])
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)


def call(text):
    m = re.fullmatch(r"\s*\w+\s*=\s*(\w+)\((.*)\)\s*", text)
    kwargs = {}
    for kv in filter(None, (s.strip() for s in m.group(2).split(","))):
        k, v = (s.strip() for s in kv.split("="))
        kwargs[k] = {"true": True, "false": False}.get(v, None)
        if kwargs[k] is None:
            kwargs[k] = int(v) if re.fullmatch(r"-?\d+", v) else float(v)
    return m.group(1), kwargs


def optimizer(text, params):
    kind, a = call(text)
    if "beta1" in a or "beta2" in a:
        d = {"adam": (0.9, 0.999), "adamw": (0.9, 0.999), "lion": (0.9, 0.99)}[kind]
        a["betas"] = (a.pop("beta1", d[0]), a.pop("beta2", d[1]))
    if kind == "lion":
        return Lion(params, **a)
    if kind == "adafactor":
        # eps1 0 is torch's None: the dtype's machine epsilon.
        a["eps"] = (a.pop("eps1", 0.0) or None, a.pop("eps2", 1e-3))
        return torch.optim.Adafactor(params, foreach=False, **a)
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
           "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}[kind]
    return cls(params, foreach=False, **a)


def scheduler(text, opt, steps=STEPS):
    if text is None:
        return None
    kind, a = call(text)
    S = torch.optim.lr_scheduler
    w = a.pop("warmup", 0)
    if kind == "onecycle":
        peak = a.pop("max_lr", 0.0) or opt.param_groups[0]["lr"]
        return S.OneCycleLR(opt, max_lr=peak, total_steps=steps, anneal_strategy="cos", cycle_momentum=False, **a)
    if kind == "linear":
        main = S.LinearLR(opt, start_factor=1.0, end_factor=a.get("end_factor", 0.0), total_iters=steps - 1 - w)
    elif kind == "exponential":
        main = S.ExponentialLR(opt, gamma=a["gamma"])
    elif kind == "polynomial":
        main = S.PolynomialLR(opt, total_iters=steps - w, power=a.get("power", 1.0))
    elif kind == "cosine":
        main = S.CosineAnnealingLR(opt, T_max=steps - w, eta_min=a.get("min_lr", 0.0))
    else:
        raise SystemExit(f"torch_optim: unknown schedule {kind}")
    if w == 0:
        return main
    warm = S.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1)
    return S.SequentialLR(opt, [warm, main], milestones=[w])


def f32(values):
    return [struct.unpack("f", struct.pack("f", v))[0] for v in values]


def line(*parts):
    print(" ".join(p if isinstance(p, str) else repr(float(p)) for p in parts))


def main():
    torch.set_num_threads(1)
    random.seed(20261205)
    w0 = f32([random.gauss(0, 0.5) for _ in range(I * O)])
    b0 = f32([random.gauss(0, 0.5) for _ in range(O)])
    true_w = [random.gauss(0, 1) for _ in range(I * O)]
    batches = []
    for _ in range(BATCHES):
        x = f32([random.uniform(-1, 1) for _ in range(B * I)])
        y = f32([sum(x[r * I + i] * true_w[i * O + o] for i in range(I)) + 0.5 + random.gauss(0, 0.1)
                 for r in range(B) for o in range(O)])
        batches.append((x, y))
    print(f"# Generated by tools/torch_optim.py with torch {torch.__version__} (CPU, float32); do not edit.")
    print(f"# {STEPS} steps of loss = mse_loss(x @ w + b, y), x: f32[{B}, {I}], step k feeds batch k % {BATCHES}.")
    line("param w", *w0)
    line("param b", *b0)
    for k, (x, y) in enumerate(batches):
        line(f"batch {k} x", *x, "y", *y)
    for name, opt_text, sched_text in CASES:
        w = torch.tensor(w0).reshape(I, O).requires_grad_()
        b = torch.tensor(b0).requires_grad_()
        extra = EXTRA.get(name)
        if extra and extra[1] is None:
            b.requires_grad_(False)
            opt = optimizer(opt_text, [w])
        elif extra:
            opt = optimizer(opt_text, extra[1](w, b, call(opt_text)[1]["lr"]))
        else:
            opt = optimizer(opt_text, [w, b])
        sched = scheduler(sched_text, opt)
        lrs, losses = [], []
        for k in range(STEPS):
            x, y = batches[k % BATCHES]
            lrs.append(opt.param_groups[0]["lr"])
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(torch.tensor(x).reshape(B, I) @ w + b, torch.tensor(y).reshape(B, O))
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if sched is not None and k + 1 < STEPS:
                sched.step()
        if not all(math.isfinite(v) for v in losses):
            raise SystemExit(f"torch_optim: case {name} diverged")
        print(f"case {name}")
        print(f"train {opt_text}")
        if sched_text:
            print(f"train {sched_text}")
        if extra:
            print(f"train {extra[0]}")
        line("lr", *lrs)
        line("loss", *losses)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch eager and torch.compile (Inductor, CPU) on the steps `modelrun bench --compare-fusion` times.

Not part of the build or of CI (the project needs no Python): a benchmark companion. For the
fusion micro-benchmarks of benchmarks/fusion/ and the example models fashion_mlp and
char_gpt it builds the same step in PyTorch, float32 on the CPU, with the same shapes (read
from the .model files: the model's dimension defaults and the train section's batch):

  step  forward, backward and the optimizer update (the train section's optimizer, and
        clip_grad_norm where the model clips), as modelrun's train_step
  fwd   the forward pass without gradients (dropout off), as modelrun's eval

and times it eagerly and with torch.compile (Inductor; the loss function and the optimizer
update compiled separately, as PyTorch's guide to compiling optimizers does). Random
inputs, the median of --steps after --warmup (the warm-up includes Inductor's compilation).

  python3 tools/torch_fusion_bench.py [--threads 2] [--steps 20] [--warmup 3] \\
      [--only NAME ...] [--no-compile] [--json OUT.json]

--json writes the times for `modelrun bench --compare-fusion ... --torch-json OUT.json`,
which prints them beside modelrun's fused rows:
  {"torch": VERSION, "threads": N, "results": [{"model", "fn", "batch", "eager_ms", "compile_ms"}]}
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import torch_reference as ref  # noqa: E402  (the example models, op for op)


def model_dims(text):
    """The dimension defaults of the file's model header and the train section's batch."""
    header = re.search(r"\bmodel\s+\w+\s*\(([^)]*)\)", text).group(1)
    dims = {k: int(v) for k, v in re.findall(r"\b(\w+)\s*=\s*(\d+)", header)}
    settings = ref.train_settings(text)
    return dims, settings


def param(shape, std=None, fill=0.0):
    t = torch.empty(shape)
    if std is None:
        t.fill_(fill)
    else:
        t.normal_(0.0, std)
    return t.requires_grad_()


class Micro:
    """A micro-benchmark of benchmarks/fusion/: params, a loss(inputs, training) and inputs."""

    def __init__(self, name, text, batch):
        self.name = name
        d, self.settings = model_dims(text)
        B = batch or self.settings["batch"]
        self.batch = B
        if name == "bias_gelu_dropout_residual":
            T, C = d["T"], d["C"]
            self.params = {"w": param((C, C), std=0.02), "b": param((C,))}
            self.inputs = (torch.randn(B, T, C),)
        elif name == "layer_norm":
            T, C = d["T"], d["C"]
            self.params = {"p": param((C,)), "g": param((C,), fill=1.0), "b": param((C,))}
            self.inputs = (torch.randn(B, T, C),)
        elif name == "softmax_cross_entropy":
            T, V = d["T"], d["V"]
            self.params = {"b": param((V,))}
            self.inputs = (torch.randn(B, T, V), torch.randint(0, V, (B, T)))
        elif name == "adamw":
            self.params = {"w": param((d["N"],), std=0.02)}
            self.inputs = (torch.randn(B),)
        else:
            raise SystemExit(f"torch_fusion_bench: unknown micro-benchmark {name}")

    def named(self):
        return list(self.params.items())

    def loss(self, inputs, training=True):
        p = self.params
        if self.name == "bias_gelu_dropout_residual":
            (x,) = inputs
            y = F.dropout(F.gelu(x @ p["w"] + p["b"], approximate="tanh"), 0.1, training=training) + x
            return (y * y).mean()
        if self.name == "layer_norm":
            (x,) = inputs
            y = F.layer_norm(x + p["p"], (x.shape[-1],), p["g"], p["b"], eps=1e-5)
            return (y * y).mean()
        if self.name == "softmax_cross_entropy":
            x, t = inputs
            return F.cross_entropy((x + p["b"]).reshape(-1, x.shape[-1]), t.reshape(-1))
        (x,) = inputs
        return p["w"].mean() + x.mean()


class Example:
    """fashion_mlp or char_gpt, as tools/torch_reference.py builds them."""

    def __init__(self, name, text, batch):
        self.name = name
        self.settings = ref.train_settings(text)
        self.batch = batch or self.settings["batch"]
        self.model = ref.build(name, text, None)
        with torch.no_grad():
            for n, t in self.model.named():
                t.normal_(0, 0.02) if t.dim() > 1 else t.fill_(1.0 if n.endswith(".g") else 0.0)
        self.inputs = tuple(ref.synthetic_batch(name, text, self.batch))

    def named(self):
        return self.model.named()

    def loss(self, inputs, training=True):
        return self.model.loss(*inputs)  # the example models have no dropout


def make_step(bench, compiled):
    params = [t for _, t in bench.named()]
    opt = ref.make_optimizer(params, bench.settings)
    clip = bench.settings["clip"]

    def loss_and_grad(inputs):
        loss = bench.loss(inputs, training=True)
        loss.backward()
        return loss.detach()

    def update():
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()

    if compiled:
        loss_and_grad = torch.compile(loss_and_grad)
        update = torch.compile(update)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_and_grad(bench.inputs)
        update()
        return loss

    return step


def make_forward(bench, compiled):
    def fwd(inputs):
        with torch.no_grad():
            return bench.loss(inputs, training=False)

    f = torch.compile(fwd) if compiled else fwd
    return lambda: f(bench.inputs)


def time_it(fn, warmup, steps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        a = time.perf_counter()
        fn()
        times.append(time.perf_counter() - a)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first, compilation included (default 3)")
    ap.add_argument("--batch", type=int, default=0, help="examples per step (default: each train section's)")
    ap.add_argument("--only", nargs="*", default=[], help="benchmark only these names")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--json", help="write the times here for modelrun --torch-json")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    micro = ["bias_gelu_dropout_residual", "layer_norm", "softmax_cross_entropy", "adamw"]
    examples = ["fashion_mlp", "char_gpt"]
    names = [n for n in micro + examples if not args.only or n in args.only]
    if not names:
        ap.error(f"--only: none of {micro + examples}")

    print(f"# PyTorch {torch.__version__}, float32, CPU, {torch.get_num_threads()} threads; "
          f"median of {args.steps} after {args.warmup} warm-up")
    print(f"{'model':<28} {'fn':<4} {'batch':>5} {'eager ms':>9} {'compile ms':>10} {'speedup':>7}")
    results = []
    for name in names:
        folder = os.path.join("benchmarks", "fusion") if name in micro else "models"
        path = os.path.join(ROOT, folder, name + ".model")
        text = open(path).read()
        bench = Micro(name, text, args.batch) if name in micro else Example(name, text, args.batch)
        for fn, make in (("step", make_step), ("fwd", make_forward)):
            eager = time_it(make(bench, False), args.warmup, args.steps)
            compiled = None
            if not args.no_compile:
                try:
                    compiled = time_it(make(bench, True), max(args.warmup, 2), args.steps)
                except Exception as e:  # report and go on: eager still counts
                    print(f"# {name} {fn}: torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0]}")
            c = f"{compiled:.2f}" if compiled is not None else "-"
            s = f"{eager / compiled:.2f}x" if compiled else "-"
            print(f"{name:<28} {fn:<4} {bench.batch:>5} {eager:>9.2f} {c:>10} {s:>7}", flush=True)
            results.append({"model": name, "fn": fn, "batch": bench.batch, "eager_ms": eager, "compile_ms": compiled})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

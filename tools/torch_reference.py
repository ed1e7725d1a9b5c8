#!/usr/bin/env python3
"""Reference check of modelrun's training against PyTorch (CPU, float32).

Not part of the build or of CI: the project itself needs no Python. This script takes the
example models of models/ as rebuilt by hand in PyTorch (tools/torch_models.py: same
parameter names and shapes as modelrun's, random draws from the same Philox stream), loads
modelrun's initial parameters, replays the batches modelrun fed to each step with the same
optimizer (torch.optim.AdamW, the model's betas/eps/weight_decay, this step's lr from
modelrun's metrics) and gradient clipping (torch.nn.utils.clip_grad_norm_), and compares
the per-step losses.

  python3 tools/torch_reference.py models/fashion_mlp.model fashion_mlp \\
      --init INIT.safetensors --batches BATCHES.safetensors --metrics METRICS.jsonl [--steps 20]
  python3 tools/torch_reference.py models/char_gpt.model char_gpt --bench [--threads 2]

The files come from
  modelrun train MODEL --steps N --save-initial INIT --dump-batches BATCHES --metrics METRICS
(tools/reference-check runs both). Exit status: 0 when every step's loss agrees within
--tolerance (relative, default 1e-4), 1 when one does not, 2 on bad arguments.

--bench times PyTorch eager train steps (forward, backward, clipping, AdamW) for the same
model, batch and thread count, and prints the table `modelrun bench` prints.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

import torch_optim  # tools/torch_optim.py: Lion, and the train section's schedules as torch's
from torch_models import KINDS, build, synthetic_batch  # tools/torch_models.py: the models


# ----------------------------------------------------------------------------------------
# The train section: optimizer, clipping, batch (read from the .model file so that the
# reference follows it; the network itself is written out by hand below).

def train_settings(model_text):
    body = re.search(r"\btrain\s+\w+\s*\{(.*?)\n\}", model_text, re.S)
    if not body:
        raise SystemExit("torch_reference: no train section in the model file")
    text = re.sub(r"#[^\n]*", "", body.group(1))
    s = {"optimizer": "sgd", "args": {}, "clip": 0.0, "batch": None}
    m = re.search(r"\boptimizer\s*=\s*(\w+)\s*\(([^)]*)\)", text)
    if m:
        s["optimizer"] = m.group(1)
        s["optimizer_text"] = m.group(0)
        for kv in m.group(2).split(","):
            if "=" in kv:
                k, v = kv.split("=", 1)
                v = v.strip()
                s["args"][k.strip()] = {"true": 1.0, "false": 0.0}.get(v) if v in ("true", "false") else float(v)
    m = re.search(r"\bschedule\s*=\s*\w+\s*\([^)]*\)", text)
    s["schedule_text"] = m.group(0) if m else None
    m = re.search(r"\bclip_grad_norm\s*=\s*([0-9.eE+-]+)", text)
    if m:
        s["clip"] = float(m.group(1))
    m = re.search(r"\bbatch\s*=\s*(\d+)", text)
    if m:
        s["batch"] = int(m.group(1))
    if re.search(r"\baccumulate\s*=", text):
        raise SystemExit("torch_reference: accumulate is not supported")
    return s


def make_optimizer(params, s):
    a = s["args"]
    kind = s["optimizer"]
    if kind in ("adam", "adamw"):
        cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
        wd = a.get("weight_decay", 0.01 if kind == "adamw" else 0.0)
        # foreach=False: the single-tensor implementation, the one train_step.h follows.
        return cls(params, lr=a.get("lr", 1e-3), betas=(a.get("beta1", 0.9), a.get("beta2", 0.999)),
                   eps=a.get("eps", 1e-8), weight_decay=wd, foreach=False)
    if kind in ("rmsprop", "adagrad", "lion"):
        # torch.optim.RMSprop / Adagrad (single-tensor), and Lion as tools/torch_optim.py writes it.
        return torch_optim.optimizer(s["optimizer_text"], params)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=a.get("lr", 1e-3), momentum=a.get("momentum", 0.0),
                               nesterov=bool(a.get("nesterov", 0)), weight_decay=a.get("weight_decay", 0.0),
                               foreach=False)
    raise SystemExit(f"torch_reference: unknown optimizer {kind}")


def train_step(model, opt, clip, batch, lr=None):
    if lr is not None:
        for group in opt.param_groups:
            group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss = model.loss(*batch)
    loss.backward()
    params = [p for _, p in model.named()]
    if clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, clip, foreach=False)
    else:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
    opt.step()
    return loss.item(), norm.item()


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def modelc_ir(args):
    """modelc --emit=ir of the model file: the parameters' shapes and the random draws' keys."""
    r = subprocess.run([args.modelc, args.model_file, "--emit=ir"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"torch_reference: {args.modelc} {args.model_file} --emit=ir failed:\n{r.stderr}")
    return r.stdout


def check(args, kind, model_text, settings):
    init = load_file(args.init)
    model = build(kind, model_text, init, modelc_ir(args), args.seed)
    names = set(model.names) | set(model.buffer_names)
    if names != set(init):
        raise SystemExit(f"torch_reference: parameter names differ: only ours {sorted(set(init) - names)}, "
                         f"only torch {sorted(names - set(init))}")
    with torch.no_grad():
        for n, p in model.all_named():
            t = init[n]
            if tuple(t.shape) != tuple(p.shape):
                raise SystemExit(f"torch_reference: {n} is {tuple(t.shape)}, expected {tuple(p.shape)}")
            p.copy_(t.float())
    batches = load_file(args.batches)
    rows = [json.loads(line) for line in open(args.metrics) if line.strip()]
    train = {r["step"]: r for r in rows if r.get("kind") == "train"}
    steps = args.steps or max(train)
    opt = make_optimizer([p for _, p in model.named()], settings)
    # The schedule as torch.optim.lr_scheduler's, over the run's length (the last step in
    # the metrics): its lr of each step is compared with the one modelrun fed.
    sched = torch_optim.scheduler(settings["schedule_text"], opt, max(train)) if settings["schedule_text"] else None
    torch_lrs = []
    for k in range(steps):
        torch_lrs.append(opt.param_groups[0]["lr"])
        if sched is not None and k + 1 < max(train):
            sched.step()
    worst_lr = max(rel(train[k + 1]["lr"], torch_lrs[k]) if torch_lrs[k] else abs(train[k + 1]["lr"])
                   for k in range(steps) if k + 1 in train)

    print(f"torch {torch.__version__}, float32, {torch.get_num_threads()} threads; "
          f"{settings['optimizer']} {settings['args']}, clip_grad_norm {settings['clip'] or 'none'}")
    print(f"{'step':>4} | {'modelrun loss':>14} | {'torch loss':>14} | {'rel diff':>9} |"
          f" {'modelrun |g|':>12} | {'torch |g|':>12} | {'rel diff':>9}")
    worst = worst_g = 0.0
    bad = []
    for k in range(steps):
        if k + 1 not in train:
            raise SystemExit(f"torch_reference: the metrics have no train row for step {k + 1}")
        r = train[k + 1]
        try:
            batch = tuple(batches[f"step{k}.{n}"] for n in model.inputs)
        except KeyError as e:
            raise SystemExit(f"torch_reference: no batch {e} in {args.batches}")
        model.step = k                     # the Philox counter of this step's draws (modelrun's step - 1)
        loss, norm = train_step(model, opt, settings["clip"], batch, lr=r["lr"])
        d, dg = rel(loss, r["loss"]), rel(norm, r["grad_norm"])
        worst, worst_g = max(worst, d), max(worst_g, dg)
        if not d <= args.tolerance:
            bad.append(k + 1)
        print(f"{k + 1:>4} | {r['loss']:>14.8f} | {loss:>14.8f} | {d:>9.2e} |"
              f" {r['grad_norm']:>12.7f} | {norm:>12.7f} | {dg:>9.2e}")
    print(f"max relative difference: loss {worst:.2e}, grad norm {worst_g:.2e} (tolerance {args.tolerance:g} on the loss)")
    final_bad = []
    if args.final:
        # The model after the last step (modelrun's final checkpoint): parameters and buffers
        # (batch norm's running statistics, which no train-mode loss depends on).
        final = load_file(args.final)
        for group, names in (("parameters", model.names), ("buffers", model.buffer_names)):
            if names:
                diffs = {n: float((final[n].float() - model[n].detach()).abs().max()) for n in names}
                d, worst_name = max((v, n) for n, v in diffs.items())
                print(f"after step {steps}: {group} max absolute difference {d:.2e} ({worst_name}; {len(names)} tensors)")
                if args.verbose:
                    for n in names:
                        print(f"  {n:<40} {diffs[n]:.2e}")
                if not d <= args.tolerance:
                    final_bad.append(group)
    print(f"learning rate against torch.optim.lr_scheduler ({settings['schedule_text'] or 'constant'}): "
          f"max relative difference {worst_lr:.2e}")
    if not worst_lr <= 1e-6:
        print("FAIL: modelrun's learning rates differ from the torch scheduler's")
        return 1
    if bad:
        print(f"FAIL: steps {bad} differ by more than {args.tolerance:g}")
        return 1
    if final_bad:
        print(f"FAIL: the final {' and '.join(final_bad)} differ by more than {args.tolerance:g}")
        return 1
    print("OK")
    return 0


def bench(args, kind, model_text, settings):
    batch_size = args.batch or settings["batch"]
    model = build(kind, model_text, None, modelc_ir(args), args.seed)
    with torch.no_grad():
        for n, p in model.named():        # any reasonable values: only the time is measured
            p.normal_(0, 0.02) if p.dim() > 1 else p.fill_(1.0 if n.endswith(".g") else 0.0)
    opt = make_optimizer([p for _, p in model.named()], settings)
    batch = synthetic_batch(kind, model_text, batch_size)
    for _ in range(args.warmup):
        train_step(model, opt, settings["clip"], batch)
    times = []
    t0 = time.perf_counter()
    for _ in range(args.bench_steps):
        a = time.perf_counter()
        train_step(model, opt, settings["clip"], batch)
        times.append(time.perf_counter() - a)
    total = time.perf_counter() - t0
    times.sort()
    median = times[len(times) // 2]
    print(f"# PyTorch {torch.__version__} eager, float32, CPU (forward, backward, clipping, optimizer step)")
    print(f"{'model':<14} {'batch':>6} {'threads':>8} {'steps/s':>10} {'samples/s':>12} {'median ms/step':>14}")
    print(f"{kind:<14} {batch_size:>6} {torch.get_num_threads():>8} {args.bench_steps / total:>10.2f}"
          f" {args.bench_steps * batch_size / total:>12.0f} {1e3 * median:>14.2f}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_file", metavar="MODEL", help="the .model file (models/fashion_mlp.model, ...)")
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("--seed", type=int, default=1, help="the run's seed (modelrun train --seed), which random draws "
                    "(randn_like) are keyed by (default 1)")
    ap.add_argument("--modelc", default=os.environ.get("MODELC", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    "..", "build", "tools", "modelc")), help="modelc, for --emit=ir (default build/tools/modelc)")
    ap.add_argument("--verbose", action="store_true", help="--final: the difference of every tensor")
    ap.add_argument("--final", help="modelrun's checkpoint after the last step: its parameters and buffers are "
                    "compared with torch's")
    ap.add_argument("--init", help="modelrun train --save-initial output")
    ap.add_argument("--batches", help="modelrun train --dump-batches output")
    ap.add_argument("--metrics", help="modelrun train --metrics output (.jsonl)")
    ap.add_argument("--steps", type=int, default=0, help="steps to compare (default: all in the metrics); "
                    "with --bench, timed steps (default 20)")
    ap.add_argument("--tolerance", type=float, default=1e-4, help="largest relative loss difference (1e-4)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--bench", action="store_true", help="time eager train steps instead of checking")
    ap.add_argument("--warmup", type=int, default=3, help="--bench: untimed steps first (3)")
    ap.add_argument("--batch", type=int, default=0, help="--bench: examples per step (default: the train section's)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    model_text = open(args.model_file).read()
    settings = train_settings(model_text)
    if args.bench:
        args.bench_steps = args.steps or 20
        return bench(args, args.kind, model_text, settings)
    if not (args.init and args.batches and args.metrics):
        ap.error("--init, --batches and --metrics are needed (or --bench)")
    return check(args, args.kind, model_text, settings)


if __name__ == "__main__":
    sys.exit(main())

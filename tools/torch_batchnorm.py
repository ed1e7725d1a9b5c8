#!/usr/bin/env python3
"""Writes tests/train/torch_batchnorm.txt: PyTorch's numbers (CPU, float32) for a small
convolutional classifier with torch.nn.BatchNorm2d and BatchNorm1d, trained 10 SGD steps,
for tests/train/test_torch_batchnorm.cc (which needs no Python: it compiles the same model
with the standard library's batchnorm2d / batchnorm1d and compares). Recorded: the initial
parameters, the batches, each case's per-step losses (train mode: batch statistics), the
running statistics after the last step, and the logits of a held-out batch of another size
in eval mode (running statistics). Run it again after changing the cases:
  python3 tools/torch_batchnorm.py > tests/train/torch_batchnorm.txt

Cases: plain; accumulate = 2 (two forward passes per step, so the running statistics move
twice, as two forward calls move them in PyTorch); and the batch norm recomputed in the
backward pass (@checkpoint; torch.utils.checkpoint would run BatchNorm's forward twice and
move its statistics twice, so the reference is the plain run: modelc's must not move them
twice either).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS, B, C, H, W, K, CLASSES, EVAL_B = 10, 8, 3, 4, 4, 4, 3, 5
torch.manual_seed(7)


def fmt(t):
    return " ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(C, K, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(K, momentum=0.2)
        self.bn1 = nn.BatchNorm1d(K * H * W, eps=1e-3)
        self.lin = nn.Linear(K * H * W, CLASSES)

    def forward(self, x):
        h = F.relu(self.bn2(self.conv(x)))
        return self.lin(self.bn1(h.reshape(h.shape[0], -1)))


init = Net()
with torch.no_grad():  # affine weights and biases away from ones / zeros, so they are tested
    for bn in (init.bn2, init.bn1):
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
batches = [(torch.randn(B, C, H, W) * 2 + 0.5, torch.randint(0, CLASSES, (B,))) for _ in range(STEPS)]
held_out = torch.randn(EVAL_B, C, H, W) * 2 + 0.5

# modelc's names; linear's w is [in, out], torch's weight [out, in].
params = {
    "conv.0.w": init.conv.weight, "conv.0.b": init.conv.bias,
    "batchnorm2d.0.g": init.bn2.weight, "batchnorm2d.0.b": init.bn2.bias,
    "batchnorm1d.0.g": init.bn1.weight, "batchnorm1d.0.b": init.bn1.bias,
    "linear.0.w": init.lin.weight.t(), "linear.0.b": init.lin.bias,
}
for name, t in params.items():
    print("param", name, fmt(t))
for k, (x, y) in enumerate(batches):
    print("batch", k, "x", fmt(x), "y", " ".join(str(int(v)) for v in y))
print("held_out", fmt(held_out))

for case, accumulate in (("plain", 1), ("accumulate", 2), ("checkpoint", 1)):
    net = Net()
    net.load_state_dict(init.state_dict())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        total = 0.0
        for xs, ys in zip(x.chunk(accumulate), y.chunk(accumulate)):
            loss = F.cross_entropy(net(xs), ys) / accumulate
            loss.backward()
            total += float(loss)
        losses.append(total)
        opt.step()
    print("case", case, accumulate)
    print("loss", " ".join(repr(v) for v in losses))
    for name, bn in (("batchnorm2d.0", net.bn2), ("batchnorm1d.0", net.bn1)):
        print("buffer", name + ".running_mean", fmt(bn.running_mean))
        print("buffer", name + ".running_var", fmt(bn.running_var))
    net.eval()
    with torch.no_grad():
        print("eval_logits", fmt(net(held_out)))

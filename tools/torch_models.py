"""The example models of models/, written out by hand in PyTorch for tools/torch_reference.py.

Each class is its .model file op for op, with modelrun's parameter names and shapes (linear
weights [in, out], used as x @ w). Parameters live in one ParameterList under those names
('.' is not allowed in a module attribute, so they are kept flat). A model's random draws
(randn_like) are replayed from the same Philox stream modelrun draws from
(runtime/base/philox.h), keyed by the seed, the step and the call's key, which
`modelc --emit=ir` prints. Shapes come from modelrun's initial parameters or, without
them (--bench), from the `param` and `state` lines of `modelc --emit=ir`.
"""

import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F


def is_buffer(name):
    return name.endswith((".running_mean", ".running_var"))


class Flat(nn.Module):
    def __init__(self, shapes):
        super().__init__()
        self.names = sorted(n for n in shapes if not is_buffer(n))
        self.buffer_names = sorted(n for n in shapes if is_buffer(n))
        self.p = nn.ParameterList([nn.Parameter(torch.zeros(shapes[n])) for n in self.names])
        self.index = {n: i for i, n in enumerate(self.names)}
        self.bufs = {n: torch.zeros(shapes[n]) for n in self.buffer_names}
        self.step = 0                      # the training step (0 first): the Philox counter of random draws

    def __getitem__(self, name):
        return self.bufs[name] if is_buffer(name) else self.p[self.index[name]]

    def numbered(self, prefix):            # the i of the parameters named PREFIX.i...., in order
        return sorted({int(n.split(".")[1]) for n in self.names if n.startswith(prefix + ".")})

    def named(self):                       # the trained parameters
        return [(n, self[n]) for n in self.names]

    def all_named(self):                   # and the buffers
        return self.named() + [(n, self.bufs[n]) for n in self.buffer_names]

    def linear(self, x, prefix):           # def linear: x @ w + b (b optional in nn's), w [in, out]
        y = x @ self[prefix + ".w"]
        return y + self[prefix + ".b"] if prefix + ".b" in self.index else y

    def conv(self, x, prefix, stride=1, padding=0):  # def conv (nn): conv2d(x, w, b?)
        b = prefix + ".b"
        return F.conv2d(x, self[prefix + ".w"], self[b] if b in self.index else None, stride=stride, padding=padding)

    def batchnorm(self, x, prefix, momentum=0.1, eps=1e-5):  # batchnorm1d / 2d (nn), train mode
        return F.batch_norm(x, self[prefix + ".running_mean"], self[prefix + ".running_var"], self[prefix + ".g"],
                            self[prefix + ".b"], training=True, momentum=momentum, eps=eps)


class LeNetBN(Flat):                       # models/lenet_bn.model
    inputs = ("images", "labels")

    def loss(self, images, labels):
        h = F.max_pool2d(torch.relu(self.batchnorm(self.conv(images, "conv.0", padding=2), "batchnorm2d.0")), 2)
        h = F.max_pool2d(torch.relu(self.batchnorm(self.conv(h, "conv.1"), "batchnorm2d.1")), 2)
        h = torch.relu(self.batchnorm(self.linear(h.flatten(1), "linear.0"), "batchnorm1d.0"))
        h = torch.relu(self.batchnorm(self.linear(h, "linear.1"), "batchnorm1d.1"))
        return F.cross_entropy(self.linear(h, "linear.2"), labels.long())


class ResNet(Flat):                        # models/resnet.model (residual_block of lib/nn.model)
    inputs = ("images", "labels")

    def block(self, x, prefix, stride):
        h = torch.relu(self.batchnorm(self.conv(x, prefix + ".conv.0", stride, 1), prefix + ".batchnorm2d.0"))
        h = self.batchnorm(self.conv(h, prefix + ".conv.1", 1, 1), prefix + ".batchnorm2d.1")
        if prefix + ".conv.2.w" in self.index:
            x = self.batchnorm(self.conv(x, prefix + ".conv.2", stride), prefix + ".batchnorm2d.2")
        return torch.relu(x + h)

    def loss(self, images, labels):
        h = torch.relu(self.batchnorm(self.conv(images, "conv.0", padding=1), "batchnorm2d.0"))
        for i in self.numbered("residual_block"):
            shortcut = f"residual_block.{i}.conv.2.w"
            stride = 2 if shortcut in self.index and self[shortcut].shape[0] != h.shape[1] else 1
            h = self.block(h, f"residual_block.{i}", stride)
        return F.cross_entropy(self.linear(h.mean((2, 3)), "linear.0"), labels.long())


class FashionMLP(Flat):
    inputs = ("images", "labels")

    def loss(self, images, labels):
        h = torch.relu(self.linear(images, "linear.0"))
        logits = self.linear(h, "linear.1")
        return F.cross_entropy(logits, labels.long())


class Transformer(Flat):                   # a character model of blocks block.0, block.1, ... and `heads` heads
    inputs = ("tokens", "targets")

    def __init__(self, shapes, heads):
        super().__init__(shapes)
        self.heads = heads
        self.blocks = self.numbered("block")


class CharGPT(Transformer):                # models/char_gpt.model
    def norm(self, x, prefix):              # def norm: layer_norm(x, g, b), eps 1e-5
        C = x.shape[-1]
        return F.layer_norm(x, (C,), self[prefix + ".g"], self[prefix + ".b"], eps=1e-5)

    def attention(self, x, prefix):
        B, T, C = x.shape
        H = self.heads
        D = C // H
        q, k, v = torch.split(self.linear(x, prefix + ".linear.0"), C, dim=-1)
        q = q.reshape(B, T, H, D).transpose(1, 2)                 # [B, H, T, D]
        k = k.reshape(B, T, H, D).transpose(1, 2)
        v = v.reshape(B, T, H, D).transpose(1, 2)
        att = q @ k.transpose(-2, -1) / math.sqrt(D)              # [B, H, T, T]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)         # j > i: -inf
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.linear(y, prefix + ".linear.1")

    def mlp(self, x, prefix):
        h = F.gelu(self.linear(x, prefix + ".linear.0"), approximate="tanh")
        return self.linear(h, prefix + ".linear.1")

    def loss(self, tokens, targets):
        wte, wpe = self["wte"], self["wpe"]
        h = F.embedding(tokens.long(), wte) + wpe
        for i in self.blocks:
            b = f"block.{i}"
            h = h + self.attention(self.norm(h, b + ".norm.0"), b + ".attention.0")
            h = h + self.mlp(self.norm(h, b + ".norm.1"), b + ".mlp.0")
        logits = self.norm(h, "norm.0") @ wte.t()                 # tied head [B, T, V]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.long().reshape(-1))


class Diabetes(Flat):                      # models/diabetes.model: a regression with mse_loss
    inputs = ("x", "y")

    def loss(self, x, y):
        h = torch.relu(self.linear(x, "linear.0"))
        pred = 152.0 + 77.0 * self.linear(h, "linear.1").squeeze(1)
        return F.mse_loss(pred, y)


# ----------------------------------------------------------------------------------------
# Philox4x32-10 on int64 tensors of 32-bit words, as runtime/base/philox.h: element i of a
# draw at step s is philox((i_lo, i_hi, s_lo, s_hi), dropout_key(seed, key))[0].

MASK = 0xFFFFFFFF


def mulhilo(a, b):                         # a a constant word, b words: (hi, lo) of a * b without overflow
    p0, p1 = a * (b & 0xFFFF), a * (b >> 16)     # each < 2^48
    s = p0 + ((p1 & 0xFFFF) << 16)
    return (p1 >> 16) + (s >> 32), s & MASK


def philox(c, k):
    c0, c1, c2, c3 = c
    k0, k1 = k
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
        hi0, lo0 = mulhilo(0xD2511F53, c0)
        hi1, lo1 = mulhilo(0xCD9E8D57, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


assert philox((0, 0, 0, 0), (0, 0))[0] == 0x6627E8D5   # the published known answer


def uniform(seed, key, step, n):           # n floats in [0, 1): the top 24 bits of each word
    site = philox((key & MASK, key >> 32, 0, 0), (seed & MASK, seed >> 32))[:2]
    i = torch.arange(n, dtype=torch.int64)
    bits = philox((i & MASK, i >> 32, step & MASK, step >> 32), site)[0]
    return (bits >> 8).to(torch.float32) * (1.0 / 16777216.0)


def randn(shape, seed, key, step):         # randn_like: Box-Muller over the draws of keys k and k ^ 1
    n = math.prod(shape)
    u1, u2 = uniform(seed, key, step, n), uniform(seed, key ^ 1, step, n)
    two_pi = torch.tensor(2 * math.pi, dtype=torch.float32)
    return (torch.sqrt(-2.0 * torch.log(1.0 - u1)) * torch.cos(two_pi * u2)).reshape(shape)


def randn_keys(ir_text):                   # the keys of the randn_like calls, in the order of the model
    keys = [int(k) for k in re.findall(r"= rand_like\(.*\{key = (\d+)\}", ir_text)]
    if len(keys) % 2 or any(keys[i + 1] != keys[i] ^ 1 for i in range(0, len(keys), 2)):
        raise SystemExit("torch_models: expected the rand_like draws of randn_like in pairs (k, k ^ 1) in modelc --emit=ir")
    return keys[0::2]


class VAE(Flat):                           # models/vae.model
    inputs = ("images", "labels")

    def __init__(self, shapes, seed, keys):
        super().__init__(shapes)
        self.seed, self.keys = seed, keys

    def loss(self, images, labels):
        h = torch.relu(self.linear(images, "linear.0"))
        mu, logvar = self.linear(h, "linear.1"), self.linear(h, "linear.2")
        z = mu + torch.exp(0.5 * logvar) * randn(mu.shape, self.seed, self.keys[0], self.step)
        logits = self.linear(torch.relu(self.linear(z, "linear.3")), "linear.4")
        recon = 784.0 * F.binary_cross_entropy_with_logits(logits, images)
        kl = -0.5 * torch.mean(torch.sum(1.0 + logvar - mu * mu - torch.exp(logvar), 1))
        return recon + kl


class LlamaChar(Transformer):              # models/llama_char.model (rmsnorm, rope, swiglu of lib/nn.model)
    def rmsnorm(self, x, prefix):
        return F.rms_norm(x, (x.shape[-1],), self[prefix + ".g"], eps=1e-6)

    @staticmethod
    def rope(x, base=10000.0):             # nn's rope: rotate halves, frequencies base^(-2i / D)
        T, D = x.shape[-2], x.shape[-1]
        inv = torch.exp(torch.arange(D // 2, dtype=torch.float32) * (-2.0 * math.log(base) / D))
        angle = torch.arange(T, dtype=torch.float32).reshape(T, 1) * inv.reshape(1, D // 2)
        c, s = torch.cat([angle.cos(), angle.cos()], -1), torch.cat([angle.sin(), angle.sin()], -1)
        x1, x2 = torch.split(x, D // 2, dim=-1)
        return x * c + torch.cat([-x2, x1], -1) * s

    def attention(self, x, prefix):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in torch.split(x @ self[prefix + ".linear.0.w"], C, -1))
        y = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        return y.transpose(1, 2).reshape(B, T, C) @ self[prefix + ".linear.1.w"]

    def swiglu(self, x, prefix):
        w = [self[f"{prefix}.linear.{i}.w"] for i in range(3)]
        return (F.silu(x @ w[0]) * (x @ w[1])) @ w[2]

    def loss(self, tokens, targets):
        wte = self["wte"]
        h = F.embedding(tokens.long(), wte)
        for i in self.blocks:
            b = f"block.{i}"
            h = h + self.attention(self.rmsnorm(h, b + ".rmsnorm.0"), b + ".attention.0")
            h = h + self.swiglu(self.rmsnorm(h, b + ".rmsnorm.1"), b + ".swiglu.0")
        logits = self.rmsnorm(h, "rmsnorm.0") @ wte.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.long().reshape(-1))


def ir_shapes(ir_text):                    # the parameters and buffers of modelc --emit=ir
    return {name: tuple(int(d) for d in dims.split(",")) if dims else ()
            for name, dims in re.findall(r'= (?:param|state) "([^"]+)" : \w+\[([\d,]*)\]', ir_text)}


def heads_of(model_text):
    return int(re.search(r"block\(h,\s*heads\s*=\s*(\d+)\)", model_text).group(1))


# Each kind's model from (shapes, the .model text, modelc --emit=ir, the run's seed).
MODELS = {
    "fashion_mlp": lambda shapes, text, ir, seed: FashionMLP(shapes),
    "char_gpt": lambda shapes, text, ir, seed: CharGPT(shapes, heads_of(text)),
    "lenet_bn": lambda shapes, text, ir, seed: LeNetBN(shapes),
    "resnet": lambda shapes, text, ir, seed: ResNet(shapes),
    "diabetes": lambda shapes, text, ir, seed: Diabetes(shapes),
    "vae": lambda shapes, text, ir, seed: VAE(shapes, seed, randn_keys(ir)),
    "llama_char": lambda shapes, text, ir, seed: LlamaChar(shapes, heads_of(text)),
}
KINDS = tuple(MODELS)


def build(kind, model_text, init, ir_text, seed=0):
    """The model of `kind`; shapes from `init` (modelrun's initial parameters) where given, else
    from `ir_text` (modelc --emit=ir, which also gives the random draws' keys)."""
    if kind not in MODELS:
        raise SystemExit(f"torch_reference: unknown model kind {kind}")
    shapes = {n: tuple(t.shape) for n, t in init.items()} if init else ir_shapes(ir_text)
    return MODELS[kind](shapes, model_text, ir_text, seed)


def synthetic_batch(kind, model_text, batch):
    """Inputs of the model's shapes for --bench (their values do not matter)."""
    g = torch.Generator().manual_seed(1)
    if kind in ("fashion_mlp", "vae"):
        return torch.rand(batch, 784, generator=g), torch.randint(0, 10, (batch,), generator=g, dtype=torch.int32)
    if kind in ("char_gpt", "llama_char"):
        T = int(re.search(r"model\s+\w+\s*\([^)]*\bT\s*=\s*(\d+)", model_text).group(1))
        return (torch.randint(0, 73, (batch, T), generator=g, dtype=torch.int32),
                torch.randint(0, 73, (batch, T), generator=g, dtype=torch.int32))
    raise SystemExit(f"torch_reference: --bench does not know {kind}'s inputs")

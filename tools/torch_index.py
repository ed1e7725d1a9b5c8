#!/usr/bin/env python3
"""Writes tests/ir/torch_index.txt: PyTorch's values (torch.float64) of the index ops and
reductions of tests/grad/test_torch_index.cc (argmax, argmin, prod, gather, scatter_add,
topk, arange, and conv1d, conv_transpose2d and bilinear upsampling, with gradients), on
edge cases (ties, negative axes, zeros, NaN) and random values.
Run it again after changing the cases: python3 tools/torch_index.py > tests/ir/torch_index.txt

A line is the op, then its attributes as @name=value (an int, 0/1 for a bool, or a list
a,b,c), then tensors as NAME:SHAPE (extents joined by commas, empty for a scalar) followed
by their values: the inputs (`index...` ones are integers), `want` (PyTorch's result),
`want2` (its second: topk's indices), `w` (weights, when given: the loss is
sum(result * w), else sum(result); a NaN in the result counts 0) and, for a differentiable
op, `grad` (the gradient of the loss with respect to the first input) and `gradK` (with
respect to input K: a convolution's weight, scatter_add's src).
"""
import random
import struct
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402

random.seed(20261204)


def f32(values):
    # Values exactly representable in f32, so that both sides start from the same numbers.
    return [struct.unpack('f', struct.pack('f', v))[0] for v in values]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def rnd(shape, lo, hi):
    return f32([random.uniform(lo, hi) for _ in range(numel(shape))])


def grid(shape, lo, hi, step):
    k = int(round((hi - lo) / step))
    return [lo + step * random.randint(0, k) for _ in range(numel(shape))]


def T(v, shape):
    return torch.tensor(v, dtype=torch.float64).reshape(shape)


def tensor(name, t):
    shape = ",".join(str(d) for d in t.shape)
    vals = " ".join(repr(float(v)) for v in t.reshape(-1).tolist())
    return f"{name}:{shape} {vals}".rstrip()


def attr(name, v):
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, (list, tuple)):
        v = ",".join(str(a) for a in v)
    return f"@{name}={v}"


def emit(op, attrs, inputs, want, grad=None, grad2=None, w=None, want2=None, grad_at=2):
    parts = [op] + [attr(k, v) for k, v in attrs.items()] + [tensor(k, v) for k, v in inputs]
    parts.append(tensor("want", want))
    if want2 is not None:
        parts.append(tensor("want2", want2))
    if w is not None:
        parts.append(tensor("w", w))
    if grad is not None:
        parts.append(tensor("grad", grad))
    if grad2 is not None:
        parts.append(tensor(f"grad{grad_at}", grad2))
    print(" ".join(parts))


def arg_cases():
    cases = [([5], [1.0, 3.0, 3.0, -2.0, 3.0]),        # ties: the first
             ([2, 3], [0.0, 0.0, 0.0, -1.0, -1.0, 2.0]),
             ([4], [float("-inf")] * 4),              # every value -inf: position 0
             ([4], [1.0, float("nan"), 5.0, float("nan")]),  # NaN wins, the first
             ([4], [2.0, float("inf"), float("inf"), -1.0])]
    for shape in ([3, 4], [2, 3, 4], [1, 5], [4, 1, 2]):
        cases.append((shape, grid(shape, -1, 1, 0.5)))
    return cases


def args():
    for shape, v in arg_cases():
        x = T(v, shape)
        for axis in range(-len(shape), len(shape)):
            for keep in (False, True):
                for op, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
                    emit(op, {"axis": axis, "keepdims": keep}, [("x", x)], fn(x, dim=axis, keepdim=keep).double())


def prod_of(x, axes, keep):
    # torch.prod takes one dim: the product over several is one dim at a time.
    if not axes:
        return x.prod() if not keep else x.prod().reshape([1] * x.dim())
    y = x
    for a in sorted((a % x.dim() for a in axes), reverse=True):
        y = y.prod(dim=a, keepdim=keep)
    return y


def prods():
    cases = [([4], [2.0, 0.0, 3.0, -1.5], []),               # one zero
             ([4], [2.0, 0.0, 3.0, 0.0], []),                # two zeros
             ([2, 3], [1.0, 0.0, 2.0, 0.0, 0.0, 4.0], [1]),  # one zero in a row, two in the other
             ([2, 3], [0.0, 2.0, -3.0, 0.5, 0.0, 0.0], [0]),
             ([3, 2], [0.0] * 6, [-1])]
    for shape, axes in (([3, 4], [-1]), ([2, 3, 4], [0, 2]), ([2, 3], []), ([5], [0])):
        v = f32([random.choice([-1, 1]) * random.uniform(0.5, 1.5) for _ in range(numel(shape))])
        cases.append((shape, v, axes))
    for shape, v, axes in cases:
        for keep in (False, True):
            x = T(v, shape).requires_grad_(True)
            y = prod_of(x, axes, keep)
            y.sum().backward()
            emit("prod", {"axes": axes, "keepdims": keep}, [("x", x.detach())], y.detach(), x.grad)


def gathers():
    cases = [([3, 4], 1, [3, 2]), ([3, 4], 0, [2, 4]), ([3, 4], -1, [2, 3]), ([2, 3, 4], 1, [2, 5, 4]),
             ([2, 3, 4], 2, [1, 2, 6]), ([5], 0, [7])]
    for shape, axis, ishape in cases:
        x = T(rnd(shape, -2, 2), shape).requires_grad_(True)
        n = shape[axis]
        index = torch.tensor([random.randrange(n) for _ in range(numel(ishape))]).reshape(ishape)
        y = torch.gather(x, axis, index)
        w = T(rnd(ishape, -1, 1), ishape)
        (y * w).sum().backward()
        emit("gather", {"axis": axis}, [("x", x.detach()), ("index", index.double())], y.detach(), x.grad, w=w)


def scatters():
    cases = [([3, 5], 1, [3, 4], [3, 4]), ([3, 5], 0, [6, 5], [6, 5]), ([4, 3], 1, [2, 5], [2, 5]),
             ([2, 3, 4], -1, [2, 3, 6], [2, 3, 6]), ([6], 0, [9], [9])]  # (torch refuses the gradient of a src larger than the index)
    for shape, axis, ishape, sshape in cases:
        x = T(rnd(shape, -2, 2), shape).requires_grad_(True)
        src = T(rnd(sshape, -2, 2), sshape).requires_grad_(True)
        n = shape[axis]
        index = torch.tensor([random.randrange(n) for _ in range(numel(ishape))]).reshape(ishape)
        y = x.scatter_add(axis, index, src)
        w = T(rnd(shape, -1, 1), shape)
        (y * w).sum().backward()
        emit("scatter_add", {"axis": axis}, [("x", x.detach()), ("index", index.double()), ("src", src.detach())],
             y.detach(), x.grad, src.grad, w=w)


def topks():
    inf, nan = float("inf"), float("nan")
    cases = [([6], [0.5, -1.0, 2.0, inf, -inf, 0.25], 3, -1), ([5], [1.0, nan, -2.0, 3.0, 0.0], 2, 0),
             ([5], [1.0, nan, -2.0, 3.0, -inf], 5, 0)]
    for shape, axis, k in (([3, 7], -1, 3), ([4, 5], 0, 2), ([2, 3, 6], 1, 3), ([2, 6], 1, 6)):
        cases.append((shape, rnd(shape, -3, 3), k, axis))
    for shape, v, k, axis in cases:
        for largest in (True, False):
            x = T(v, shape).requires_grad_(True)
            vals, idx = torch.topk(x, k, dim=axis, largest=largest)
            w = T(rnd(list(vals.shape), -1, 1), list(vals.shape))
            (torch.where(torch.isnan(vals), 0.0, vals) * w).sum().backward()
            emit("topk", {"k": k, "axis": axis, "largest": largest}, [("x", x.detach())], vals.detach(),
                 x.grad, w=w, want2=idx.double())


def aranges():
    for end, start, step in ((5, 0, 1), (7.5, 1, 2), (-3, 2, -1), (1, 0, 0.25), (10, -4, 3)):
        emit("arange", {"end": end, "start": start, "step": step}, [], torch.arange(start, end, step, dtype=torch.float64))


def convs():
    for n, c, l, o, k, stride, pad, dil, groups in ((2, 3, 7, 4, 3, 2, 1, 1, 1), (1, 4, 9, 6, 2, 1, 0, 2, 2),
                                                    (2, 2, 5, 2, 5, 1, 2, 1, 2)):
        x = T(rnd([n, c, l], -1, 1), [n, c, l]).requires_grad_(True)
        w = T(rnd([o, c // groups, k], -1, 1), [o, c // groups, k]).requires_grad_(True)
        b = T(rnd([o], -1, 1), [o])
        y = torch.nn.functional.conv1d(x, w, b, stride, pad, dil, groups)
        wt = T(rnd(list(y.shape), -1, 1), list(y.shape))
        (y * wt).sum().backward()
        emit("conv1d", {"stride": stride, "padding": pad, "dilation": dil, "groups": groups},
             [("x", x.detach()), ("weight", w.detach()), ("bias", b)], y.detach(), x.grad, w.grad, w=wt, grad_at=1)
    for n, c, h, wd, o, kh, kw, stride, pad, opad, dil, groups in (
            (2, 4, 3, 3, 2, 3, 3, 2, 1, 1, 1, 2), (1, 3, 4, 2, 5, 2, 3, 1, 0, 0, 2, 1), (1, 2, 2, 3, 3, 3, 2, 3, 1, 2, 1, 1)):
        x = T(rnd([n, c, h, wd], -1, 1), [n, c, h, wd]).requires_grad_(True)
        w = T(rnd([c, o, kh, kw], -1, 1), [c, o, kh, kw]).requires_grad_(True)
        b = T(rnd([o * groups], -1, 1), [o * groups])
        y = torch.nn.functional.conv_transpose2d(x, w, b, stride, pad, opad, groups, dil)
        wt = T(rnd(list(y.shape), -1, 1), list(y.shape))
        (y * wt).sum().backward()
        emit("conv_transpose2d", {"stride": [stride], "padding": [pad], "output_padding": [opad], "dilation": [dil],
                                  "groups": groups},
             [("x", x.detach()), ("weight", w.detach()), ("bias", b)], y.detach(), x.grad, w.grad, w=wt, grad_at=1)


def upsamples():
    for shape, scale, align in (([1, 2, 3, 4], 2, False), ([2, 1, 3, 2], 3, False), ([1, 1, 4, 5], 2, True),
                                ([1, 2, 1, 3], 3, True), ([1, 1, 2, 2], 1, False)):
        x = T(rnd(shape, -2, 2), shape).requires_grad_(True)
        y = torch.nn.functional.interpolate(x, scale_factor=scale, mode="bilinear", align_corners=align)
        wt = T(rnd(list(y.shape), -1, 1), list(y.shape))
        (y * wt).sum().backward()
        emit("upsample", {"scale": scale, "mode": "bilinear", "align_corners": align}, [("x", x.detach())], y.detach(),
             x.grad, w=wt)


def attentions():
    # torch's scaled_dot_product_attention (math backend in float64): dq with dk, then with dv.
    for b, h, t, s, d, e, causal, scale in ((1, 2, 3, 3, 4, 4, False, None), (2, 1, 4, 4, 3, 2, True, None),
                                            (1, 1, 3, 5, 2, 3, True, 0.5), (1, 2, 5, 3, 4, 4, True, None),
                                            (1, 1, 2, 40, 2, 2, False, None)):
        q = T(rnd([b, h, t, d], -1, 1), [b, h, t, d]).requires_grad_(True)
        k = T(rnd([b, h, s, d], -1, 1), [b, h, s, d]).requires_grad_(True)
        v = T(rnd([b, h, s, e], -1, 1), [b, h, s, e]).requires_grad_(True)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        wt = T(rnd(list(y.shape), -1, 1), list(y.shape))
        (y * wt).sum().backward()
        attrs = {"causal": causal}
        if scale is not None:
            attrs["scale"] = scale
        ins = [("q", q.detach()), ("k", k.detach()), ("v", v.detach())]
        emit("scaled_dot_product_attention", attrs, ins, y.detach(), q.grad, k.grad, w=wt, grad_at=1)
        emit("scaled_dot_product_attention", attrs, ins, y.detach(), q.grad, v.grad, w=wt, grad_at=2)


print("# Generated by tools/torch_index.py with torch", torch.__version__, "(float64); do not edit.")
args()
prods()
gathers()
scatters()
topks()
aranges()
convs()
upsamples()
attentions()

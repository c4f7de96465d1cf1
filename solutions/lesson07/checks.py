"""Hidden tests for lesson 7 (序列并行 SP). Points add up to 4.

Shapes, values and model sizes are drawn per submission from ``rng`` (sequence lengths that t does
not divide, t larger than the sequence or the MLP width, t = 1), with normal entries like the page's
and realistic model sizes, so that neither a function that only knows the page's examples nor one
that recognises a hidden check by its inputs earns a point.
Expected values come from a dense numpy computation done here, from the reference solution
(``ref``) or from the memory formulas written out by hand.
"""

import numpy as np

from grader.checks import check, close, ndarray, normal_matrix
from grader.kernel import StudentCallError

TOL = dict(rel=1e-9, abs_tol=1e-9)


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _rms(x):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def _dense_block(X, W1, W2):
    return X + _gelu(_rms(X) @ W1) @ W2


def _not_divisible(rng, t, lo, hi):
    """A length in [lo, hi] that t does not divide (t >= 2)."""
    while True:
        d = rng.randint(lo, hi)
        if d % t:
            return d


def _rank_rows(dense, t):
    """The rows rank i holds in the SP region, as plain lists."""
    return [part.tolist() for part in np.array_split(dense, t, axis=0)]


@check(points=0.5)
def gather_concatenates(student, rng):
    """all_gather_seq：各 rank 的 token 段长度不同（含只有一个 rank）时，按 rank 顺序沿序列维拼接"""
    for t in (rng.randint(2, 6), 1):
        h = rng.randint(1, 6)
        shards = [normal_matrix(rng, rng.randint(1, 5), h) for _ in range(t)]
        got = student.call("all_gather_seq", [ndarray(x) for x in shards])
        if not close(got, np.concatenate(shards, axis=0).tolist(), **TOL):
            return False
    return True


@check(points=0.75)
def scatter_sums_and_splits(student, rng):
    """reduce_scatter_seq：序列长度不能被 t 整除或小于 t 时，各 rank 分到的段与数值都正确"""
    t1 = rng.randint(2, 5)
    t2 = rng.randint(4, 7)
    for s, t in ((_not_divisible(rng, t1, t1 + 1, 5 * t1), t1), (rng.randint(1, t2 - 1), t2)):
        h = rng.randint(1, 5)
        partials = [normal_matrix(rng, s, h) for _ in range(t)]
        got = student.call("reduce_scatter_seq", [ndarray(p) for p in partials])
        if not close(got, _rank_rows(sum(partials), t), **TOL):
            return False
    return True


@check(points=0.75)
def block_equals_dense(student, rng):
    """sp_mlp：随机形状下（序列长度与中间维不能被 t 整除），拼接各 rank 的输出等于稠密的残差 MLP 块"""
    for _ in range(3):
        t = rng.randint(2, 5)
        s = _not_divisible(rng, t, t + 1, 4 * t)
        h = rng.randint(2, 6)
        f = _not_divisible(rng, t, t + 1, 4 * t)
        X, W1, W2 = normal_matrix(rng, s, h), normal_matrix(rng, h, f), normal_matrix(rng, f, h)
        got = student.call("sp_mlp", ndarray(X), ndarray(W1), ndarray(W2), t)
        rows = [row for shard in got for row in shard]
        if not close(rows, _dense_block(X, W1, W2).tolist(), **TOL):
            return False
    return True


@check(points=0.5)
def block_rank_owns_its_tokens(student, rng):
    """sp_mlp：每个 rank 返回的恰好是它在 SP 区域负责的那段 token，段数与段长符合 np.array_split"""
    t = rng.randint(3, 6)
    s = _not_divisible(rng, t, t + 1, 3 * t)
    h, f = rng.randint(2, 5), rng.randint(t, 3 * t)
    X, W1, W2 = normal_matrix(rng, s, h), normal_matrix(rng, h, f), normal_matrix(rng, f, h)
    got = student.call("sp_mlp", ndarray(X), ndarray(W1), ndarray(W2), t)
    return close(got, _rank_rows(_dense_block(X, W1, W2), t), **TOL)


@check(points=0.5)
def block_edge_cases(student, rng):
    """sp_mlp：t = 1、t 大于序列长度（有的 rank 没有 token）、t 大于中间维时仍正确"""
    h = rng.randint(2, 5)
    cases = (
        (rng.randint(2, 6), rng.randint(3, 7), 1),
        (rng.randint(1, 3), rng.randint(6, 9), rng.randint(4, 6)),
        (rng.randint(5, 8), rng.randint(1, 2), rng.randint(3, 4)),
    )
    for s, f, t in cases:
        X, W1, W2 = normal_matrix(rng, s, h), normal_matrix(rng, h, f), normal_matrix(rng, f, h)
        got = student.call("sp_mlp", ndarray(X), ndarray(W1), ndarray(W2), t)
        if not close(got, _rank_rows(_dense_block(X, W1, W2), t), **TOL):
            return False
    return True


def _expected_bytes(s, b, h, a, t, mode):
    attn = 5 * a * s / h
    coeff = {"none": 34 + attn, "tp": 10 + 24 / t + attn / t, "tp_sp": 34 / t + attn / t}[mode]
    return float(s * b * h * coeff)


def _model(rng):
    """A realistic (s, b, h, a): sequence length, micro-batch, hidden size, heads."""
    h, a = rng.choice([(1024, 16), (2048, 16), (2560, 32), (4096, 32), (5120, 40), (8192, 64)])
    return rng.choice([512, 1024, 2048, 4096, 8192, 16384, 32768]), rng.choice([1, 1, 2, 4, 8]), h, a


@check(points=0.75)
def memory_formulas(student, rng):
    """activation_bytes_per_layer：随机的模型尺寸与 TP 度下，三种方式的每层激活字节数都正确"""
    for _ in range(3):
        s, b, h, a = _model(rng)
        t = rng.choice([2, 4, 8, 16])
        for mode in ("none", "tp", "tp_sp"):
            got = student.call("activation_bytes_per_layer", s, b, h, a, t, mode)
            if not close(got, _expected_bytes(s, b, h, a, t, mode), rel=1e-9):
                return False
    return True


@check(points=0.25)
def memory_edge_cases(student, rng):
    """activation_bytes_per_layer：t = 1 时三种方式相等，序列长度为 0 时为 0，未知 mode 抛出 ValueError"""
    for mode in ("none", "tp", "tp_sp"):
        s, b, h, a = _model(rng)
        if not close(
            student.call("activation_bytes_per_layer", s, b, h, a, 1, mode), _expected_bytes(s, b, h, a, 1, "none")
        ):
            return False
        if not close(student.call("activation_bytes_per_layer", 0, b, h, a, rng.choice([2, 4, 8]), mode), 0.0):
            return False
    try:
        student.call("activation_bytes_per_layer", s, b, h, a, 2, rng.choice(["sp", "cp", "TP", "full"]))
    except StudentCallError as exc:
        return exc.kind == "error" and exc.detail == "ValueError"
    return False

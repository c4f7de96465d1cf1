"""Hidden tests for lesson 6 (张量并行 TP). Points add up to 4.

Shapes and values are drawn per submission from ``rng`` (including dimensions that t does not
divide and t larger than the split dimension), with normal entries like the page's and realistic
model sizes, so that neither a function that only knows the page's examples nor one that
recognises a hidden check by its inputs earns a point. Expected values come
from the reference solution (``ref``), from a dense numpy computation done here, or from the
byte formulas written out by hand.
"""

import numpy as np

from grader.checks import check, close, ndarray, normal_matrix

TOL = dict(rel=1e-9, abs_tol=1e-9)


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _not_divisible(rng, t, lo, hi):
    """A dimension in [lo, hi] that t does not divide (t >= 2)."""
    while True:
        d = rng.randint(lo, hi)
        if d % t:
            return d


@check(points=0.5)
def column_shard_shapes(student, rng, ref):
    """column_parallel_linear：输出维不能被 t 整除时，分片个数、形状与 np.array_split 一致，值为 X @ W_i"""
    t = rng.randint(2, 5)
    n, d_in = rng.randint(2, 5), rng.randint(2, 6)
    d_out = _not_divisible(rng, t, t + 1, 4 * t)
    X, W = normal_matrix(rng, n, d_in), normal_matrix(rng, d_in, d_out)
    got = student.call("column_parallel_linear", ndarray(X), ndarray(W), t)
    widths = [d_out // t + (1 if i < d_out % t else 0) for i in range(t)]
    assert len(got) == t
    for shard, width in zip(got, widths):
        assert len(shard) == n and all(len(row) == width for row in shard)
    return close(got, [a.tolist() for a in ref.column_parallel_linear(X, W, t)], **TOL)


@check(points=0.5)
def column_concat_is_dense(student, rng):
    """column_parallel_linear：各分片按列拼接后等于稠密结果 X @ W（含 t 大于输出维的情况）"""
    for d_out, t in ((rng.randint(5, 12), rng.randint(2, 4)), (rng.randint(1, 3), rng.randint(4, 6))):
        n, d_in = rng.randint(1, 4), rng.randint(2, 6)
        X, W = normal_matrix(rng, n, d_in), normal_matrix(rng, d_in, d_out)
        got = student.call("column_parallel_linear", ndarray(X), ndarray(W), t)
        assert len(got) == t
        rows = [[v for shard in got for v in shard[r]] for r in range(n)]
        if not close(rows, (X @ W).tolist(), **TOL):
            return False
    return True


@check(points=0.75)
def row_partials_and_output(student, rng, ref):
    """row_parallel_linear：输入维不能被 t 整除时，各 rank 的部分和 X_i @ W_i 与 all-reduce 后的输出都正确"""
    for _ in range(2):
        t = rng.randint(2, 5)
        n, d_out = rng.randint(1, 4), rng.randint(2, 6)
        d_in = _not_divisible(rng, t, t + 1, 4 * t)
        X, W = normal_matrix(rng, n, d_in), normal_matrix(rng, d_in, d_out)
        got = student.call("row_parallel_linear", ndarray(X), ndarray(W), t)
        exp = ref.row_parallel_linear(X, W, t)
        assert isinstance(got, dict) and set(got) == {"partials", "output"}
        if not close(got["partials"], [p.tolist() for p in exp["partials"]], **TOL):
            return False
        if not close(got["output"], (X @ W).tolist(), **TOL):
            return False
    return True


@check(points=0.25)
def row_more_ranks_than_rows(student, rng):
    """row_parallel_linear：t 大于输入维时，多出的 rank 部分和为全零，输出仍等于 X @ W"""
    for d_in, n in ((rng.randint(1, 3), rng.randint(1, 4)), (rng.randint(2, 4), rng.randint(3, 6))):
        t = d_in + rng.randint(1, 3)
        d_out = rng.randint(2, 5)
        X, W = normal_matrix(rng, n, d_in), normal_matrix(rng, d_in, d_out)
        got = student.call("row_parallel_linear", ndarray(X), ndarray(W), t)
        assert len(got["partials"]) == t
        zeros = [[0.0] * d_out for _ in range(n)]
        if not all(close(p, zeros) for p in got["partials"][d_in:]):
            return False
        if not close(got["output"], (X @ W).tolist(), **TOL):
            return False
    return True


@check(points=0.75)
def mlp_equals_dense(student, rng):
    """tp_mlp：随机形状下（中间维 f 不能被 t 整除）输出等于稠密 MLP gelu_tanh(X @ W1) @ W2"""
    for _ in range(3):
        t = rng.randint(2, 6)
        n, h = rng.randint(1, 5), rng.randint(2, 7)
        f = _not_divisible(rng, t, t + 1, 5 * t)
        X, W1, W2 = normal_matrix(rng, n, h), normal_matrix(rng, h, f), normal_matrix(rng, f, h)
        got = student.call("tp_mlp", ndarray(X), ndarray(W1), ndarray(W2), t)
        if not close(got, (_gelu(X @ W1) @ W2).tolist(), **TOL):
            return False
    return True


@check(points=0.25)
def mlp_edge_cases(student, rng):
    """tp_mlp：t = 1 以及 t 大于中间维 f 时仍等于稠密结果"""
    n, h = rng.randint(1, 4), rng.randint(2, 5)
    for f, t in ((rng.randint(3, 9), 1), (rng.randint(1, 3), rng.randint(4, 7))):
        X, W1, W2 = normal_matrix(rng, n, h), normal_matrix(rng, h, f), normal_matrix(rng, f, h)
        got = student.call("tp_mlp", ndarray(X), ndarray(W1), ndarray(W2), t)
        if not close(got, (_gelu(X @ W1) @ W2).tolist(), **TOL):
            return False
    return True


def _expected_comm(b, s, h, t, nbytes):
    if t == 1:
        return {
            "allreduces_forward": 0,
            "allreduces_backward": 0,
            "bytes_per_allreduce": 0,
            "bytes_sent_per_rank_per_step": 0.0,
        }
    m = b * s * h * nbytes
    return {
        "allreduces_forward": 2,
        "allreduces_backward": 2,
        "bytes_per_allreduce": m,
        "bytes_sent_per_rank_per_step": 4 * 2 * (t - 1) / t * m,
    }


def _layer(rng):
    """(b, s, h, t, bytes per element) of a real training run; b = 1 and bf16 as often as the page uses them."""
    return (
        rng.choice([1, 1, 2, 4, 8, 16]),
        rng.choice([512, 1024, 2048, 4096, 8192, 16384]),
        rng.choice([768, 1024, 2048, 2560, 4096, 5120, 8192, 12288]),
        rng.choice([2, 4, 8, 16]),
        rng.choice([1, 2, 2, 4]),
    )


@check(points=0.25)
def comm_lesson_example(student, rng):
    """tp_comm_per_layer：课文中的例子（b = 1，s = h = 4096，bf16，t = 8）和另一组形状"""
    exp = {
        "allreduces_forward": 2,
        "allreduces_backward": 2,
        "bytes_per_allreduce": 33554432,
        "bytes_sent_per_rank_per_step": 234881024.0,
    }
    if not close(student.call("tp_comm_per_layer", 1, 4096, 4096, 8, 2), exp):
        return False
    b, s, h, t, nbytes = _layer(rng)
    return close(student.call("tp_comm_per_layer", b, s, h, t, nbytes), _expected_comm(b, s, h, t, nbytes), rel=1e-9)


@check(points=0.5)
def comm_random(student, rng):
    """tp_comm_per_layer：随机的 b、s、h、t 与每元素字节数下，次数与字节数公式正确"""
    for _ in range(3):
        b, s, h, t, nbytes = _layer(rng)
        got = student.call("tp_comm_per_layer", b, s, h, t, nbytes)
        if not close(got, _expected_comm(b, s, h, t, nbytes), rel=1e-9):
            return False
    return True


@check(points=0.25)
def comm_single_rank(student, rng):
    """tp_comm_per_layer：t = 1 时没有任何 TP 通信，四个值都为 0；同样的形状 t > 1 时照常计算"""
    b, s, h, t, nbytes = _layer(rng)
    if not close(student.call("tp_comm_per_layer", b, s, h, 1, nbytes), _expected_comm(b, s, h, 1, nbytes)):
        return False
    return close(student.call("tp_comm_per_layer", b, s, h, t, nbytes), _expected_comm(b, s, h, t, nbytes), rel=1e-9)

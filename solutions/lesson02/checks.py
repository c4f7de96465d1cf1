"""Hidden tests for lesson 2 (激活重计算与梯度累积). Points add up to 4.

Every check draws inputs from ``rng`` at grading time, shaped like the page's examples (the same
model sizes, d = 3 features and normal data as in the selfcheck), so that neither a function that
only knows the page's examples nor one that recognises a hidden check by its inputs earns a point.
Expected values are computed here by hand (the activation formulas, the full-batch gradient of the
MSE loss) rather than taken from the student's logic.
Every check that expects a ValueError first makes a valid call, so an untouched notebook (whose
blanks are reached before any result) cannot pass it.
"""

import numpy as np

from grader.checks import check, close, ndarray, raises_value_error


def _act(s, b, h, a, layers, mode):
    per_layer = {"none": 34 * s * b * h + 5 * a * s * s * b, "selective": 34 * s * b * h, "full": 2 * s * b * h}[mode]
    return layers * per_layer


def _config(rng, batch=None):
    """(s, b, h, a, L) of a GPT-like model, drawn around the page's 7B example."""
    heads = rng.choice([8, 12, 16, 32, 40, 64, 96])
    head_dim = rng.choice([64, 80, 128])
    return (
        rng.choice([512, 1024, 2048, 4096, 8192, 16384]),
        rng.randint(1, 8) if batch is None else batch,
        heads * head_dim,
        heads,
        rng.randint(1, 96),
    )


def _data(rng, n, d):
    X = [[rng.gauss(0.0, 1.0) for _ in range(d)] for _ in range(n)]
    y = [rng.gauss(0.0, 1.0) for _ in range(n)]
    w = [rng.gauss(0.0, 1.0) for _ in range(d)]
    return X, y, w


def _full_grad(X, y, w):
    Xa, ya, wa = np.array(X), np.array(y), np.array(w)
    return (2.0 / len(y) * (Xa.T @ (Xa @ wa - ya))).tolist()


def _grad_ok(student, X, y, w, mbs):
    got = student.call("accumulated_grad", ndarray(X), ndarray(y), ndarray(w), mbs)
    return close(got, _full_grad(X, y, w), rel=1e-9, abs_tol=1e-9)


@check(points=0.5)
def act_lesson_example(student, rng):
    """activation_memory：课文中的 7B 级配置（s=4096, b=1, h=4096, a=32, L=32）三种模式分别为 97、17、1 GiB，另一个 b=1 的配置也要对，返回 int"""
    gib = 2**30
    for mode, expected in (("none", 97 * gib), ("selective", 17 * gib), ("full", gib)):
        got = student.call("activation_memory", 4096, 1, 4096, 32, 32, mode)
        if type(got) is not int or got != expected:
            return False
    s, b, h, a, layers = _config(rng, batch=1)
    for mode in rng.sample(["none", "selective", "full"], 3):
        got = student.call("activation_memory", s, b, h, a, layers, mode)
        if type(got) is not int or got != _act(s, b, h, a, layers, mode):
            return False
    return True


@check(points=0.5)
def act_random(student, rng):
    """activation_memory：随机生成的配置，三种模式都与公式完全一致"""
    for _ in range(3):
        s, b, h, a, layers = _config(rng)
        for mode in ("none", "selective", "full"):
            got = student.call("activation_memory", s, b, h, a, layers, mode)
            if type(got) is not int or got != _act(s, b, h, a, layers, mode):
                return False
    return True


@check(points=0.25)
def act_bad_mode(student, rng):
    """activation_memory：mode 不是 none/selective/full 时抛出 ValueError"""
    s, b, h, a, layers = _config(rng)
    if student.call("activation_memory", s, b, h, a, layers, "selective") != _act(s, b, h, a, layers, "selective"):
        return False
    return all(raises_value_error(student, "activation_memory", s, b, h, a, layers, m) for m in ("partial", "Full", ""))


@check(points=0.5)
def steps_values(student, rng):
    """accumulation_steps：能整除时返回 gbs / (mbs × dp)（int），dp 省略时按 1 计算"""
    mbs, dp, k = rng.randint(1, 16), rng.choice([1, 2, 8, 64, 512]), rng.randint(1, 300)
    got = student.call("accumulation_steps", mbs * dp * k, mbs, dp)
    if type(got) is not int or got != k:
        return False
    mbs, k = rng.randint(1, 32), rng.randint(1, 300)
    got = student.call("accumulation_steps", mbs * k, mbs)
    return type(got) is int and got == k and student.call("accumulation_steps", 64, 4) == 16


@check(points=0.5)
def steps_errors(student, rng):
    """accumulation_steps：gbs 不能被 mbs × dp 整除、或参数不是正整数时抛出 ValueError"""
    mbs, dp, k = rng.randint(2, 16), rng.choice([1, 4, 8]), rng.randint(1, 100)
    if student.call("accumulation_steps", mbs * dp * k, mbs, dp) != k:
        return False
    bad = mbs * dp * k + rng.randint(1, mbs * dp - 1)
    cases = [(bad, mbs, dp), (10, 4), (0, mbs, dp), (mbs * dp * k, 0, dp), (mbs * dp * k, mbs, 0), (-mbs, mbs, 1)]
    return all(raises_value_error(student, "accumulation_steps", *c) for c in cases)


@check(points=0.5)
def grad_even(student, rng):
    """accumulated_grad：micro-batch 大小相等时，结果等于全 batch 梯度"""
    for d in (3, rng.randint(1, 6)):
        mbs, k = rng.randint(2, 8), rng.randint(2, 6)
        X, y, w = _data(rng, mbs * k, d)
        if not _grad_ok(student, X, y, w, mbs):
            return False
    return True


@check(points=0.75)
def grad_uneven(student, rng):
    """accumulated_grad：最后一个 micro-batch 较小时，按样本数加权后仍等于全 batch 梯度"""
    X, y, w = _data(rng, 10, 3)
    if not _grad_ok(student, X, y, w, 4):
        return False
    for _ in range(2):
        mbs = rng.randint(3, 8)
        n = mbs * rng.randint(1, 5) + rng.randint(1, mbs - 1)
        X, y, w = _data(rng, n, rng.randint(1, 6))
        if not _grad_ok(student, X, y, w, mbs):
            return False
    return True


@check(points=0.25)
def grad_edge_sizes(student, rng):
    """accumulated_grad：mbs = 1（每个样本一块）和 mbs > n（只有一块）时都等于全 batch 梯度"""
    X, y, w = _data(rng, rng.randint(3, 12), 3)
    return _grad_ok(student, X, y, w, 1) and _grad_ok(student, X, y, w, len(y) + rng.randint(1, 5))


@check(points=0.25)
def grad_errors(student, rng):
    """accumulated_grad：mbs 不是正整数、y 或 w 的形状不对时抛出 ValueError"""
    n, d = rng.randint(4, 12), 3
    X, y, w = _data(rng, n, d)
    if not _grad_ok(student, X, y, w, 3):
        return False
    cases = [
        (ndarray(X), ndarray(y), ndarray(w), 0),
        (ndarray(X), ndarray(y[:-1]), ndarray(w), 2),
        (ndarray(X), ndarray(y), ndarray(w + [1.0]), 2),
    ]
    return all(raises_value_error(student, "accumulated_grad", *c) for c in cases)

"""Hidden tests for lesson 8 (上下文并行 CP 与 Ring Attention). Points add up to 4.

Sequence lengths, cp and arrays are drawn per submission from ``rng`` (lengths that cp or 2·cp does
not divide, cp larger than the sequence, cp = 1), with normal entries like the page's, so that
neither a function that only knows the page's examples nor one that recognises a hidden check by its
inputs earns a point. Expected values come
from the reference solution (``ref``), from a dense attention computed here, or from the closed
form n(n+1)/2 for the total causal work.
"""

import numpy as np

from grader.checks import check, close, ndarray, normal_matrix
from grader.kernel import plain_data

TOL = dict(rel=1e-9, abs_tol=1e-9)
SCHEMES = ("contiguous", "zigzag")


def _dense(q, k, v, causal):
    """Plain softmax attention, written independently of the lesson's code."""
    n, d = q.shape
    s = q @ k.T / np.sqrt(d)
    if causal:
        s = np.where(np.arange(len(k))[None, :] <= np.arange(n)[:, None], s, -np.inf)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ v


def _ring_case(rng, student, n, cp, scheme, causal):
    """One ring_attention call on drawn q, k, v, compared with dense attention."""
    d, dv = rng.randint(2, 8), rng.randint(1, 5)
    q, k, v = normal_matrix(rng, n, d, 2.0), normal_matrix(rng, n, d, 2.0), normal_matrix(rng, n, dv)
    got = student.call("ring_attention", ndarray(q), ndarray(k), ndarray(v), cp, scheme, causal)
    return close(got, _dense(q, k, v, causal).tolist(), **TOL)


@check(points=0.5)
def split_both_schemes(student, rng, ref):
    """split_positions：两种切分下每个 rank 持有的位置正确（含长度不能整除的情况）"""
    for scheme in SCHEMES:
        for whole in (True, False):  # a length that 2·cp divides, as real ones are, and any length
            cp = rng.choice([2, 3, 4, 6, 8])
            n = 2 * cp * rng.randint(2, 600 // (2 * cp)) if whole else rng.randint(2 * cp + 1, 600)
            got = student.call("split_positions", n, cp, scheme)
            if not close(got, ref.split_positions(n, cp, scheme)):
                return False
    return True


@check(points=0.25)
def split_edge_cases(student, rng, ref):
    """split_positions：cp = 1、序列比段数短（有的 rank 为空）以及空序列"""
    short_cp = rng.randint(3, 8)
    cases = [
        (rng.randint(1, 300), 1, rng.choice(SCHEMES)),
        (rng.randint(1, 2 * short_cp - 1), short_cp, "zigzag"),
        (rng.randint(1, short_cp - 1), short_cp, "contiguous"),
        (0, rng.randint(1, 8), rng.choice(SCHEMES)),
    ]
    for n, cp, scheme in cases:
        if not close(student.call("split_positions", n, cp, scheme), ref.split_positions(n, cp, scheme)):
            return False
    return True


@check(points=0.5)
def work_per_rank(student, rng, ref):
    """causal_work：两种切分下每个 rank 的可见（查询, 键）对数正确，合计为 n(n+1)/2"""
    for i, scheme in enumerate(SCHEMES):
        cp = rng.choice([2, 4, 8, 16])
        n = rng.choice([rng.randint(1000, 70000), 2 * cp * rng.randint(500, 4000)])
        if i == 0:
            n = rng.choice([4096, 8192, 16384, 32768, 65536, 2 * cp * rng.randint(500, 4000)])
        got = student.call("causal_work", n, cp, scheme)
        if not close(got, ref.causal_work(n, cp, scheme)) or sum(got) != n * (n + 1) // 2:
            return False
    return True


@check(points=0.25)
def work_edge_cases(student, rng, ref):
    """causal_work：cp = 1、cp 大于序列长度、空序列，以及课文中的例子"""
    big_cp = rng.randint(4, 16)
    cases = [
        (rng.randint(1, 5000), 1, rng.choice(SCHEMES)),
        (rng.randint(1, big_cp - 1), big_cp, rng.choice(SCHEMES)),
        (0, rng.randint(1, 8), rng.choice(SCHEMES)),
        (16, 4, "contiguous"),
    ]
    for n, cp, scheme in cases:
        if not close(student.call("causal_work", n, cp, scheme), ref.causal_work(n, cp, scheme)):
            return False
    return True


@check(points=0.5)
def online_single_update(student, rng, ref):
    """online_softmax_update：并入一块（新块的最大分数更大或更小）后 m、l、o 正确；还没见过可见键的行遇到整行被掩掉的块时保持 -inf、0、0，不出现 NaN"""
    for bump in (2.0, -2.0):
        nq, nk, dv = rng.randint(1, 6), rng.randint(1, 7), rng.randint(1, 4)
        m = np.array([rng.uniform(-1.0, 1.0) for _ in range(nq)])
        lsum = np.array([rng.uniform(1.0, 5.0) for _ in range(nq)])
        o = normal_matrix(rng, nq, dv, 3.0)
        s = normal_matrix(rng, nq, nk) + m[:, None] + bump
        v = normal_matrix(rng, nk, dv)
        got = student.call("online_softmax_update", ndarray(m), ndarray(lsum), ndarray(o), ndarray(s), ndarray(v))
        exp = [x.tolist() for x in ref.online_softmax_update(m, lsum, o, s, v)]
        if not close(got, exp, **TOL):
            return False
    # Fresh rows (m = -inf, l = 0, o = 0) meeting a block in which some rows are wholly masked: those
    # rows must come back as -inf, 0, 0 (plain data carries -inf as the string '-inf'), never NaN.
    nq, nk, dv = rng.randint(2, 6), rng.randint(1, 7), rng.randint(1, 4)
    m, lsum, o = np.full(nq, -np.inf), np.zeros(nq), np.zeros((nq, dv))
    s, v = normal_matrix(rng, nq, nk, 2.0), normal_matrix(rng, nk, dv)
    s[rng.sample(range(nq), rng.randint(1, nq - 1))] = -np.inf
    got = student.call("online_softmax_update", ndarray(m), ndarray(lsum), ndarray(o), ndarray(s), ndarray(v))
    return close(got, plain_data(ref.online_softmax_update(m, lsum, o, s, v)), **TOL)


@check(points=0.5)
def online_blocks_equal_full(student, rng):
    """online_softmax_update：把一行行分数分成几块依次并入后，o / l 等于完整 softmax 的加权输出"""
    nq, nk, dv = rng.randint(1, 5), rng.randint(4, 12), rng.randint(1, 4)
    s, v = normal_matrix(rng, nq, nk, 4.0), normal_matrix(rng, nk, dv)
    cuts = sorted(rng.sample(range(1, nk), rng.randint(1, min(3, nk - 1))))
    bounds = [0, *cuts, nk]
    # The first block is folded in here, so that no -inf has to cross into the kernel.
    first = s[:, : bounds[1]]
    m = first.max(axis=1)
    p = np.exp(first - m[:, None])
    lsum, o = p.sum(axis=1), p @ v[: bounds[1]]
    for a, b in zip(bounds[1:-1], bounds[2:]):
        got = student.call(
            "online_softmax_update", ndarray(m), ndarray(lsum), ndarray(o), ndarray(s[:, a:b]), ndarray(v[a:b])
        )
        if not (isinstance(got, list) and len(got) == 3):
            return False
        m, lsum, o = (np.array(x, dtype=np.float64) for x in got)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    want = (w / w.sum(axis=1, keepdims=True)) @ v
    return close((o / lsum[:, None]).tolist(), want.tolist(), **TOL)


@check(points=0.75)
def ring_causal_both_schemes(student, rng):
    """ring_attention：因果掩码下，两种切分的结果都等于完整注意力（含长度不能整除的情况）"""
    for scheme in SCHEMES:
        cp = rng.randint(2, 5)
        n = rng.randint(2 * cp + 1, 40)
        if not _ring_case(rng, student, n, cp, scheme, True):
            return False
    return True


@check(points=0.75)
def ring_noncausal_and_edges(student, rng):
    """ring_attention：不加掩码时、cp = 1 时、cp 大于序列长度（有的 rank 没有 token）时都等于完整注意力"""
    big_cp = rng.randint(4, 9)
    cases = [
        (rng.randint(5, 30), rng.randint(2, 5), rng.choice(SCHEMES), False),
        (rng.randint(1, 25), 1, rng.choice(SCHEMES), True),
        (rng.randint(1, big_cp - 1), big_cp, "contiguous", True),
        (rng.randint(1, 2 * big_cp - 1), big_cp, "zigzag", True),
    ]
    return all(_ring_case(rng, student, n, cp, scheme, causal) for n, cp, scheme, causal in cases)

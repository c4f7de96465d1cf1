"""Hidden tests for lesson 3 (分布式通信原语). Points add up to 4.

Every check draws inputs from ``rng`` at grading time, shaped like the page's examples (whole-number
arrays, round message sizes and link figures), so that neither a function that only knows the page's
examples nor one that recognises a hidden check by its inputs earns a point. Expected values are
computed by hand here (np.sum over ranks, np.array_split chunk sizes, the α–β formulas) or, for
whole structures, taken from the lesson's reference solution (``ref``) converted to plain data.
"""

import math

import numpy as np

from grader.checks import check, close, ndarray


def _plain(x):
    """Turn numpy values inside a result into the plain data the kernel returns."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _arrays(rng, p, n):
    """p arrays of n whole numbers, like the page's example (whose sums are easy to check by hand)."""
    scale = rng.choice([1, 10, 100])
    return [[float(scale * rng.randint(-99, 99)) for _ in range(n)] for _ in range(p)]


def _link(rng):
    """Message size in bytes and α, β of a real link: round figures like the page's 1 GB, 10 μs, 100 GB/s."""
    size = rng.choice([rng.randint(1, 1024) * 2**20, rng.randint(1, 64) * 10 ** rng.randint(6, 9)])
    alpha = rng.choice([1e-6, 2e-6, 3e-6, 5e-6, 1e-5, 2e-5, 5e-5])
    beta = rng.choice([1.25e10, 2.5e10, 5e10, 1e11, 2e11, 4e11, 4.5e11])
    return float(size), alpha, beta


def _ranks(rng):
    """A number of ranks as clusters have them: a power of two or a few nodes of 8."""
    return rng.choice([2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 24, 48, 96, 6, 12])


def _call_arrays(student, name, arrays):
    return student.call(name, [ndarray(a, "float64") for a in arrays])


def _sizes(n, p):
    return [len(c) for c in np.array_split(np.zeros(n), p)]


@check(points=0.5)
def rs_owner_and_sum(student, rng):
    """ring_reduce_scatter：随机 p（2~8），rank r 持有第 (r+1)%p 块，且该块等于各 rank 对应块之和，步数为 p-1"""
    p = rng.randint(2, 8)
    n = p * rng.randint(1, 4)
    arrays = _arrays(rng, p, n)
    got = _call_arrays(student, "ring_reduce_scatter", arrays)
    total = np.sum(np.array(arrays), axis=0)
    pieces = np.array_split(total, p)
    owned = [(r + 1) % p for r in range(p)]
    return (
        close(got["owned"], owned)
        and close(got["steps"], p - 1)
        and close(got["chunks"], [pieces[c].tolist() for c in owned], rel=1e-9)
    )


@check(points=0.5)
def rs_uneven_sent(student, rng, ref):
    """ring_reduce_scatter：长度不能被 p 整除时按 np.array_split 切块，每个 rank 的发送元素数正确"""
    p = rng.randint(3, 8)
    n = p * rng.randint(1, 3) + rng.randint(1, p - 1)
    arrays = _arrays(rng, p, n)
    got = _call_arrays(student, "ring_reduce_scatter", arrays)
    sizes = _sizes(n, p)
    # rank r 发出除自己最终持有的块 (r+1)%p 以外的所有块
    if not close(got["sent"], [n - sizes[(r + 1) % p] for r in range(p)]):
        return False
    return close(got, _plain(ref.ring_reduce_scatter([np.array(a) for a in arrays])))


@check(points=0.5)
def ag_concat_and_counts(student, rng, ref):
    """ring_all_gather：各 rank 按块号顺序拼接全部块（不求和），步数 p-1，发送元素数正确"""
    p = rng.randint(2, 8)
    lengths = [rng.randint(0, 4) for _ in range(p)]
    lengths[rng.randrange(p)] = rng.randint(1, 4)
    pieces = [[float(rng.randint(-9999, 9999)) for _ in range(k)] for k in lengths]  # pieces[c] 是第 c 块
    chunks = [pieces[(r + 1) % p] for r in range(p)]
    got = student.call("ring_all_gather", [ndarray(c, "float64") for c in chunks])
    full = [v for c in range(p) for v in pieces[c]]
    n = len(full)
    if not (close(got["arrays"], [full] * p) and close(got["steps"], p - 1)):
        return False
    if not close(got["sent"], [n - lengths[(r + 2) % p] for r in range(p)]):
        return False
    return close(got, _plain(ref.ring_all_gather([np.array(c, dtype=np.float64) for c in chunks])))


@check(points=0.75)
def ar_random_sums(student, rng):
    """ring_all_reduce：随机 p（2~8）与随机数组（含不能整除的长度），每个 rank 都得到 np.sum 的结果，步数 2(p-1)"""
    for _ in range(3):
        p = rng.randint(2, 8)
        n = rng.randint(p, 5 * p)
        arrays = _arrays(rng, p, n)
        got = _call_arrays(student, "ring_all_reduce", arrays)
        total = np.sum(np.array(arrays), axis=0).tolist()
        if not (close(got["arrays"], [total] * p, rel=1e-9, abs_tol=1e-9) and close(got["steps"], 2 * (p - 1))):
            return False
    return True


@check(points=0.25)
def ar_sent_even(student, rng):
    """ring_all_reduce：长度能被 p 整除时，每个 rank 恰好发送 2(p-1)/p × n 个元素"""
    p = rng.randint(2, 8)
    n = p * rng.randint(1, 6)
    got = _call_arrays(student, "ring_all_reduce", _arrays(rng, p, n))
    return close(got["sent"], [2 * (p - 1) * n // p] * p)


@check(points=0.25)
def ar_single_rank(student, rng, ref):
    """ring_all_reduce：p = 1 时结果就是输入本身，0 步，什么也不发送；p > 1 时照常求和"""
    arrays = _arrays(rng, 1, rng.randint(1, 9))
    got = _call_arrays(student, "ring_all_reduce", arrays)
    if not close(got, {"arrays": arrays, "steps": 0, "sent": [0]}):
        return False
    arrays = _arrays(rng, rng.randint(2, 8), rng.randint(1, 12))
    return close(
        _call_arrays(student, "ring_all_reduce", arrays),
        _plain(ref.ring_all_reduce([np.array(a) for a in arrays])),
        rel=1e-9,
        abs_tol=1e-9,
    )


@check(points=0.25)
def ar_short_arrays(student, rng, ref):
    """ring_all_reduce：数组长度小于 p（有空块，含长度 0）时仍然正确"""
    p = rng.randint(3, 8)
    for n in (rng.randint(1, p - 1), 0):
        arrays = _arrays(rng, p, n)
        got = _call_arrays(student, "ring_all_reduce", arrays)
        total = np.sum(np.array(arrays).reshape(p, n), axis=0).tolist()
        if not close(got["arrays"], [total] * p, rel=1e-9, abs_tol=1e-9):
            return False
        if not close(
            got, _plain(ref.ring_all_reduce([np.array(a, dtype=np.float64) for a in arrays])), rel=1e-9, abs_tol=1e-9
        ):
            return False
    return True


@check(points=0.5)
def time_ring(student, rng):
    """allreduce_time：环形算法 2(p-1)α + 2(p-1)/p·M/β（含课文中 1 GB、8 卡的例子）"""
    if not close(student.call("allreduce_time", 8, 1e9, 1e-5, 1e11, "ring"), 0.01764, rel=1e-9):
        return False
    for _ in range(3):
        p = _ranks(rng)
        M, a, b = _link(rng)
        want = 2 * (p - 1) * a + 2 * (p - 1) / p * M / b
        if not close(student.call("allreduce_time", p, M, a, b, "ring"), want, rel=1e-9):
            return False
    return True


@check(points=0.25)
def time_tree(student, rng):
    """allreduce_time：二项树 2·ceil(log2 p)·(α + M/β)，含 p 不是 2 的幂的情况"""
    if not close(student.call("allreduce_time", 8, 1e9, 1e-5, 1e11, "tree"), 0.06006, rel=1e-9):
        return False
    for p in (rng.choice([3, 5, 6, 7, 12, 24, 48, 96, 100, 1000]), rng.choice([2, 16, 64, 512])):
        M, a, b = _link(rng)
        want = 2 * math.ceil(math.log2(p)) * (a + M / b)
        if not close(student.call("allreduce_time", p, M, a, b, "tree"), want, rel=1e-9):
            return False
    return True


@check(points=0.25)
def time_single_rank_and_crossover(student, rng, ref):
    """allreduce_time：p = 1 时两种算法都是 0；小消息、大 p 时树形更快，大消息时环形更快"""
    for algo in ("ring", "tree"):
        if not close(student.call("allreduce_time", 1, _link(rng)[0], 1e-5, 1e11, algo), 0.0):
            return False
    p = rng.choice([256, 512, 1024])
    small = float(rng.randint(16, 1024) * 2**10)
    big = float(rng.randint(1, 4) * 10**9)
    times = {}
    for size in (small, big):
        for algo in ("ring", "tree"):
            times[size, algo] = student.call("allreduce_time", p, size, 1e-5, 1e11, algo)
            if not close(times[size, algo], ref.allreduce_time(p, size, 1e-5, 1e11, algo), rel=1e-9):
                return False
    return times[small, "tree"] < times[small, "ring"] and times[big, "ring"] < times[big, "tree"]

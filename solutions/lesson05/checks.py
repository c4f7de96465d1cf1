"""Hidden tests for lesson 5 (ZeRO 与 FSDP). Points add up to 4.

Every check draws inputs from ``rng`` at grading time, shaped like the page's examples (round or
real-looking parameter counts, GPU counts as clusters have them, round AdamW hyperparameters), so
that neither a function that only knows the page's examples nor one that recognises a hidden check
by its inputs earns a point.
Expected values are hand-computed (the paper's 7.5B / N = 64 example, the 2Ψ/3Ψ convention) or come
from an AdamW written here independently of the lesson's solution, so that a mistake in the
reference and the same mistake in a submission cannot agree with each other.
"""

import math

from grader.checks import check, close, ndarray, raises_value_error

STAGES = (0, 1, 2, 3)


def _memory(psi, n, stage):
    params = 2.0 * psi / (n if stage >= 3 else 1)
    grads = 2.0 * psi / (n if stage >= 2 else 1)
    optimizer = 12.0 * psi / (n if stage >= 1 else 1)
    return {"params": params, "grads": grads, "optimizer": optimizer, "total": params + grads + optimizer}


def _adamw(p, g, m, v, t, lr, b1, b2, eps, wd):
    """Grader-side AdamW on plain lists, element by element."""
    bc1, bc2 = 1 - b1**t, 1 - b2**t
    out_p, out_m, out_v = [], [], []
    for pj, gj, mj, vj in zip(p, g, m, v):
        mn = b1 * mj + (1 - b1) * gj
        vn = b2 * vj + (1 - b2) * gj * gj
        out_p.append(pj * (1 - lr * wd) - lr * (mn / bc1) / (math.sqrt(vn / bc2) + eps))
        out_m.append(mn)
        out_v.append(vn)
    return {"params": out_p, "m": out_m, "v": out_v}


def _hyper(rng):
    """AdamW hyperparameters as training recipes write them: round figures, like the page's."""
    return {
        "step": rng.randint(1, 2000),
        "lr": rng.choice([1e-4, 2e-4, 3e-4, 6e-4, 1e-3, 3e-3, 1e-2]),
        "beta1": rng.choice([0.8, 0.85, 0.9, 0.95]),
        "beta2": rng.choice([0.95, 0.98, 0.99, 0.995, 0.999, 0.9999]),
        "eps": rng.choice([1e-8, 1e-6, 1e-5]),
        "weight_decay": rng.choice([0.0, 0.01, 0.05, 0.1]),
    }


def _psi(rng):
    """A parameter count: a round size like the paper's 7.5B, or an exact count of a real-looking model."""
    if rng.random() < 0.5:
        return rng.choice([0.35, 1.3, 1.5, 2.7, 6.7, 7.5, 13.0, 30.0, 65.0, 70.0, 175.0]) * 1e9
    h = 256 * rng.randint(4, 48)
    return float(rng.choice([12, 24, 32, 40, 48, 80]) * 12 * h * h + rng.choice([32000, 50257, 128256]) * h)


def _gpus(rng):
    """A data-parallel degree as clusters have them: mostly powers of two, sometimes a few nodes of 8."""
    return rng.choice([2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 24, 48, 96, 384])


def _state(rng, length):
    p = [rng.gauss(0, 1) for _ in range(length)]
    g = [rng.gauss(0, 0.05) for _ in range(length)]
    m = [rng.gauss(0, 0.01) for _ in range(length)]
    v = [rng.uniform(0, 1e-3) for _ in range(length)]
    return p, g, m, v


def _arrays(*lists):
    return [ndarray(x, "float64") for x in lists]


def _h(h):
    return [h["step"], h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"]]


def _sizes(length, n):
    q, r = divmod(length, n)
    return [q + 1] * r + [q] * (n - r)


@check(points=0.5)
def memory_paper_example(student, rng):
    """zero_memory_per_gpu：论文中 7.5B 参数、N = 64 的例子（各阶段四项字节数），以及另一个模型与卡数"""
    psi, n = 7.5e9, 64
    totals = [1.2e11, 3.140625e10, 1.6640625e10, 1.875e9]
    for stage, total in zip(STAGES, totals):
        got = student.call("zero_memory_per_gpu", psi, n, stage)
        if not close(got, _memory(psi, n, stage)) or not close(got["total"], total):
            return False
    psi, n = _psi(rng), rng.choice([8, 16, 32, 128, 256, 512, 1024])
    return all(close(student.call("zero_memory_per_gpu", psi, n, s), _memory(psi, n, s)) for s in STAGES)


@check(points=0.5)
def memory_random(student, rng):
    """zero_memory_per_gpu：随机的 Ψ 与 N，各阶段的参数、梯度、优化器状态与合计；N = 1 时各阶段相同"""
    for i in range(4):
        psi = _psi(rng)
        n = rng.choice([8, 64, 512]) if i == 0 else _gpus(rng)
        for stage in STAGES:
            if not close(student.call("zero_memory_per_gpu", psi, n, stage), _memory(psi, n, stage)):
                return False
    psi = _psi(rng)
    return all(close(student.call("zero_memory_per_gpu", psi, 1, s), _memory(psi, 1, 0)) for s in STAGES)


@check(points=0.25)
def memory_validation(student, rng):
    """zero_memory_per_gpu：stage 不在 0–3 或 n < 1 时抛出 ValueError，合法输入照常计算"""
    psi, n = _psi(rng), rng.choice([8, 16, 32, 128, 256, 512, 1024])
    if not close(student.call("zero_memory_per_gpu", psi, n, 2), _memory(psi, n, 2)):
        return False
    return (
        raises_value_error(student, "zero_memory_per_gpu", psi, 8, 4)
        and raises_value_error(student, "zero_memory_per_gpu", psi, 8, -1)
        and raises_value_error(student, "zero_memory_per_gpu", psi, 0, 1)
    )


@check(points=0.5)
def comm_convention(student, rng):
    """zero_comm_elements：忽略 (N-1)/N 时 DP、ZeRO-1、ZeRO-2 为 2Ψ，ZeRO-3 为 3Ψ（1.5 倍）"""
    for psi in (rng.choice([1.3, 7.5, 13.0, 70.0]) * 1e9, _psi(rng)):
        for stage in STAGES:
            ag = 2 * psi if stage == 3 else psi
            if not close(
                student.call("zero_comm_elements", psi, stage),
                {"reduce_scatter": psi, "all_gather": ag, "total": psi + ag},
            ):
                return False
    return True


@check(points=0.25)
def comm_with_n(student, rng):
    """zero_comm_elements：给出 n 时乘以 (n-1)/n，n = 1 时为 0；非法 stage 或 n 抛出 ValueError"""
    for psi in (rng.choice([1.3, 7.5, 13.0, 70.0]) * 1e9, _psi(rng)):
        n = _gpus(rng)
        f = (n - 1) / n
        for stage in STAGES:
            ag = (2 if stage == 3 else 1) * psi * f
            if not close(
                student.call("zero_comm_elements", psi, stage, n),
                {"reduce_scatter": psi * f, "all_gather": ag, "total": psi * f + ag},
            ):
                return False
    if not close(
        student.call("zero_comm_elements", psi, 3, 1), {"reduce_scatter": 0.0, "all_gather": 0.0, "total": 0.0}
    ):
        return False
    return raises_value_error(student, "zero_comm_elements", psi, 5) and raises_value_error(
        student, "zero_comm_elements", psi, 1, 0
    )


@check(points=0.75)
def adamw_random(student, rng):
    """adamw_step：随机参数、梯度、矩估计与超参数，结果与标准 AdamW 一致"""
    for _ in range(3):
        length = rng.randint(1, 60)
        p, g, m, v = _state(rng, length)
        h = _hyper(rng)
        got = student.call("adamw_step", *_arrays(p, g, m, v), *_h(h))
        if not close(
            got,
            _adamw(p, g, m, v, h["step"], h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"]),
            rel=1e-9,
            abs_tol=1e-15,
        ):
            return False
    return True


@check(points=0.25)
def adamw_edge_cases(student, rng):
    """adamw_step：第 1 步的偏差修正、零梯度只做权重衰减、空数组，以及 step < 1 抛出 ValueError"""
    length = rng.randint(3, 12)
    p = [rng.gauss(0, 1) for _ in range(length)]
    g = [rng.choice([-1, 1]) * rng.uniform(0.01, 1.0) for _ in range(length)]
    zeros = [0.0] * length
    lr, wd = 0.01, 0.1
    got = student.call("adamw_step", *_arrays(p, g, zeros, zeros), 1, lr, 0.9, 0.999, 1e-8, wd)
    if not close(got, _adamw(p, g, zeros, zeros, 1, lr, 0.9, 0.999, 1e-8, wd), rel=1e-9, abs_tol=1e-15):
        return False
    # first step: the update is about lr * sign(g), on top of the decoupled decay
    if not all(
        abs(new - (pj * (1 - lr * wd) - lr * math.copysign(1.0, gj))) < 1e-7 for new, pj, gj in zip(got["params"], p, g)
    ):
        return False
    got = student.call("adamw_step", *_arrays(p, zeros, zeros, zeros), rng.randint(1, 50), lr, 0.9, 0.999, 1e-8, wd)
    if not close(got, {"params": [pj * (1 - lr * wd) for pj in p], "m": zeros, "v": zeros}, rel=1e-12):
        return False
    if not close(
        student.call("adamw_step", *_arrays([], [], [], []), 3, lr, 0.9, 0.999, 1e-8, wd),
        {"params": [], "m": [], "v": []},
    ):
        return False
    return raises_value_error(student, "adamw_step", *_arrays(p, g, zeros, zeros), 0, lr, 0.9, 0.999, 1e-8, wd)


@check(points=0.5)
def sharded_equals_full(student, rng):
    """sharded_adamw_step：分片数不整除长度时，分片更新与全量 AdamW 的结果相同，分片长度正确"""
    for _ in range(3):
        n_shards = rng.randint(2, 16)
        length = n_shards * rng.randint(1, 12) + rng.randint(1, n_shards - 1)
        p, g, m, v = _state(rng, length)
        h = _hyper(rng)
        got = student.call("sharded_adamw_step", *_arrays(p, g, m, v), n_shards, *_h(h))
        want = _adamw(p, g, m, v, h["step"], h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"])
        want["shard_sizes"] = _sizes(length, n_shards)
        if not close(got, want, rel=1e-9, abs_tol=1e-15):
            return False
    return True


@check(points=0.5)
def sharded_edge_cases(student, rng):
    """sharded_adamw_step：1 个分片、分片数等于或大于长度（有空分片）、空数组，以及 n_shards < 1 抛出 ValueError"""
    length = rng.randint(3, 20)
    p, g, m, v = _state(rng, length)
    h = _hyper(rng)
    want = _adamw(p, g, m, v, h["step"], h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"])
    for n_shards in (1, length, length + rng.randint(1, 5)):
        got = student.call("sharded_adamw_step", *_arrays(p, g, m, v), n_shards, *_h(h))
        if not close(got, dict(want, shard_sizes=_sizes(length, n_shards)), rel=1e-9, abs_tol=1e-15):
            return False
    got = student.call("sharded_adamw_step", *_arrays([], [], [], []), 3, *_h(h))
    if not close(got, {"params": [], "m": [], "v": [], "shard_sizes": [0, 0, 0]}):
        return False
    return raises_value_error(student, "sharded_adamw_step", *_arrays(p, g, m, v), 0, *_h(h))

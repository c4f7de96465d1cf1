"""Hidden tests for lesson 9 (流水线并行 PP). Points add up to 4.

Pipeline sizes, micro-batch counts, chunk counts and op times are drawn per submission from
``rng``, as round as the page's (powers of two and other depths, op times like 1.0 and 2.0), so
that neither a function that only knows the page's examples nor one that recognises a hidden check
by its inputs earns a point. Expected values come from the reference solution (``ref``)
or from the closed forms the lesson derives: (m + p - 1)(t_f + t_b) for AFAB and 1F1B,
(p - 1)(t_f + t_b) / v of bubble for the interleaved schedule, min(p - s, m) in flight for 1F1B.
"""

from typing import Any

from grader.checks import check, close
from grader.kernel import StudentCallError

SCHEDULES = ("afab", "1f1b")


def _times(rng: Any) -> tuple[float, float]:
    """A forward time in ms, as round as the page's 1.0, and a backward time 1 to 3 times as long (not always 2)."""
    t_f = rng.choice([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0])
    return t_f, round(t_f * rng.choice([1.0, 1.2, 1.5, 2.0, 2.0, 2.5, 3.0]), 1)


def _stages(rng: Any, lo: int, hi: int, pow2: bool = False) -> int:
    """A pipeline depth in [lo, hi]: a power of two as real runs use (always when ``pow2``), or any size."""
    twos = [p for p in (2, 4, 8, 16, 32) if lo <= p <= hi]
    return rng.choice(twos) if pow2 or rng.random() < 0.5 else rng.randint(lo, hi)


def _raises_value_error(student: Any, *args: Any) -> bool:
    """True if ``stage_order`` raises ValueError; a blank or any other failure is re-raised."""
    try:
        student.call("stage_order", *args)
    except StudentCallError as exc:
        if exc.kind == "error":
            return exc.detail == "ValueError"
        raise
    return False


@check(points=0.5)
def bubble_formula(student, rng):
    """bubble_fraction：气泡比例公式 (p − 1) / (v·m)，含只有一个 stage 的情况"""
    cases = [(1, rng.randint(1, 64), 1)]
    cases += [(_stages(rng, 2, 32, i == 0), rng.randint(1, 256), rng.choice([1, 1, 2, 3, 4, 6])) for i in range(4)]
    return all(close(student.call("bubble_fraction", p, m, v), (p - 1) / (v * m)) for p, m, v in cases)


@check(points=0.25)
def afab_order(student, rng, ref):
    """stage_order：AFAB 下每个 stage 先做全部前向、再做全部反向"""
    for pow2 in (True, False):
        p = _stages(rng, 2, 12, pow2)
        m = rng.randint(1, 48)
        stage = rng.randrange(p)
        got = student.call("stage_order", "afab", p, m, stage)
        if not (close(got, ref.stage_order("afab", p, m, stage)) and len(got) == 2 * m):
            return False
    return True


@check(points=0.75)
def one_f_one_b_order(student, rng, ref):
    """stage_order：1F1B 的热身、一前一后与收尾，含 micro-batch 少于 stage 的情况"""
    p_long, p_short = _stages(rng, 4, 8, True), _stages(rng, 4, 16)
    # first m >= p, then fewer micro-batches than warm-up slots on stage 0 (m < p - 1)
    for p, m in ((p_long, rng.randint(p_long, 6 * p_long)), (p_short, rng.randint(1, p_short - 2))):
        for stage in sorted({0, rng.randrange(p), p - 1}):
            if not close(student.call("stage_order", "1f1b", p, m, stage), ref.stage_order("1f1b", p, m, stage)):
                return False
    return True


@check(points=0.5)
def interleaved_order(student, rng, ref):
    """stage_order：交错调度的块顺序（反向按相反的块顺序），m 不是 p 的整数倍或调度名未知时抛出 ValueError"""
    p = _stages(rng, 2, 8, True)
    v = rng.randint(2, 4)
    m = p * rng.randint(1, 5)
    for stage in sorted({0, rng.randrange(p), p - 1}):
        got = student.call("stage_order", "interleaved", p, m, stage, v)
        if not close(got, ref.stage_order("interleaved", p, m, stage, v)):
            return False
    bad_m = p * rng.randint(1, 5) + rng.randint(1, p - 1)
    return _raises_value_error(student, "interleaved", p, bad_m, 0, v) and _raises_value_error(
        student, rng.choice(["gpipe", "zb-h1", "dualpipe"]), p, m, 0
    )


@check(points=0.75)
def simulate_total_and_bubble(student, rng, ref):
    """simulate_pipeline：AFAB 与 1F1B 的总时间都是 (m + p − 1)(t_f + t_b)，气泡比例为 (p − 1)/m"""
    cases = [(4, 8, 1.0, 2.0)]  # the page's example, plus drawn ones
    for _ in range(2):
        t_f, t_b = _times(rng)
        cases.append((rng.randint(2, 16), rng.randint(1, 64), t_f, t_b))
    for p, m, t_f, t_b in cases:
        for schedule in SCHEDULES:
            got = student.call("simulate_pipeline", p, m, t_f, t_b, schedule)
            if not close(got, ref.simulate_pipeline(p, m, t_f, t_b, schedule), rel=1e-7):
                return False
            if not close(got["total_time"], (m + p - 1) * (t_f + t_b), rel=1e-7):
                return False
            if not close(got["bubble_fraction"], (p - 1) / m, rel=1e-7, abs_tol=1e-9):
                return False
    return True


@check(points=0.5)
def simulate_in_flight(student, rng):
    """simulate_pipeline：在途激活峰值，AFAB 每个 stage 为 m，1F1B 第 s 个 stage 为 min(p − s, m)"""
    t_f, t_b = _times(rng)
    for p, m in ((rng.randint(3, 12), rng.randint(13, 40)), (rng.randint(5, 12), rng.randint(1, 4))):
        afab = student.call("simulate_pipeline", p, m, t_f, t_b, "afab")
        one = student.call("simulate_pipeline", p, m, t_f, t_b, "1f1b")
        if not close(afab["peak_in_flight"], [m] * p):
            return False
        if not close(one["peak_in_flight"], [min(p - s, m) for s in range(p)]):
            return False
    return True


@check(points=0.5)
def simulate_interleaved(student, rng, ref):
    """simulate_pipeline：交错调度的气泡比例为 (p − 1)/(v·m)，总时间与在途峰值正确"""
    for _ in range(2):
        p, v = rng.randint(2, 8), rng.randint(2, 4)
        m = p * rng.randint(1, 6)
        t_f, t_b = _times(rng)
        got = student.call("simulate_pipeline", p, m, t_f, t_b, "interleaved", v)
        if not close(got, ref.simulate_pipeline(p, m, t_f, t_b, "interleaved", v), rel=1e-7):
            return False
        if not close(got["bubble_fraction"], (p - 1) / (v * m), rel=1e-7, abs_tol=1e-9):
            return False
    return True


@check(points=0.25)
def simulate_degenerate(student, rng, ref):
    """simulate_pipeline：只有一个 stage 时没有气泡，只有一个 micro-batch 时气泡比例为 p − 1"""
    t_f, t_b = _times(rng)
    m = rng.randint(2, 40)
    for schedule in SCHEDULES:
        got = student.call("simulate_pipeline", 1, m, t_f, t_b, schedule)
        if not close(got, ref.simulate_pipeline(1, m, t_f, t_b, schedule), rel=1e-7, abs_tol=1e-9):
            return False
        if not close(got["bubble_fraction"], 0.0, abs_tol=1e-9):
            return False
    p = rng.randint(2, 16)
    for schedule in SCHEDULES:
        got = student.call("simulate_pipeline", p, 1, t_f, t_b, schedule)
        if not close(got, ref.simulate_pipeline(p, 1, t_f, t_b, schedule), rel=1e-7):
            return False
        if not close(got["bubble_fraction"], float(p - 1), rel=1e-7):
            return False
    return True

"""Hidden tests for lesson 12 (深入 GPU). Points add up to 4.

Sizes, hardware figures and values are drawn per submission from ``rng`` within realistic ranges
(spec-sheet accelerators like the page's H100, SRAM sizes in KiB, short lists of values as a student
would type them, and longer ones), so that neither a function that only knows the page's examples
nor one that recognises a hidden check by its inputs earns a point. Expected values come from
formulas written out here (FLOPs, bytes, roofline) or from the reference solution (``ref``), whose rounding was checked against numpy's
float16 cast, a float32 bit-level BF16 rounding and an exhaustive table of E4M3/E5M2 values.
Every check that expects a ValueError first makes a valid call, so an untouched notebook (whose
blanks are reached before any result) cannot pass it.
"""

import numpy as np

from grader.checks import check, close, ndarray, raises_value_error
from grader.kernel import plain_data

FORMATS = ("bf16", "fp16", "e5m2", "e4m3")
MAX_FINITE = {"bf16": (2 - 2.0**-7) * 2.0**127, "fp16": 65504.0, "e5m2": 57344.0, "e4m3": 448.0}
MANTISSA = {"bf16": 7, "fp16": 10, "e5m2": 2, "e4m3": 3}


def _rounded(student, ref, values, fmt):
    """The student's and the reference rounding of ``values``, both as plain data (inf as 'inf')."""
    got = student.call("round_to_format", ndarray(list(values), "float64"), fmt)
    want = plain_data(ref.round_to_format(np.array(values, dtype=np.float64), fmt))
    return got, want


def _hardware(rng):
    """An accelerator from a spec sheet (dense peak FLOP/s, HBM bytes/s), like the page's H100, or a made-up one."""
    if rng.random() < 0.5:
        return rng.choice(
            [
                (125e12, 0.9e12),
                (312e12, 1.555e12),
                (312e12, 2.039e12),
                (989e12, 3.35e12),
                (1979e12, 3.35e12),
                (1307e12, 5.3e12),
                (2250e12, 8e12),
                (990e12, 4.8e12),
            ]
        )
    return rng.randint(100, 2000) * 1e12, rng.randint(8, 80) * 1e11


def _same_rounding(student, ref, values, fmt, rng):
    """The student rounds ``values`` like the reference, and a handful of them typed as a short list too."""
    short = rng.sample(values, min(4, len(values)))
    for batch in (values, short):
        got, want = _rounded(student, ref, batch, fmt)
        if not close(got, want, rel=0, abs_tol=0):
            return False
    return True


def _log_uniform(rng, lo_exp, hi_exp):
    """A float whose magnitude is spread evenly over the decades [10**lo_exp, 10**hi_exp)."""
    return rng.choice((-1.0, 1.0)) * 10.0 ** rng.uniform(lo_exp, hi_exp)


@check(points=0.5)
def matmul_random(student, rng):
    """matmul_cost：FLOPs、搬运字节数与算术强度（含课文中的方阵示例）"""
    cases = [(4096, 4096, 4096, 2)]
    cases.append((64 * rng.randint(1, 256), 64 * rng.randint(1, 1024), 64 * rng.randint(1, 256), rng.choice([1, 2, 4])))
    for _ in range(3):
        cases.append((rng.randint(1, 16384), rng.randint(1, 65536), rng.randint(64, 16384), rng.choice([1, 2, 4])))
    for m, n, k, s in cases:
        flops, nbytes = 2 * m * n * k, (m * k + k * n + m * n) * s
        want = {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}
        if not close(student.call("matmul_cost", m, n, k, s), want):
            return False
    return True


@check(points=0.25)
def matmul_degenerate(student, rng):
    """matmul_cost：某个维度为 0 时 FLOPs 为 0、算术强度为 0.0；一个维度为 1 时仍按公式计算"""
    a, b, s = rng.randint(16, 8192), rng.randint(16, 8192), rng.choice([1, 2, 4])
    cases = [(0, a, b, s), (a, b, 0, s), (0, 0, b, s), (1, a, b, s), (64 * rng.randint(1, 128), a, b, s)]
    rng.shuffle(cases)
    for m, n, k, s in cases:
        flops, nbytes = 2 * m * n * k, (m * k + k * n + m * n) * s
        want = {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes if flops else 0.0}
        if not close(student.call("matmul_cost", m, n, k, s), want):
            return False
    return True


@check(points=0.5)
def roofline_random(student, rng):
    """roofline：屋脊点、可达吞吐、受限类型与耗时（访存受限与计算受限各有）"""
    for want_bound in rng.sample(["memory", "compute", "memory", "compute"], 4):
        peak, bw = _hardware(rng)
        ridge = peak / bw
        ai = ridge * (rng.uniform(0.02, 0.9) if want_bound == "memory" else rng.uniform(1.1, 20.0))
        nbytes = float(rng.randint(10**5, 10**10))
        flops = ai * nbytes
        want = {
            "intensity": flops / nbytes,
            "ridge": ridge,
            "attainable": min(peak, flops / nbytes * bw),
            "bound": want_bound,
            "time_s": max(flops / peak, nbytes / bw),
        }
        if not close(student.call("roofline", flops, nbytes, peak, bw), want, rel=1e-9):
            return False
    return True


@check(points=0.25)
def roofline_boundaries(student, rng):
    """roofline：算术强度恰好等于屋脊点时算作计算受限；运算量为 0 时可达吞吐为 0、访存受限"""
    bw = rng.randint(1, 8) * 10**12
    ridge = rng.randint(40, 600)
    peak = ridge * bw  # exact integers, so intensity == ridge holds exactly in floating point
    nbytes = rng.randint(10**5, 10**9)
    at = student.call("roofline", float(ridge * nbytes), float(nbytes), float(peak), float(bw))
    if not (isinstance(at, dict) and at.get("bound") == "compute"):
        return False
    if not close(at.get("attainable"), float(peak)) or not close(at.get("time_s"), nbytes / bw):
        return False
    zero = student.call("roofline", 0.0, float(nbytes), float(peak), float(bw))
    want = {"intensity": 0.0, "ridge": float(ridge), "attainable": 0.0, "bound": "memory", "time_s": nbytes / bw}
    return close(zero, want)


@check(points=0.5)
def attention_random(student, rng, ref):
    """attention_io：块行数、块数与两种实现的 HBM 字节数（含课文中的示例，序列长度不一定整除块行数）"""
    cases = [(4096, 64, 65536, 2)]
    for i in range(4):
        d = rng.choice([32, 64, 80, 96, 128, 256])
        sram = 1024 * rng.randint(d // 256 + 1, 156) if i == 0 else rng.randint(4 * d, 160_000)
        cases.append(
            (rng.choice([1024, 2048, 4096, 8192, 16384, 32768, rng.randint(1, 65536)]), d, sram, rng.choice([1, 2, 4]))
        )
    for n, d, sram, s in cases:
        block = sram // (4 * d)
        blocks = -(-n // block)
        want = {
            "block_rows": block,
            "num_blocks": blocks,
            "standard_bytes": (4 * n * d + 4 * n * n) * s,
            "tiled_bytes": (2 * n * d + 2 * n * d * blocks) * s,
        }
        if not close(student.call("attention_io", n, d, sram, s), want):
            return False
    return True


@check(points=0.5)
def attention_edges(student, rng):
    """attention_io：序列长度为 0、整段序列放得进一块、SRAM 连一行都放不下时抛出 ValueError"""
    d = rng.choice([64, 96, 128])
    s = rng.choice([1, 2, 4])
    sram = 1024 * rng.randint(d // 128 + 1, 195)
    block = sram // (4 * d)
    empty = {"block_rows": block, "num_blocks": 0, "standard_bytes": 0, "tiled_bytes": 0}
    if not close(student.call("attention_io", 0, d, sram, s), empty):
        return False
    n = rng.randint(1, block)  # the whole sequence fits in one block: K and V are read once
    one = {
        "block_rows": block,
        "num_blocks": 1,
        "standard_bytes": (4 * n * d + 4 * n * n) * s,
        "tiled_bytes": 4 * n * d * s,
    }
    if not close(student.call("attention_io", n, d, sram, s), one):
        return False
    too_small = rng.randint(0, 4 * d - 1)
    return raises_value_error(student, "attention_io", rng.randint(1, 8192), d, too_small, s)


@check(points=0.5)
def round_ties_and_signs(student, rng, ref):
    """round_to_format：BF16 与 FP16 的就近舍入、平局取偶，负数与各个数量级"""
    for fmt in ("bf16", "fp16"):
        m_bits = MANTISSA[fmt]
        values = []
        for _ in range(12):
            e = rng.randint(-12, 12)
            k = rng.randint(2**m_bits, 2 ** (m_bits + 1) - 2)
            sign = rng.choice((-1.0, 1.0))
            values.append(sign * (k + 0.5) * 2.0 ** (e - m_bits))  # exactly halfway: ties go to even k
        values += [_log_uniform(rng, -4, 4) for _ in range(20)]
        rng.shuffle(values)
        if not _same_rounding(student, ref, values, fmt, rng):
            return False
    return True


@check(points=0.5)
def round_small_values(student, rng, ref):
    """round_to_format：E4M3、E5M2 与 FP16 的次正规数与下溢为 0（含课文中的 E4M3 示例）"""
    cases = {"e4m3": ([300.0, 500.0, 0.01, 0.0009], (-4, 0)), "e5m2": ([], (-7, -3)), "fp16": ([], (-9, -4))}
    for fmt, (fixed, (lo, hi)) in cases.items():
        values = fixed + [_log_uniform(rng, lo, hi) for _ in range(25)] + [0.0]
        rng.shuffle(values)
        if not _same_rounding(student, ref, values, fmt, rng):
            return False
    return True


@check(points=0.25)
def round_overflow(student, rng, ref):
    """round_to_format：舍入后超过最大有限值时 E4M3 饱和、其他格式溢出为 inf，恰好等于最大值时不变"""
    for fmt in rng.sample(list(FORMATS), len(FORMATS)):
        top = MAX_FINITE[fmt]
        values = [top, -top]
        values += [rng.choice((-1.0, 1.0)) * top * rng.uniform(1.07, 40.0) for _ in range(4)]
        values += [rng.choice((-1.0, 1.0)) * top * rng.uniform(0.01, 0.9) for _ in range(6)]
        rng.shuffle(values)
        if not _same_rounding(student, ref, values, fmt, rng):
            return False
    return True


@check(points=0.25)
def round_empty_and_single(student, rng, ref):
    """round_to_format：空数组返回空列表，单个元素也按规则舍入"""
    fmt = rng.choice(FORMATS)
    if not close(student.call("round_to_format", ndarray([], "float64"), fmt), []):
        return False
    got, want = _rounded(student, ref, [_log_uniform(rng, -2, 2)], fmt)
    return close(got, want, rel=0, abs_tol=0)

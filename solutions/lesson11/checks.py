"""Hidden tests for lesson 11 (5D 并行与配置搜索). Points add up to 4.

Models, hardware, GPU counts and batches are drawn per submission from ``rng`` in realistic
ranges, so memorised outputs fail. Expected values come from the reference solution (``ref``);
the search is also compared with a brute force written here, which enumerates every
(dp, tp, pp, cp, ep, zero) independently of the student's and the reference's loop.
"""

import itertools
import random
from typing import Any

from grader.checks import check, close

Model = dict[str, Any]
Config = dict[str, int]

TOL = dict(rel=1e-9, abs_tol=1e-6)


def _billions(rng: random.Random, lo: int, hi: int, whole: bool | None = None) -> float:
    """A parameter count between lo and hi hundred million: whole billions like the page's 70e9, or not."""
    if whole is None:
        whole = rng.random() < 0.5
    if whole:
        return float(rng.randint(max(1, lo // 10), max(1, hi // 10))) * 1e9
    return float(rng.randint(lo, hi)) * 1e8


def _model(rng: random.Random, moe: bool, whole: bool | None = None) -> Model:
    """A transformer drawn from realistic sizes; a MoE when ``moe`` is true."""
    model: Model = {
        "layers": rng.choice([24, 28, 32, 40, 48, 60, 64, 80, 96]),
        "hidden": rng.choice([2048, 3072, 4096, 5120, 6144, 8192]),
        "seq": rng.choice([2048, 4096, 8192]),
        "dense_params": _billions(rng, 5, 400, whole),
        "expert_params": 0.0,
        "n_experts": 0,
        "top_k": 0,
    }
    if moe:
        model.update(
            expert_params=_billions(rng, 40, 1200),
            n_experts=rng.choice([8, 16, 32, 64, 128]),
            top_k=rng.choice([1, 2, 4, 8]),
        )
    return model


def _hw(rng: random.Random) -> dict[str, float | int]:
    """Per-GPU figures of a plausible cluster; memory in the range that makes choices matter."""
    return {
        "flops": rng.uniform(150e12, 900e12),
        "bw_intra": rng.uniform(150e9, 900e9),
        "bw_inter": rng.uniform(10e9, 100e9),
        "gpus_per_node": rng.choice([4, 8]),
        "mem_bytes": rng.uniform(24e9, 96e9),
    }


def _config(rng: random.Random, model: Model) -> Config:
    """A valid configuration of ``model`` (ep divides dp and the expert count)."""
    pp = rng.choice([d for d in (1, 2, 4, 8) if model["layers"] % d == 0])
    ep_choices = [1] if not model["n_experts"] else [e for e in (1, 2, 4, 8) if model["n_experts"] % e == 0]
    ep = rng.choice(ep_choices)
    return {
        "dp": ep * rng.choice([1, 2, 4, 8]),
        "tp": rng.choice([1, 2, 4, 8]),
        "pp": pp,
        "cp": rng.choice([1, 1, 2, 4]),
        "ep": ep,
        "zero": rng.randint(0, 3),
        "mbs": rng.choice([1, 2, 4]),
        "grad_acc": rng.choice([1, 2, 3, 4, 8, 16, 32]),
    }


def _brute_force(ref: Any, model: Model, hw: dict[str, Any], n_gpus: int, gbs: int, mbs: int) -> Any:
    """Every configuration the docstring allows, scored with the reference's memory and time."""
    best, best_key = None, None
    sizes = range(1, n_gpus + 1)
    for tp, pp, cp in itertools.product(sizes, sizes, sizes):
        if n_gpus % (tp * pp * cp) or hw["gpus_per_node"] % tp or model["layers"] % pp or model["seq"] % cp:
            continue
        dp = n_gpus // (tp * pp * cp)
        if gbs % (dp * mbs):
            continue
        for ep, zero in itertools.product(range(1, dp + 1), range(4)):
            if dp % ep or max(model["n_experts"], 1) % ep:
                continue
            grad_acc = gbs // (dp * mbs)
            cfg = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "zero": zero, "mbs": mbs, "grad_acc": grad_acc}
            mem = ref.config_memory(model, cfg)["total"]
            if mem > hw["mem_bytes"]:
                continue
            t = ref.step_time(model, hw, cfg)["total"]
            key = (round(t, 9), round(mem), tp, pp, cp, ep, zero)
            if best_key is None or key < best_key:
                best, best_key = dict(cfg, memory_bytes=mem, time_s=t), key
    return best


def _same_config(got: Any, exp: Any) -> bool:
    """Integers exactly, memory and time within a float tolerance; None only matches None."""
    if exp is None or got is None:
        return got is None and exp is None
    ints = ("dp", "tp", "pp", "cp", "ep", "zero", "mbs", "grad_acc")
    if not isinstance(got, dict) or set(got) != set(exp):
        return False
    return close([got[k] for k in ints], [exp[k] for k in ints]) and close(
        [got["memory_bytes"], got["time_s"]], [exp["memory_bytes"], exp["time_s"]], rel=1e-9
    )


@check(points=0.25)
def divisors_values(student, rng):
    """divisors：正整数的全部因数按升序排列（含 1 和素数）"""
    gpus = rng.choice([8, 16, 24, 32, 48, 96, 128, 256, 384, 512, 1024])  # the page shows 64 and 80
    layers = rng.choice([24, 28, 32, 40, 48, 60, 96, 126])
    for n in [1, rng.choice([97, 127, 251, 509]), gpus, layers, rng.randint(2, 4096)]:
        if not close(student.call("divisors", n), [d for d in range(1, n + 1) if n % d == 0]):
            return False
    return True


@check(points=0.5)
def memory_dense(student, rng, ref):
    """config_memory：稠密模型在各 ZeRO 阶段下的参数、梯度、优化器状态与激活"""
    for i in range(4):
        model = _model(rng, moe=False, whole=True if i == 0 else None)
        cfg = _config(rng, model)
        if not close(student.call("config_memory", model, cfg), ref.config_memory(model, cfg), **TOL):
            return False
    return True


@check(points=0.75)
def memory_moe(student, rng, ref):
    """config_memory：MoE 模型中专家参数按 ep 切分，ZeRO 对专家部分按 dp/ep 切分"""
    for zero in (0, 1, 2, 3):
        model = _model(rng, moe=True, whole=True if zero == 0 else None)
        cfg = dict(_config(rng, model), zero=zero)
        cfg["ep"] = max(e for e in (2, 4, 8) if model["n_experts"] % e == 0)
        cfg["dp"] = cfg["ep"] * rng.choice([2, 4, 8])
        if not close(student.call("config_memory", model, cfg), ref.config_memory(model, cfg), **TOL):
            return False
    return True


@check(points=0.5)
def memory_in_flight(student, rng, ref):
    """config_memory：流水线第一个 stage 同时存放的 micro-batch 数（grad_acc 小于、等于、大于 pp）"""
    model = _model(rng, moe=False, whole=True)
    model["layers"] = rng.choice([32, 48, 64, 96])
    pp = rng.choice([4, 8])
    for grad_acc in (1, rng.randint(2, pp - 1), pp, pp + rng.randint(1, 40)):
        cfg = dict(_config(rng, model), pp=pp, grad_acc=grad_acc)
        if not close(student.call("config_memory", model, cfg), ref.config_memory(model, cfg), **TOL):
            return False
    return True


@check(points=0.75)
def time_terms(student, rng, ref):
    """step_time：计算、气泡与 TP、CP、EP、PP、DP 各项通信（含 ZeRO-3 与 pp = 1）"""
    cases = []
    for i in range(5):
        model = _model(rng, moe=i % 2 == 1, whole=True if i == 0 else None)
        cfg = _config(rng, model)
        if i == 0:
            cfg.update(pp=1, zero=3)
        cases.append((model, _hw(rng), cfg))
    for model, hw, cfg in cases:
        if not close(student.call("step_time", model, hw, cfg), ref.step_time(model, hw, cfg), **TOL):
            return False
    return True


def _search_case(
    rng: random.Random, moe: bool, ref: Any, whole: bool | None = None
) -> tuple[Model, dict[str, Any], int, int, int]:
    """A small search problem; redrawn (a few times at most) until some configuration fits."""
    for _ in range(20):
        model = _model(rng, moe)
        model["dense_params"] = _billions(rng, 5, 150, whole)
        if moe:
            model["expert_params"] = _billions(rng, 20, 300)
        hw = _hw(rng)
        n_gpus = rng.choice([4, 8, 12, 16, 24, 32])
        mbs = rng.choice([1, 2])
        gbs = mbs * n_gpus * rng.choice([1, 2, 4, 8, 16])
        if ref.search_config(model, hw, n_gpus, gbs, mbs) is not None:
            break
    return model, hw, n_gpus, gbs, mbs


@check(points=0.75)
def search_matches_brute_force(student, rng, ref):
    """search_config：结果与逐个枚举全部配置的暴力搜索一致（稠密与 MoE 模型）"""
    for i in range(4):
        model, hw, n_gpus, gbs, mbs = _search_case(rng, i % 2 == 1, ref, True if i == 0 else None)
        got = student.call("search_config", model, hw, n_gpus, gbs, mbs)
        if not _same_config(got, _brute_force(ref, model, hw, n_gpus, gbs, mbs)):
            return False
    return True


@check(points=0.25)
def search_edge_cases(student, rng, ref):
    """search_config：只有一张卡、没有配置放得下、batch 凑不齐时的结果"""
    model, hw, _, _, _ = _search_case(rng, False, ref, True)
    hw = dict(hw, mem_bytes=1e12)
    gbs = rng.randint(1, 64)
    if not _same_config(student.call("search_config", model, hw, 1, gbs, 1), ref.search_config(model, hw, 1, gbs, 1)):
        return False
    tiny = dict(hw, mem_bytes=rng.uniform(1e6, 1e8))
    n_gpus = rng.choice([8, 16])
    if student.call("search_config", model, tiny, n_gpus, 8 * n_gpus, 1) is not None:
        return False
    odd = 2 * rng.randint(20, 200) + 1  # an odd batch never splits into micro-batches of 2
    return student.call("search_config", model, hw, n_gpus, odd, 2) is None


@check(points=0.25)
def search_tie_break(student, rng, ref):
    """search_config：步时间打平时按规则选择（显存更少者优先，再比较各并行度和 ZeRO 阶段）"""
    model, hw, n_gpus, gbs, mbs = _search_case(rng, False, ref, True)
    hw = dict(hw, mem_bytes=1e13)  # everything fits, so ZeRO-0/1/2 tie on time
    exp = _brute_force(ref, model, hw, n_gpus, gbs, mbs)
    got = student.call("search_config", model, hw, n_gpus, gbs, mbs)
    return _same_config(got, exp) and (exp["dp"] == 1 or exp["zero"] == 2)

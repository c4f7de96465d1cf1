"""Hidden checks pay only for real work (issue 10, "points from the page's own examples").

Two kinds of pretenders are graded in-process against every lesson's checks, across several
seeds, and must earn 0 code points; the reference behind the same harness must earn 4:

- the *memoriser* knows the reference's answer for exactly the calls the lesson page and its
  selfcheck cell show, for the trivial edge cases of each function (an empty input, a single
  rank, a size of 0), and raises ValueError wherever the reference does; for any other input it
  returns a plausible wrong value (the right one, slightly off: an int off by one, a float off by
  about 1 %, a flipped bool);
- the *sniffer* is the memoriser plus a guess at what hidden inputs look like (names such as
  "p0"/"w0"/"huge", tiny communication times, values drawn uniformly in [-1, 1], round numbers
  on the page against odd ones in the checks): it answers correctly whenever that guess says
  "hidden". Its guesses are the tells the checks used to have.

No kernel is started: a fake session answers each ``student.call`` in the grader's process, and
the checks are run by ``grader.checks.run_checks`` exactly as in grading.
"""

from __future__ import annotations

import inspect
import math
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from helpers import REPO

from grader.checks import Check, ReferenceStudent, load_checks, reference_namespace, run_checks
from grader.course import load_course
from grader.kernel import decode_args

COURSE = load_course(REPO)
SEEDS = ("2026001", "2026017", "2026042", "2026099", "2026123", "2026256")

Bound = dict[str, Any]
Guess = Callable[[str, Bound], bool]


def _canon(x: Any) -> Any:
    """A hashable form of call arguments, as loose as a hard-coded ``if`` would be (1 == 1.0)."""
    if isinstance(x, np.ndarray):
        return ("array", _canon(x.tolist()))
    if isinstance(x, np.generic):
        return _canon(x.item())
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, (list, tuple)):
        return tuple(_canon(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((str(k), _canon(v)) for k, v in x.items()))
    return x


def _bind(fn: Callable[..., Any], args: Any, kwargs: Any) -> Bound:
    """The arguments by parameter name, defaults filled in, so f(x, k=1) and f(x, 1) agree."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _key(name: str, bound: Bound) -> tuple[str, Any]:
    return name, _canon(list(bound.values()))


def page_calls(lesson: Any, ref: types.SimpleNamespace) -> set[tuple[str, Any]]:
    """Every call of a lesson function that the selfcheck cell makes, recorded by running it on the reference."""
    seen: set[tuple[str, Any]] = set()
    namespace: dict[str, Any] = {}
    for name, value in vars(ref).items():
        if isinstance(value, types.FunctionType):

            def recorder(*args: Any, _fn: Any = value, _name: str = name, **kwargs: Any) -> Any:
                seen.add(_key(_name, _bind(_fn, args, kwargs)))
                return _fn(*args, **kwargs)

            namespace[name] = recorder
        else:
            namespace[name] = value
    exec(compile(lesson.selfcheck.code, f"{lesson.path}:{lesson.selfcheck.line}", "exec"), namespace)  # noqa: S102
    return seen


# Worked examples the page's prose shows beyond its selfcheck cell, as (function, args, kwargs).
PROSE: dict[str, list[tuple[str, tuple[Any, ...], dict[str, Any]]]] = {
    "lesson01": [
        ("train_flops", (7e9, 10**12), {}),
        ("param_count", (32, 4096, 50257, 2048), {}),
        *[("static_memory_bytes", (7 * 10**9, r), {}) for r in ("fp32", "bf16_mixed", "bf16_mixed_fp32_grad_acc")],
        *[("activation_memory_bytes", (s, 1, 4096, 32, 32), {}) for s in (512, 1024, 2048, 4096, 8192)],
        ("mfu", (13e9, 80000, 16, 989e12), {}),
    ],
    "lesson04": [("simulate_dp_step", ([0.01] * 30, [0.012] * 6, False), {})],
    "lesson05": [*[("zero_memory_per_gpu", (7.5e9, 64, s), {}) for s in range(4)]],
}


def prose_calls(slug: str, ref: types.SimpleNamespace) -> set[tuple[str, Any]]:
    return {_key(name, _bind(getattr(ref, name), args, kwargs)) for name, args, kwargs in PROSE.get(slug, [])}


def _perturb(x: Any) -> Any:
    """A plausible wrong answer: the right one, slightly off, the way a small slip in a formula is.

    Every lesson function returns numbers somewhere in its result, so a slightly-off value always
    exists. The exceptions are answers with no number in them: a search that finds nothing (None;
    answered with an empty dict) and lists of strings or infinities (answered reversed or one item
    longer). No check relies on those alone: each also compares a drawn numeric result."""
    if isinstance(x, bool):
        return not x
    if isinstance(x, int):
        return x + 1 if abs(x) < 100 else x + x // 97  # off by one, or by about 1 %
    if isinstance(x, float):
        return x * 1.01 + 0.01 if math.isfinite(x) else 0.0
    if isinstance(x, str):
        return {"memory": "compute", "compute": "memory"}.get(x, x)
    if isinstance(x, dict):
        return {k: _perturb(v) for k, v in x.items()}
    if isinstance(x, list):
        out = [_perturb(v) for v in x]
        if out == x:
            out = x[::-1] if x[::-1] != x else [*x, *x[:1]] if x else [0]
        return out
    if x is None:
        return {}
    return x


# --- what each pretender knows besides the page ------------------------------------------------


def _n(x: Any) -> int:
    """Length of an array-like argument (a list or an ndarray), 0 for anything else."""
    return len(x) if isinstance(x, (list, np.ndarray)) else 0


def _edge_l01(fn: str, b: Bound) -> bool:
    return fn == "static_memory_bytes" and b["n_params"] == 0


def _edge_l03(fn: str, b: Bound) -> bool:
    if fn == "allreduce_time":
        return b["p"] == 1
    arrays = next(iter(b.values()))
    return len(arrays) <= 1 or all(len(a) == 0 for a in arrays)


def _edge_l05(fn: str, b: Bound) -> bool:
    if fn == "zero_comm_elements":
        return b["n"] == 1
    if fn in ("adamw_step", "sharded_adamw_step"):
        return _n(b["params"]) == 0 or not np.any(b["grads"])
    return False


def _edge_l06(fn: str, b: Bound) -> bool:
    return fn == "tp_comm_per_layer" and b["t"] == 1


def _edge_l07(fn: str, b: Bound) -> bool:
    if fn == "activation_bytes_per_layer":
        return b["s"] == 0
    return (fn == "all_gather_seq" and len(b["shards"]) == 1) or (
        fn == "reduce_scatter_seq" and len(b["partials"]) == 1
    )


def _edge_l08(fn: str, b: Bound) -> bool:
    return fn in ("split_positions", "causal_work") and (b["n"] == 0 or b["cp"] == 1)


def _edge_l09(fn: str, b: Bound) -> bool:
    return fn == "bubble_fraction" and b["p"] == 1


def _edge_l10(fn: str, b: Bound) -> bool:
    first = next(iter(b.values()))
    if fn == "expert_capacity":
        return first == 0
    if fn == "softmax":
        return False
    if fn == "apply_capacity":
        return _n(first) == 0 or b["capacity"] == 0
    return _n(first) == 0


def _edge_l11(fn: str, b: Bound) -> bool:
    return fn == "divisors" and b["n"] == 1


def _edge_l12(fn: str, b: Bound) -> bool:
    if fn == "matmul_cost":
        return 0 in (b["m"], b["n"], b["k"])
    if fn == "attention_io":
        return b["n"] == 0
    if fn == "round_to_format":
        return _n(b["x"]) == 0
    return False


def _never(fn: str, b: Bound) -> bool:
    return False


EDGES: dict[str, Guess] = {
    "lesson01": _edge_l01,
    "lesson02": _never,
    "lesson03": _edge_l03,
    "lesson04": lambda fn, b: fn == "bucket_gradients" and not b["grads"],
    "lesson05": _edge_l05,
    "lesson06": _edge_l06,
    "lesson07": _edge_l07,
    "lesson08": _edge_l08,
    "lesson09": _edge_l09,
    "lesson10": _edge_l10,
    "lesson11": _edge_l11,
    "lesson12": _edge_l12,
}


def _odd(x: Any) -> bool:
    """Not a round number: a float with a fractional part, as rng.uniform draws them."""
    return isinstance(x, float) and not x.is_integer()


def _decimals(x: Any, places: int) -> bool:
    """More than ``places`` decimals: drawn by rng.uniform rather than typed by a person."""
    return isinstance(x, float) and math.isfinite(x) and round(x, places) != x


def _digits(x: Any, n: int) -> bool:
    """More than ``n`` significant digits: drawn by rng.uniform rather than typed by a person."""
    return isinstance(x, float) and math.isfinite(x) and float(f"{x:.{n}g}") != x


def _pow2(x: Any) -> bool:
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


def _uniform_unit(b: Bound) -> bool:
    """Matrices all within [-1, 1] with fractional entries: rng.uniform(-1, 1), not the page's normals."""
    arrays = [v for v in b.values() if isinstance(v, np.ndarray) and v.ndim == 2]
    arrays += [a for v in b.values() if isinstance(v, list) for a in v if isinstance(a, np.ndarray)]
    if not arrays:
        return False
    values = np.concatenate([np.ravel(a) for a in arrays])
    return values.size > 3 and bool(np.all(np.abs(values) <= 1.0)) and not np.all(values == np.round(values))


def _sniff_l01(fn: str, b: Bound) -> bool:
    if fn == "static_memory_bytes":
        return b["n_params"] == 1000
    if fn == "mfu":
        return _odd(b["tokens_per_second"])
    if fn == "param_count":
        return b["hidden"] % 256 != 0
    return fn == "activation_memory_bytes" and b["seq"] in (1000, 3000)


def _sniff_l02(fn: str, b: Bound) -> bool:
    if fn == "accumulated_grad":
        return np.asarray(b["X"]).shape[1] != 3
    return fn == "activation_memory" and b["seq"] in (256, 1000, 3000)


def _sniff_l03(fn: str, b: Bound) -> bool:
    if fn == "allreduce_time":
        return _decimals(b["M_bytes"], 0) or _decimals(b["alpha_s"] * 1e6, 3)
    arrays = next(iter(b.values()))
    return any(_decimals(float(v), 0) for a in arrays for v in np.ravel(a))  # the page sums whole numbers


NAMES_L04 = re.compile(r"^([pwv]\d+|huge)$")


def _sniff_l04(fn: str, b: Bound) -> bool:
    if fn == "bucket_gradients":
        return any(NAMES_L04.match(str(name)) for name, _ in b["grads"])
    if fn == "simulate_dp_step":
        return min(b["bucket_comm_s"], default=1.0) < 0.001 or len(set(b["layer_backward_s"])) > 1
    return b["dp"] == 96


def _sniff_l05(fn: str, b: Bound) -> bool:
    if fn in ("adamw_step", "sharded_adamw_step"):
        return _digits(b["beta1"], 3) or _digits(b["lr"], 3)
    if fn == "zero_memory_per_gpu":
        return not _pow2(b["n"])
    return b["psi"] % 1e6 != 0


def _sniff_l06(fn: str, b: Bound) -> bool:
    if fn == "tp_comm_per_layer":
        return 1000 in (b["s"], b["h"]) or b["t"] in (3, 6)
    return _uniform_unit(b)


def _sniff_l07(fn: str, b: Bound) -> bool:
    return fn == "activation_bytes_per_layer" and (b["s"] in (3000, 16384) or b["t"] == 3)


def _sniff_l08(fn: str, b: Bound) -> bool:
    if fn in ("split_positions", "causal_work"):
        return b["n"] > 64 and b["n"] % 2 == 1
    return _uniform_unit(b)


def _sniff_l09(fn: str, b: Bound) -> bool:
    if fn == "simulate_pipeline":
        return _decimals(b["t_f"], 1) or _decimals(b["t_b"], 1)
    return not _pow2(b["p"])


def _sniff_l10(fn: str, b: Bound) -> bool:
    first = next(iter(b.values()))
    if fn in ("top_k_route", "load_balancing_loss"):
        return any(_decimals(float(x), 1) for row in first for x in row)
    if fn == "a2a_counts":
        return b["expert_rank"] != sorted(b["expert_rank"])
    return fn == "expert_capacity" and b["num_tokens"] % 8 != 0


def _sniff_l11(fn: str, b: Bound) -> bool:
    model = b.get("model")
    if isinstance(model, dict):
        return model["dense_params"] % 1e9 != 0  # the page's models have whole billions of parameters
    return fn == "divisors" and (b["n"] > 1000 or b["n"] in (97, 127, 251, 509))


def _sniff_l12(fn: str, b: Bound) -> bool:
    if fn == "round_to_format":
        return _n(b["x"]) > 8
    if fn == "roofline":
        return b["peak_flops"] % 1e12 != 0
    if fn == "matmul_cost":
        return b["m"] % 64 != 0
    return fn == "attention_io" and b["sram_elems"] % 1024 != 0


SNIFFERS: dict[str, Guess] = {
    "lesson01": _sniff_l01,
    "lesson02": _sniff_l02,
    "lesson03": _sniff_l03,
    "lesson04": _sniff_l04,
    "lesson05": _sniff_l05,
    "lesson06": _sniff_l06,
    "lesson07": _sniff_l07,
    "lesson08": _sniff_l08,
    "lesson09": _sniff_l09,
    "lesson10": _sniff_l10,
    "lesson11": _sniff_l11,
    "lesson12": _sniff_l12,
}


# --- grading in-process ----------------------------------------------------------------------


@dataclass
class Kit:
    slug: str
    checks: list[Check]
    ref: types.SimpleNamespace
    page: set[tuple[str, Any]]


def _kit(slug: str) -> Kit:
    lesson = COURSE.lessons[slug]
    ref = reference_namespace(lesson)
    checks = load_checks(lesson, REPO / "solutions" / slug, f"solutions/{slug}/checks.py")
    return Kit(slug, checks, ref, page_calls(lesson, ref) | prose_calls(slug, ref))


class FakeSession:
    """Stands in for the kernel: ``call`` answers with plain data, or raises StudentCallError."""

    def __init__(self, answer: Callable[[str, list[Any], dict[str, Any]], Any]) -> None:
        self.call = answer


def pretender(kit: Kit, guess: Guess) -> FakeSession:
    """A student right on the page's calls, on trivial edge cases and where ``guess`` says so; else slightly wrong."""
    honest = ReferenceStudent(kit.ref)
    edge = EDGES[kit.slug]

    def answer(function: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        right = honest.call(function, *args, **kwargs)  # a ValueError the reference raises is raised here too
        bound = _bind(getattr(kit.ref, function), decode_args(args), decode_args(kwargs))
        if _key(function, bound) in kit.page or edge(function, bound) or guess(function, bound):
            return right
        return _perturb(right)

    return FakeSession(answer)


def code_points(kit: Kit, session: FakeSession, seed: str) -> tuple[float, list[str]]:
    results = run_checks(kit.checks, session, kit.ref, seed)  # type: ignore[arg-type]
    faults = [r.fault for r in results if r.fault]
    assert not faults, faults
    return sum(r.points for r in results), [r.name for r in results if r.passed]


SLUGS = sorted(COURSE.lessons)


@pytest.fixture(scope="module", params=SLUGS)
def kit(request: pytest.FixtureRequest) -> Kit:
    return _kit(request.param)


def test_reference_scores_four(kit: Kit) -> None:
    """The harness is fair: the reference earns 4, and the page shows a call of every function the checks call."""
    honest = ReferenceStudent(kit.ref)
    called: set[str] = set()

    def answer(function: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        called.add(function)
        return honest.call(function, *args, **kwargs)

    for seed in SEEDS:
        assert code_points(kit, FakeSession(answer), seed)[0] == pytest.approx(4.0), seed
    assert called - {name for name, _ in kit.page} == set()


@pytest.mark.parametrize("who", ["memoriser", "sniffer"])
def test_pretenders_score_zero(kit: Kit, who: str) -> None:
    guess = _never if who == "memoriser" else SNIFFERS[kit.slug]
    session = pretender(kit, guess)
    earned = {seed: code_points(kit, session, seed) for seed in SEEDS}
    assert {seed: pts for seed, (pts, _) in earned.items() if pts} == {}, earned


def _extra_check(name: str, func: Callable[..., Any]) -> Check:
    return Check(name, 0.5, func.__doc__ or name, func)


def test_the_harness_catches_leaky_checks() -> None:
    """The pretenders are not zero by construction: each earns the points of a check written the old way."""
    kit = _kit("lesson04")

    def page_only(student: Any) -> bool:
        """bucket_gradients：课文中的示例"""
        got = student.call("bucket_gradients", [["a", 10], ["b", 20], ["c", 30], ["d", 100]], 50)
        return got == [["d"], ["c", "b"], ["a"]]

    def telltale_names(student: Any, rng: Any, ref: Any) -> bool:
        """bucket_gradients：名字是 p0、p1……的随机梯度"""
        grads = [[f"p{i}", rng.randint(1, 100)] for i in range(rng.randint(5, 20))]
        return student.call("bucket_gradients", grads, 120) == ref.bucket_gradients(grads, 120)

    for pretend, func in (("memoriser", page_only), ("sniffer", telltale_names)):
        leaky = Kit(kit.slug, [_extra_check(func.__name__, func)], kit.ref, kit.page)
        session = pretender(leaky, _never if pretend == "memoriser" else SNIFFERS[kit.slug])
        assert code_points(leaky, session, SEEDS[0])[0] == 0.5, pretend

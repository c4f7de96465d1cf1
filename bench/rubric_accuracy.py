"""Short-answer rubric accuracy per lesson, on answer sets kept apart so that overfitting stays visible.

- tuning: the veto examples inside each rubric.yml (also run as tests);
- dev: ``bench/data/lessonNN_dev*.jsonl``, answers that may be used to tune the rubric;
- held-out: ``bench/data/lessonNN_heldout.jsonl``, labelled answers written blind from the lesson page
  by other writers, committed before tuning and never used for it. Only aggregate figures are printed.

Figures, as the short-answer issue defines them: veto precision and recall counted per answer (an
answer counts as vetoed if any veto fires; labels give the misconceptions it asserts), the share of
answers scored exactly and within ±0.5 of the human label, the mean bias (grader − label) on answers
without a misconception and on answers with one, and the scoring cost per answer.

The cost per answer is the steady-state one a grading worker pays: each set is scored ``--repeat``
times and each answer keeps its fastest time (as ``timeit`` does: other load only ever adds time).
One-time costs of a process, such as the segmenter loading its dictionary (about a second, on the
first answer that needs it), are left out that way too.

    .venv/bin/python bench/rubric_accuracy.py [--show-dev-errors] [--lesson lessonNN] [--dev-only] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.course import load_course  # noqa: E402
from grader.rubric import Rubric, example_outcomes, load_rubric, score_answer  # noqa: E402

DATA = ROOT / "bench/data"


@dataclass
class Outcome:
    fired: bool  # the grader vetoed the answer
    wanted: bool  # the label says it asserts a misconception
    diff: float | None  # grader points − label points, None when unlabelled
    seconds: float


def score(rubric: Rubric, a: dict, verbose: bool = False) -> Outcome:
    started = time.perf_counter()
    res = score_answer(rubric, a["question"], a["text"])
    seconds = time.perf_counter() - started
    out = Outcome(bool(res.vetoes), bool(a.get("vetoes")), res.points - a["points"] if "points" in a else None, seconds)
    if verbose and (out.fired != out.wanted or (out.diff is not None and abs(out.diff) > 0.5)):
        print(f"    {a['id']} {a['question']} veto want={out.wanted} got={[v.id for v, _ in res.vetoes]} "
              f"points {a.get('points')}/{res.points}: {a['text'][:120]}")  # fmt: skip
    return out


def summarise(outcomes: list[Outcome]) -> dict[str, float]:
    """Answer-level veto precision/recall, point agreement and bias, and milliseconds per answer."""
    tp = sum(o.fired and o.wanted for o in outcomes)
    fp = sum(o.fired and not o.wanted for o in outcomes)
    fn = sum(o.wanted and not o.fired for o in outcomes)
    diffs = [o.diff for o in outcomes if o.diff is not None]
    ok = [o.diff for o in outcomes if o.diff is not None and not o.wanted]
    bad = [o.diff for o in outcomes if o.diff is not None and o.wanted]
    nan = float("nan")
    return {
        "answers": len(outcomes),
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "exact": sum(abs(d) < 1e-9 for d in diffs) / len(diffs) if diffs else nan,
        "near": sum(abs(d) <= 0.5 + 1e-9 for d in diffs) / len(diffs) if diffs else nan,
        "bias_ok": sum(ok) / len(ok) if ok else nan,
        "bias_bad": sum(bad) / len(bad) if bad else nan,
        "ms": 1000 * sum(o.seconds for o in outcomes) / max(1, len(outcomes)),
    }


def fastest(rubric: Rubric, answers: list[dict], outcomes: list[Outcome], repeat: int) -> None:
    """Score the answers ``repeat - 1`` more times and keep each answer's fastest time."""
    for _ in range(repeat - 1):
        for a, out in zip(answers, outcomes, strict=True):
            out.seconds = min(out.seconds, score(rubric, a).seconds)


def tuning_set(rubric: Rubric) -> dict[str, float]:
    outcomes = example_outcomes(rubric)
    tp = sum(fired for _, kind, _, fired in outcomes if kind == "fire")
    fn = sum(not fired for _, kind, _, fired in outcomes if kind == "fire")
    fp = sum(fired for _, kind, _, fired in outcomes if kind == "keep")
    return {"precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / (tp + fn) if tp + fn else 1.0}


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _row(label: str, m: dict[str, float]) -> str:
    return (f"  {label:<22} {m['answers']:5d}  {m['precision']:9.3f} {m['recall']:7.3f}  {m['exact']:6.3f} "
            f"{m['near']:7.3f}  {m['bias_ok']:+8.2f} {m['bias_bad']:+9.2f}  {m['ms']:6.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-dev-errors", action="store_true", help="list the dev answers scored wrongly")
    parser.add_argument("--lesson", action="append", help="only this lesson (repeatable), e.g. lesson04")
    parser.add_argument("--dev-only", action="store_true", help="do not score the held-out sets (for tuning)")
    parser.add_argument("--repeat", type=int, default=3, help="score each set N times for its timing (default 3)")
    args = parser.parse_args()
    course = load_course(ROOT)
    pooled: dict[str, list[Outcome]] = {"dev": [], "held-out": []}
    print("set                    answers  precision  recall   exact  ±0.5   bias(ok) bias(veto)  ms/ans")
    for slug in sorted(course.lessons):
        if args.lesson and slug not in args.lesson:
            continue
        rubric = load_rubric(course.solutions_dir(slug) / "rubric.yml", f"solutions/{slug}/rubric.yml")
        tuned = tuning_set(rubric)
        print(f"{slug}: tuning examples precision {tuned['precision']:.3f} recall {tuned['recall']:.3f}")
        dev = [a for p in sorted(DATA.glob(f"{slug}_dev*.jsonl")) for a in _read(p)]
        held_path = DATA / f"{slug}_heldout.jsonl"
        held = _read(held_path) if held_path.is_file() and not args.dev_only else []
        for name, answers, verbose in (("dev", dev, args.show_dev_errors), ("held-out", held, False)):
            if answers:
                outcomes = [score(rubric, a, verbose) for a in answers]
                fastest(rubric, answers, outcomes, max(1, args.repeat))
                print(_row(f"{slug} {name}", summarise(outcomes)))
                pooled[name] += outcomes
            else:
                print(f"  {slug} {name:<15} (no answer set yet)")
    for name, outcomes in pooled.items():
        if outcomes:
            print(_row(f"all lessons {name}", summarise(outcomes)))
    print(f"ms/ans: each answer's fastest of {max(1, args.repeat)} runs")


if __name__ == "__main__":
    main()

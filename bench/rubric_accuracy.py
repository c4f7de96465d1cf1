"""Rubric accuracy on lesson 4's held-out answers, which were written before the rubric and not tuned on.

Prints veto precision and recall, and the share of answers scored exactly and within ±0.5 of the
human label. The rubric's own veto examples (the tuning set) are reported beside it, so that the
gap between tuned-on and held-out figures stays visible.

    .venv/bin/python bench/rubric_accuracy.py [--verbose]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.rubric import load_rubric, score_answer  # noqa: E402


def evaluate(rubric, answers: list[dict], verbose: bool) -> dict[str, float]:
    tp = fp = fn = exact = near = 0
    for a in answers:
        res = score_answer(rubric, a["question"], a["text"])
        got = {v.id for v, _ in res.vetoes}
        want = set(a["vetoes"])
        tp += len(got & want)
        fp += len(got - want)
        fn += len(want - got)
        exact += res.points == a["points"]
        near += abs(res.points - a["points"]) <= 0.5 + 1e-9
        if verbose and (got != want or abs(res.points - a["points"]) > 0.5):
            print(f"  {a['id']} {a['question']} label={a['points']} got={res.points} vetoes want={sorted(want)} got={sorted(got)}")
    n = len(answers)
    return {
        "answers": n,
        "veto_precision": tp / (tp + fp) if tp + fp else 1.0,
        "veto_recall": tp / (tp + fn) if tp + fn else 1.0,
        "exact": exact / n,
        "within_0.5": near / n,
    }


def tuning_set(rubric) -> dict[str, float]:
    tp = fp = fn = 0
    for v in rubric.vetoes:
        for text in v.fire:
            fired = any(v.id in {x.id for x, _ in score_answer(rubric, q, text).vetoes} for q in v.questions)
            tp += fired
            fn += not fired
        for text in v.keep:
            fp += any(v.id in {x.id for x, _ in score_answer(rubric, q, text).vetoes} for q in v.questions)
    return {"veto_precision": tp / (tp + fp) if tp + fp else 1.0, "veto_recall": tp / (tp + fn) if tp + fn else 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="list the answers the rubric gets wrong")
    args = parser.parse_args()
    rubric = load_rubric(ROOT / "solutions/lesson04/rubric.yml", "solutions/lesson04/rubric.yml")
    answers = [json.loads(line) for line in (ROOT / "bench/data/lesson04_heldout.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    held = evaluate(rubric, answers, args.verbose)
    tuned = tuning_set(rubric)
    print("lesson04 rubric accuracy")
    print(f"  held-out answers          {held['answers']}")
    print(f"  veto precision (held-out) {held['veto_precision']:.3f}   (tuning examples: {tuned['veto_precision']:.3f})")
    print(f"  veto recall    (held-out) {held['veto_recall']:.3f}   (tuning examples: {tuned['veto_recall']:.3f})")
    print(f"  points exact              {held['exact']:.3f}")
    print(f"  points within ±0.5        {held['within_0.5']:.3f}")


if __name__ == "__main__":
    main()

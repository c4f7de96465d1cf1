"""Rubric accuracy of lesson 4 on three answer sets, kept apart so that overfitting stays visible.

- tuning: the veto examples inside rubric.yml (also run as tests);
- dev: bench/data/lesson04_dev*.jsonl, misconception paraphrases and full answers written to tune
  the vetoes on;
- held-out: bench/data/lesson04_heldout.jsonl, labelled answers written before the rubric existed
  and never used for tuning. Only its aggregate figures are printed.

Prints veto precision and recall, and for the held-out set the share of answers scored exactly
and within ±0.5 of the human label.

    .venv/bin/python bench/rubric_accuracy.py [--show-dev-errors]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.rubric import example_outcomes, load_rubric, score_answer  # noqa: E402


def evaluate(rubric, answers: list[dict], verbose: bool = False) -> dict[str, float]:
    tp = fp = fn = exact = near = 0
    for a in answers:
        res = score_answer(rubric, a["question"], a["text"])
        got = {v.id for v, _ in res.vetoes}
        want = set(a["vetoes"])
        tp += len(got & want)
        fp += len(got - want)
        fn += len(want - got)
        if "points" in a:
            exact += res.points == a["points"]
            near += abs(res.points - a["points"]) <= 0.5 + 1e-9
        if verbose and (got != want or ("points" in a and abs(res.points - a["points"]) > 0.5)):
            print(
                f"  {a['id']} {a['question']} want={sorted(want)} got={sorted(got)} points {a.get('points')}/{res.points} "
                f"found={[k.id for k, _ in res.found]} {a['text']}"
            )
    n = len(answers)
    return {
        "answers": n,
        "veto_precision": tp / (tp + fp) if tp + fp else 1.0,
        "veto_recall": tp / (tp + fn) if tp + fn else 1.0,
        "exact": exact / n,
        "within_0.5": near / n,
    }


def tuning_set(rubric) -> dict[str, float]:
    outcomes = example_outcomes(rubric)
    tp = sum(fired for _, kind, _, fired in outcomes if kind == "fire")
    fn = sum(not fired for _, kind, _, fired in outcomes if kind == "fire")
    fp = sum(fired for _, kind, _, fired in outcomes if kind == "keep")
    return {"veto_precision": tp / (tp + fp) if tp + fp else 1.0, "veto_recall": tp / (tp + fn) if tp + fn else 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-dev-errors", action="store_true", help="list the dev answers whose vetoes are wrong")
    args = parser.parse_args()
    rubric = load_rubric(ROOT / "solutions/lesson04/rubric.yml", "solutions/lesson04/rubric.yml")
    tuned = tuning_set(rubric)
    dev_sets = sorted((ROOT / "bench/data").glob("lesson04_dev*.jsonl"))
    dev = evaluate(rubric, [a for p in dev_sets for a in _read(p.name)], args.show_dev_errors)
    labelled = evaluate(rubric, [a for p in dev_sets for a in _read(p.name) if "points" in a])
    held = evaluate(rubric, _read("lesson04_heldout.jsonl"))
    print("lesson04 rubric accuracy            precision  recall")
    print(f"  tuning examples (rubric.yml)      {tuned['veto_precision']:.3f}      {tuned['veto_recall']:.3f}")
    print(f"  dev set ({dev['answers']:3d} answers)          {dev['veto_precision']:.3f}      {dev['veto_recall']:.3f}")
    print(
        f"  held-out set ({held['answers']:3d} answers)     {held['veto_precision']:.3f}      {held['veto_recall']:.3f}"
    )
    print(
        f"  dev points exact / within ±0.5    {labelled['exact']:.3f} / {labelled['within_0.5']:.3f}   ({labelled['answers']} labelled dev answers)"
    )
    print(f"  held-out points exact             {held['exact']:.3f}")
    print(f"  held-out points within ±0.5       {held['within_0.5']:.3f}")


def _read(name: str) -> list[dict]:
    text = (ROOT / "bench/data" / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


if __name__ == "__main__":
    main()

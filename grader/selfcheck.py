"""`course check`: what an author runs after writing a lesson, before students see it.

It grades the lesson's own reference answers and its untouched notebook, and runs every veto
example, so that a lesson whose solution fails its tests or whose rubric misses its own key points
is caught by the author rather than by students.
"""

from __future__ import annotations

import time

from .consistency import self_contradictions
from .course import Course
from .grade import Grader
from .lesson import QUESTION_IDS
from .notebook import build_notebook, dumps
from .rubric import example_outcomes, hint_leaks, score_answer


def check_lesson(grader: Grader, slug: str) -> tuple[list[str], float]:
    """Return the problems found (none when the lesson is sound) and the reference's grading time."""
    kit = grader.kit(slug)
    problems: list[str] = []
    started = time.perf_counter()
    ref = grader.grade_bytes(dumps(build_notebook(kit.lesson, reference=True)).encode(), f"{slug}-reference.ipynb")
    elapsed = time.perf_counter() - started
    if ref["total"] != 10 or ref["vetoes"]:
        problems.append(
            f"reference submission scores {ref['total']}/10, vetoes {[v['id'] for v in ref['vetoes']]}: "
            + "; ".join(m for i in ref["items"] for m in i["messages"] if m.startswith("✗"))
        )
    blank = grader.grade_bytes(dumps(build_notebook(kit.lesson)).encode(), f"{slug}-untouched.ipynb")
    for kind, result in (("reference", ref), ("untouched", blank)):
        problems += [
            f"{kind} submission: hidden test broke (course fault): {f}" for f in result.get("course_faults", [])
        ]
    code = next(i for i in blank["items"] if i["id"] == "code")
    if code["points"] != 0:
        problems.append(f"untouched notebook scores {code['points']} on code (must be 0)")
    for qid in QUESTION_IDS:
        res = score_answer(kit.rubric, qid, "\n".join(kit.lesson.keypoints(qid)))
        if res.points != 2 or res.vetoes:
            problems.append(
                f"{qid} key points score {res.points}/2 (missing {[k.id for k in res.missing]}), vetoes {[v.id for v, _ in res.vetoes]}"
            )
    if len(kit.rubric.vetoes) < 3:
        problems.append(f"only {len(kit.rubric.vetoes)} vetoes (at least 3)")
    for v in kit.rubric.vetoes:
        if len(v.fire) < 5 or len(v.keep) < 5:
            problems.append(f"veto {v.id}: needs at least 5 'fire' and 5 'keep' examples")
    for v, kind, text, fired in example_outcomes(kit.rubric):
        if kind == "fire" and not fired:
            problems.append(f"veto {v.id} does not fire on: {text}")
        elif kind == "keep" and fired:
            problems.append(f"veto {v.id} fires on a keep example: {text}")
    if len(kit.checks) < 6:
        problems.append(f"only {len(kit.checks)} hidden tests (at least 6)")
    # No veto may fail what the lesson itself teaches (see docs/rubric.md, prose_exceptions).
    problems += self_contradictions(kit.rubric, kit.lesson)
    problems += hint_leaks(kit.rubric)
    return problems, elapsed


def check_course(course: Course, slugs: list[str], sandbox: bool) -> dict[str, tuple[list[str], float]]:
    grader = Grader(course, sandbox=sandbox)
    try:
        return {slug: check_lesson(grader, slug) for slug in slugs}
    finally:
        grader.close()

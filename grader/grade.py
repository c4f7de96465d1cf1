"""Grade one submission end to end: read, rebuild, run, check, score the answers, apply overrides.

The result is a plain dict (the schema is in docs/result-schema.md). Its content depends only on
the submission's bytes and the course sources, so the same notebook always gets the same result.
"""

from __future__ import annotations

import hashlib
import os
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import Check, load_checks, reference_namespace
from .code_item import grade_code
from .course import Course
from .kernel import KernelSession
from .lesson import CODE_POINTS, QUESTION_IDS, QUESTION_POINTS, Lesson
from .provisioner import ZygotePool
from .rubric import AnswerResult, Rubric, load_rubric, score_answer
from .submission import SubmissionError, extract, lesson_of, read_notebook, read_submission_file
from .text import clean, one_line

MAX_POINTS = CODE_POINTS + QUESTION_POINTS * len(QUESTION_IDS)


@dataclass
class LessonKit:
    """Everything the grader needs for one lesson, loaded once per process."""

    lesson: Lesson
    checks: list[Check]
    rubric: Rubric
    ref: types.SimpleNamespace


class Grader:
    """Grades submissions of a course. Keeps one warm kernel ready to take start-up off the path."""

    def __init__(self, course: Course, sandbox: bool = True, prefork: bool = False) -> None:
        self.course = course
        self.sandbox = sandbox
        self._kits: dict[str, LessonKit] = {}
        self._spare: KernelSession | None = None
        # With ``prefork`` (root mode only, opt-in until it is measured on a quiet machine), kernels are
        # forked from one zygote per grader instead of started afresh: see docs/security.md.
        self._zygotes = ZygotePool() if sandbox and prefork and os.geteuid() == 0 else None

    def kit(self, slug: str) -> LessonKit:
        if slug not in self._kits:
            lesson = self.course.lesson(slug)
            folder = self.course.solutions_dir(slug)
            rel = f"solutions/{slug}"
            self._kits[slug] = LessonKit(
                lesson,
                load_checks(lesson, folder, f"{rel}/checks.py"),
                load_rubric(folder / "rubric.yml", f"{rel}/rubric.yml"),
                reference_namespace(lesson),
            )
        return self._kits[slug]

    def _kernel(self) -> KernelSession:
        """Take the warm kernel (or start one) and immediately start the next."""
        session = self._spare
        if session is None:
            session = KernelSession(self.course.limits, self.sandbox, self._zygotes)
            session.start()
        self._spare = KernelSession(self.course.limits, self.sandbox, self._zygotes)
        try:
            self._spare.start()
        except Exception:  # noqa: BLE001 - the next submission will report the failure itself
            self._spare.close()
            self._spare = None
        return session

    def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
            self._spare = None
        if self._zygotes is not None:
            self._zygotes.close()

    def grade_file(self, path: Path, expect_lesson: str | None = None, name: str | None = None) -> dict[str, Any]:
        """Grade a notebook file; never raises for a bad submission. ``name`` is how the file is shown."""
        shown = one_line(name or path.name, 200)
        try:
            data = read_submission_file(path, self.course.limits.upload_bytes)
        except SubmissionError as exc:
            return failed_result(shown, expect_lesson, str(exc))
        return self.grade_bytes(data, shown, expect_lesson)

    def grade_bytes(self, data: bytes, name: str, expect_lesson: str | None = None) -> dict[str, Any]:
        """Grade a notebook's bytes. Every string of the result is safe to print (see ``text.clean``)."""
        name = one_line(name, 200)
        try:
            nb = read_notebook(data, name, self.course.limits.upload_bytes)
            slug = expect_lesson or lesson_of(nb)
            if slug is None or slug not in self.course.lessons:
                raise SubmissionError(
                    f"{name}：notebook 中没有可识别的课次信息（metadata.course.lesson）。请从课程网站下载本课的 notebook 后填写。"
                )
            kit = self.kit(slug)
            sub = extract(nb, kit.lesson, name)
        except SubmissionError as exc:
            return failed_result(name, expect_lesson, str(exc))
        result = self._grade(kit, sub, hashlib.sha256(data).hexdigest())
        result["file"] = name
        return _cleaned(result)

    def _grade(self, kit: LessonKit, sub: Any, digest: str) -> dict[str, Any]:
        lesson = kit.lesson
        code = grade_code(
            lesson,
            kit.checks,
            kit.ref,
            sub.code,
            sub.notes.get("code", []),
            f"{lesson.slug}\0{digest}",
            self._kernel,
            extra_code_cells=sub.extra_code_cells,
        )
        items: list[dict[str, Any]] = [
            {
                "id": "code",
                "points": code.points,
                "max": float(CODE_POINTS),
                "messages": code.messages,
                "checks": [
                    {"name": c.name, "description": c.description, "points": c.points, "max": c.max, "passed": c.passed}
                    for c in code.checks
                ],
            }
        ]
        vetoes: list[dict[str, Any]] = []
        suppressed: list[dict[str, Any]] = []
        released = self.course.released(lesson.slug)
        for qid in QUESTION_IDS:
            answer, notes = sub.answers.get(qid, ""), sub.notes.get(qid, [])
            item, res = _answer_item(kit.rubric, qid, answer, notes, released, lesson.question_text(qid))
            items.append(item)
            if res is None:
                continue
            vetoes += [
                {
                    "id": v.id,
                    "question": qid,
                    "evidence": e.sentence,
                    "message": f"{v.says}。{v.explain}",
                    "needs_review": bool(e.review),
                    "review": list(e.review),
                }
                for v, e in res.vetoes
            ]
            suppressed += [
                {"id": v.id, "question": qid, "evidence": e.sentence, "reason": r} for v, e, r in res.suppressed
            ]
        total = round(sum(i["points"] for i in items), 2)
        errors = []
        if code.report.submission_timed_out:
            errors.append("整份提交超过了运行时间上限，已被终止。")
        if not self.sandbox and code.report.cells:
            errors.append("未使用沙箱运行（--no-sandbox）。")
        return {
            "lesson": lesson.slug,
            "total": total,
            "max": float(MAX_POINTS),
            "passed": total >= self.course.pass_mark and not vetoes,
            "pass_mark": self.course.pass_mark,
            "items": items,
            "vetoes": vetoes,
            "suppressed": suppressed,
            "errors": errors,
            "sandbox": self.sandbox,
            "overrides": [],
            "sha256": digest,
            "graded": True,
            "course_faults": code.course_faults,
        }


def _answer_item(
    rubric: Rubric, qid: str, text: str, notes: list[str], released: bool, question_text: str
) -> tuple[dict[str, Any], AnswerResult | None]:
    """Score one short answer. A missed key point shows its hint until the lesson's answers are released,
    and the key point itself after: before release, feedback must not hand out the answer key."""
    messages = list(notes)
    res = score_answer(rubric, qid, text, question_text=question_text) if text.strip() else None
    if res is None:
        messages.append("没有作答。")
        missing = rubric.key_points[qid]
    else:
        messages += res.notes
        messages += [
            f"✓ {kp.says}（依据：「{ev.sentence}」）" if released else f"✓ 答到了一个要点（依据：「{ev.sentence}」）"
            for kp, ev in res.found
        ]
        missing = res.missing
    for kp in missing:
        messages.append(f"✗ 未找到要点：{kp.says}" if released else f"✗ 还缺一个要点。提示：{kp.hint}")
    item = {
        "id": qid,
        "points": res.points if res else 0.0,
        "max": float(QUESTION_POINTS),
        "messages": messages,
        "key_points": [{"id": k.id, "points": k.points, "evidence": e.sentence} for k, e in res.found] if res else [],
        "missing": [k.id for k in missing],
    }
    return item, res


def _cleaned(value: Any) -> Any:
    """Every string in a result made safe to print and encode (lone surrogates, control characters)."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {k: _cleaned(v) for k, v in value.items()}
    return value


def failed_result(name: str, lesson: str | None, message: str) -> dict[str, Any]:
    """The result of a file that could not be graded at all: zero points, one clear error."""
    items = [{"id": "code", "points": 0.0, "max": float(CODE_POINTS), "messages": [], "checks": []}]
    items += [
        {"id": q, "points": 0.0, "max": float(QUESTION_POINTS), "messages": [], "key_points": [], "missing": []}
        for q in QUESTION_IDS
    ]
    return {
        "lesson": lesson,
        "file": name,
        "total": 0.0,
        "max": float(MAX_POINTS),
        "passed": False,
        "items": items,
        "vetoes": [],
        "suppressed": [],
        "errors": [message],
        "overrides": [],
        "graded": False,
        "course_faults": [],
    }

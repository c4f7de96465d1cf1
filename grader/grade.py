"""Grade one submission end to end: read, rebuild, run, check, score the answers, apply overrides.

The result is a plain dict (the schema is in docs/result-schema.md). Its content depends only on
the submission's bytes and the course sources, so the same notebook always gets the same result.
"""

from __future__ import annotations

import hashlib
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import Check, load_checks, reference_namespace
from .code_item import grade_code
from .course import Course
from .errors import SourceError
from .kernel import KernelSession
from .lesson import CODE_POINTS, QUESTION_IDS, QUESTION_POINTS, Lesson
from .rubric import Rubric, load_rubric, score_answer
from .submission import SubmissionError, extract, lesson_of, read_notebook

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

    def __init__(self, course: Course, sandbox: bool = True) -> None:
        self.course = course
        self.sandbox = sandbox
        self._kits: dict[str, LessonKit] = {}
        self._spare: KernelSession | None = None

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
            session = KernelSession(self.course.limits, self.sandbox)
            session.start()
        self._spare = KernelSession(self.course.limits, self.sandbox)
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

    def grade_file(self, path: Path, expect_lesson: str | None = None) -> dict[str, Any]:
        """Grade a notebook file; never raises for a bad submission."""
        limit = self.course.limits.upload_bytes
        try:
            size = path.stat().st_size
            if size > limit:
                return failed_result(
                    path.name,
                    expect_lesson,
                    f"{path.name}：文件有 {size:,} 字节，超过上限 {limit:,} 字节。请清除输出后重新提交。",
                )
            data = path.read_bytes()
        except OSError as exc:
            return failed_result(path.name, expect_lesson, f"{path.name}：无法读取文件（{exc.strerror}）。")
        return self.grade_bytes(data, path.name, expect_lesson)

    def grade_bytes(self, data: bytes, name: str, expect_lesson: str | None = None) -> dict[str, Any]:
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
        return result

    def _grade(self, kit: LessonKit, sub: Any, digest: str) -> dict[str, Any]:
        lesson = kit.lesson
        code = grade_code(
            lesson, kit.checks, kit.ref, sub.code, sub.notes.get("code", []), f"{lesson.slug}\0{digest}", self._kernel
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
        vetoes, suppressed = [], []
        for qid in QUESTION_IDS:
            text = sub.answers.get(qid, "")
            messages = list(sub.notes.get(qid, []))
            if not text.strip():
                messages.append("没有作答。")
                items.append(
                    {
                        "id": qid,
                        "points": 0.0,
                        "max": float(QUESTION_POINTS),
                        "messages": messages,
                        "key_points": [],
                        "missing": [k.says for k in kit.rubric.key_points[qid]],
                    }
                )
                continue
            res = score_answer(kit.rubric, qid, text)
            for kp, ev in res.found:
                messages.append(f"✓ {kp.says}（依据：「{ev.sentence}」）")
            for kp in res.missing:
                messages.append(f"✗ 未找到要点：{kp.says}")
            items.append(
                {
                    "id": qid,
                    "points": res.points,
                    "max": res.max,
                    "messages": messages,
                    "key_points": [{"id": k.id, "points": k.points, "evidence": e.sentence} for k, e in res.found],
                    "missing": [k.says for k in res.missing],
                }
            )
            vetoes += [
                {"id": v.id, "question": qid, "evidence": e.sentence, "message": f"{v.says}。{v.explain}"}
                for v, e in res.vetoes
            ]
            suppressed += [
                {"id": v.id, "question": qid, "evidence": e.sentence, "reason": r} for v, e, r in res.suppressed
            ]
        total = round(sum(i["points"] for i in items), 2)
        errors = []
        if code.report.submission_timed_out:
            errors.append("整份提交超过了运行时间上限，已被终止。")
        if not self.sandbox:
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
        }


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
    }


def apply_overrides(result: dict[str, Any], entry: dict[str, Any], pass_mark: float) -> None:
    """Apply an instructor's override entry: item points and/or lifted vetoes, each with a reason."""
    reason = entry["reason"]
    for item_id, points in (entry.get("items") or {}).items():
        item = next(i for i in result["items"] if i["id"] == item_id)
        result["overrides"].append({"target": item_id, "from": item["points"], "to": float(points), "reason": reason})
        item["points"] = float(points)
        item["messages"].append(f"教师调整了本项得分：{reason}")
    for veto_id in entry.get("lift_vetoes") or []:
        kept = [v for v in result["vetoes"] if v["id"] != veto_id]
        if len(kept) != len(result["vetoes"]):
            result["overrides"].append(
                {"target": f"veto:{veto_id}", "from": "vetoed", "to": "lifted", "reason": reason}
            )
        result["vetoes"] = kept
    result["total"] = round(sum(i["points"] for i in result["items"]), 2)
    result["passed"] = result["total"] >= pass_mark and not result["vetoes"]


def load_overrides(path: Path, course: Course) -> dict[str, dict[str, Any]]:
    """Read an overrides file: ``{file name or sha256: {items: {q1: 2}, lift_vetoes: [id], reason: ...}}``."""
    from .yamlio import load_yaml

    display = str(path)
    if not path.is_file():
        raise SourceError(display, None, "overrides file not found")
    data = load_yaml(path.read_text(encoding="utf-8"), display) or {}
    lines = path.read_text(encoding="utf-8").splitlines()

    def line_of(key: str) -> int | None:
        return next((i for i, line in enumerate(lines, start=1) if f"{key}:" in line), None)

    if not isinstance(data, dict):
        raise SourceError(display, 1, "overrides must map a submission (file name or sha256) to its override")
    for key, entry in data.items():
        where = line_of(str(key))
        if not isinstance(entry, dict) or not isinstance(entry.get("reason"), str) or not entry["reason"].strip():
            raise SourceError(display, where, f"override for {key!r} needs a non-empty 'reason'")
        unknown = set(entry) - {"items", "lift_vetoes", "reason"}
        if unknown:
            raise SourceError(
                display,
                where,
                f"override for {key!r} has unknown key(s) {sorted(unknown)}; use items, lift_vetoes, reason",
            )
        for item_id, points in (entry.get("items") or {}).items():
            limit = CODE_POINTS if item_id == "code" else QUESTION_POINTS if item_id in QUESTION_IDS else None
            if limit is None:
                raise SourceError(
                    display, where, f"override for {key!r}: unknown item {item_id!r}; use code, q1, q2 or q3"
                )
            if isinstance(points, bool) or not isinstance(points, (int, float)) or not 0 <= points <= limit:
                raise SourceError(display, where, f"override for {key!r}: {item_id} must be a number from 0 to {limit}")
        if not isinstance(entry.get("lift_vetoes") or [], list):
            raise SourceError(display, where, f"override for {key!r}: lift_vetoes must be a list of veto ids")
    return {str(k): v for k, v in data.items()}

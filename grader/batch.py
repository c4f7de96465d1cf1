"""Grade a class's submissions in parallel. One bad submission never stops the batch.

A batch is planned before anything runs: each file gets its student (from its path and the roster),
its sha256 and the lesson it claims, so that overrides and the lessons' solutions can be checked
up front, and two files of one student are flagged. Each worker thread owns a Grader, and each
Grader keeps one kernel booting ahead of demand, so kernel start-up overlaps with grading.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .course import Course
from .grade import Grader, failed_result
from .overrides import Override, apply_override
from .roster import Roster, identify
from .submission import SubmissionError, lesson_of, read_notebook, read_submission_file
from .text import one_line


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass
class Entry:
    """One file of a batch, before grading."""

    path: Path
    display: str  # the path as shown to people: one line, no control characters
    student: str  # '' when unknown
    name: str
    sha256: str  # '' when the file cannot be read
    lesson: str | None  # as the notebook claims it
    flags: list[str] = field(default_factory=list)  # for the instructor


def plan(course: Course, paths: list[Path], roster: Roster | None) -> list[Entry]:
    """Identify every file of a batch; flag unknown students and students with several files."""
    entries = []
    for path in paths:
        who = identify(path, course.id_patterns, roster)
        entry = Entry(path, one_line(str(path), 300), who.student, who.name, "", None)
        if who.problem:
            entry.flags.append(who.problem)
        try:
            data = read_submission_file(path, course.limits.upload_bytes)
            entry.sha256 = hashlib.sha256(data).hexdigest()
            entry.lesson = lesson_of(read_notebook(data, path.name, course.limits.upload_bytes))
        except SubmissionError:
            pass  # reported when the file is graded
        entries.append(entry)
    counts = Counter(e.student for e in entries if e.student)
    for e in entries:
        if counts[e.student] > 1:
            e.flags.append(f"student {e.student} has {counts[e.student]} submissions in this batch; all are graded")
    return entries


def grade_many(
    course: Course,
    entries: list[Entry],
    *,
    jobs: int,
    sandbox: bool,
    lesson: str | None = None,
    overrides: dict[str, Override] | None = None,
    progress: bool = True,
    prefork: bool = False,
) -> list[dict[str, Any]]:
    """Grade planned entries and return results in the same order, each carrying its student."""
    local = threading.local()
    graders: list[Grader] = []
    lock = threading.Lock()
    overrides = overrides or {}

    def work(entry: Entry) -> dict[str, Any]:
        grader = getattr(local, "grader", None)
        if grader is None:
            grader = local.grader = Grader(course, sandbox=sandbox, prefork=prefork)
            with lock:
                graders.append(grader)
        try:
            result = grader.grade_file(entry.path, lesson, name=entry.display)
        except Exception as exc:  # noqa: BLE001 - a grader bug must not sink the batch
            result = failed_result(
                entry.display, lesson, f"评分程序内部错误（{type(exc).__name__}），这不是你的问题；请联系助教。"
            )
            result["course_faults"] = [f"{entry.display}: internal error {type(exc).__name__}: {exc}"]
        result.update(student=entry.student, name=entry.name, flags=list(entry.flags))
        chosen = overrides.get(result.get("sha256", "")) or overrides.get(entry.student)
        if chosen is not None and result["graded"]:
            apply_override(result, chosen, course.pass_mark)
        return result

    bar = tqdm(total=len(entries), unit="nb", desc="grading", disable=not progress or len(entries) < 2, leave=False)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(entries)))) as pool:
            futures = [pool.submit(work, e) for e in entries]
            for f in futures:
                f.add_done_callback(lambda _: bar.update(1))
            return [f.result() for f in futures]
    finally:
        bar.close()
        for g in graders:
            g.close()

"""Grade many submissions in parallel. One bad submission never stops the batch.

Each worker thread owns a Grader, and each Grader keeps one kernel booting ahead of demand, so
kernel start-up overlaps with the grading of the previous submission.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .course import Course
from .grade import Grader, apply_overrides, failed_result


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def grade_many(
    course: Course,
    paths: list[Path],
    *,
    jobs: int,
    sandbox: bool,
    lesson: str | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Grade ``paths`` and return results in the same order."""
    local = threading.local()
    graders: list[Grader] = []
    lock = threading.Lock()
    overrides = overrides or {}

    def work(path: Path) -> dict[str, Any]:
        grader = getattr(local, "grader", None)
        if grader is None:
            grader = local.grader = Grader(course, sandbox=sandbox)
            with lock:
                graders.append(grader)
        try:
            result = grader.grade_file(path, lesson)
        except Exception as exc:  # noqa: BLE001 - a grader bug must not sink the batch
            return failed_result(
                path.name, lesson, f"{path.name}：评分程序内部错误（{type(exc).__name__}），请联系助教。"
            )
        entry = overrides.get(path.name) or overrides.get(result.get("sha256", ""))
        if entry:
            apply_overrides(result, entry, course.pass_mark)
        return result

    bar = tqdm(total=len(paths), unit="nb", desc="grading", disable=not progress or len(paths) < 2, leave=False)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(paths)))) as pool:
            futures = [pool.submit(work, p) for p in paths]
            for f in futures:
                f.add_done_callback(lambda _: bar.update(1))
            return [f.result() for f in futures]
    finally:
        bar.close()
        for g in graders:
            g.close()

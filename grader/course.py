"""The course as a whole: settings from ``_quarto.yml`` and every lesson under ``lessons/``.

Loading the course validates the cross-file rules too: each ``solutions/lessonNN/`` folder and each
answer-release entry must name a lesson that exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .errors import SourceError
from .lesson import Lesson, parse_lesson
from .roster import DEFAULT_ID_PATTERNS, Roster, compile_patterns, load_roster
from .yamlio import load_yaml

CONFIG = "_quarto.yml"
RELEASE_STATES = ("hidden", "released")


@dataclass(frozen=True)
class Limits:
    """Resource limits for one graded submission; every field is settable in ``course: limits:``."""

    cell_timeout_s: float = 10.0
    submission_timeout_s: float = 60.0
    output_bytes_per_cell: int = 64_000
    output_bytes_total: int = 256_000
    memory_mb: int = 1024
    max_processes: int = 64
    file_size_mb: int = 16
    cpu_seconds: int = 60
    upload_bytes: int = 2_000_000


@dataclass(frozen=True)
class ServiceSettings:
    """What the course service (``course serve``) reads from the ``course:`` block.

    ``late_policy`` is ``none`` (late work is accepted as is), ``lock`` (no upload after the
    deadline) or ``penalty`` (``late_penalty_per_day`` points off the total per started day).
    """

    service_url: str | None = None  # where the "提交作业" link on each lesson page points
    attempts_per_day: int = 10  # uploads per student per lesson per (UTC) day
    late_policy: str = "none"
    late_penalty_per_day: float = 0.0
    deadlines: dict[str, datetime] = field(default_factory=dict)  # slug -> timezone-aware deadline
    gradebook: str = "best"  # best | latest attempt in the gradebook


@dataclass
class Course:
    root: Path
    pass_mark: float
    releases: dict[str, str]  # slug -> hidden | released
    limits: Limits
    lessons: dict[str, Lesson] = field(default_factory=dict)
    roster_file: str | None = None  # course.roster, relative to the root
    id_patterns: list[re.Pattern[str]] = field(default_factory=list)
    service: ServiceSettings = field(default_factory=ServiceSettings)

    def roster(self, override: Path | None = None) -> Roster | None:
        """The class roster: ``override`` (``--roster``) or ``course.roster``; None when neither is set."""
        if override is not None:
            return load_roster(override, str(override))
        if self.roster_file is None:
            return None
        return load_roster(self.root / self.roster_file, self.roster_file)

    def released(self, slug: str) -> bool:
        return self.releases.get(slug, "hidden") == "released"

    def lesson(self, slug: str) -> Lesson:
        try:
            return self.lessons[slug]
        except KeyError:
            known = ", ".join(sorted(self.lessons)) or "none"
            raise SourceError(self.root / "lessons", None, f"no lesson {slug!r}; known lessons: {known}") from None

    def solutions_dir(self, slug: str) -> Path:
        return self.root / "solutions" / slug


def load_settings(root: Path) -> tuple[float, dict[str, str], Limits, str | None, list[re.Pattern[str]]]:
    """Read the ``course:`` block of ``_quarto.yml`` and check every value."""
    path = root / CONFIG
    if not path.is_file():
        raise SourceError(path, None, "not found: run the command from the course root (the folder with _quarto.yml)")
    data = load_yaml(path.read_text(encoding="utf-8"), CONFIG)
    if not isinstance(data, dict) or not isinstance(data.get("course"), dict):
        raise SourceError(CONFIG, 1, "needs a 'course:' block with pass_mark and answers (see docs/authoring.md)")
    block = data["course"]
    line = _line_of(path, "course:")
    pass_mark = block.get("pass_mark", 8)
    if not isinstance(pass_mark, (int, float)) or isinstance(pass_mark, bool) or not 0 <= pass_mark <= 10:
        raise SourceError(
            CONFIG,
            _line_of(path, "pass_mark:") or line,
            f"course.pass_mark must be a number from 0 to 10, got {pass_mark!r}",
        )
    answers = block.get("answers") or {}
    if not isinstance(answers, dict):
        raise SourceError(
            CONFIG, _line_of(path, "answers:") or line, "course.answers must map lessonNN to hidden or released"
        )
    releases: dict[str, str] = {}
    for slug, state in answers.items():
        if state not in RELEASE_STATES:
            raise SourceError(
                CONFIG,
                _line_of(path, f"{slug}:") or line,
                f"course.answers.{slug} must be 'hidden' or 'released', got {state!r}",
            )
        releases[str(slug)] = state
    roster = block.get("roster")
    if roster is not None and (not isinstance(roster, str) or not roster.strip()):
        raise SourceError(CONFIG, _line_of(path, "roster:") or line, "course.roster must be a path to roster.csv")
    patterns = block.get("id_patterns", list(DEFAULT_ID_PATTERNS))
    pattern_line = _line_of(path, "id_patterns:") or line
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise SourceError(CONFIG, pattern_line, "course.id_patterns must be a list of regular expressions")
    compiled = compile_patterns(patterns, CONFIG, pattern_line)
    return float(pass_mark), releases, _limits(block.get("limits") or {}, path, line), roster, compiled


def _limits(raw: Any, path: Path, line: int | None) -> Limits:
    if not isinstance(raw, dict):
        raise SourceError(
            CONFIG, _line_of(path, "limits:") or line, "course.limits must be a mapping of limit names to numbers"
        )
    defaults = Limits()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if not hasattr(defaults, str(key)):
            known = ", ".join(Limits.__dataclass_fields__)
            raise SourceError(
                CONFIG, _line_of(path, f"{key}:") or line, f"unknown limit {key!r}; known limits: {known}"
            )
        kind = type(getattr(defaults, key))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise SourceError(
                CONFIG,
                _line_of(path, f"{key}:") or line,
                f"course.limits.{key} must be a positive number, got {value!r}",
            )
        values[key] = kind(value)
    return Limits(**values)


def load_course(root: str | Path) -> Course:
    """Load settings and every lesson; raise SourceError on the first problem found."""
    root = Path(root).resolve()
    pass_mark, releases, limits, roster, patterns = load_settings(root)
    course = Course(root, pass_mark, releases, limits, roster_file=roster, id_patterns=patterns)
    course.service = load_service_settings(root)
    for path in sorted((root / "lessons").glob("*.qmd")):
        lesson = parse_lesson(path, display=str(path.relative_to(root)))
        course.lessons[lesson.slug] = lesson
    if not course.lessons:
        raise SourceError("lessons", None, "no lessons found: add lessons/lessonNN.qmd")
    for slug in releases:
        if slug not in course.lessons:
            raise SourceError(
                CONFIG,
                _line_of(root / CONFIG, f"{slug}:"),
                f"course.answers names {slug!r}, which has no lessons/{slug}.qmd",
            )
    for slug in course.service.deadlines:
        if slug not in course.lessons:
            raise SourceError(
                CONFIG,
                _line_after(root / CONFIG, "deadlines:", f"{slug}:"),
                f"course.deadlines names {slug!r}, which has no lessons/{slug}.qmd",
            )
    solutions = root / "solutions"
    if solutions.is_dir():
        for folder in sorted(p for p in solutions.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            if folder.name not in course.lessons:
                raise SourceError(
                    f"solutions/{folder.name}",
                    None,
                    f"no matching lesson: expected lessons/{folder.name}.qmd; rename or remove the folder",
                )
    return course


def load_service_settings(root: Path) -> ServiceSettings:
    """Read the service keys of the ``course:`` block (all optional); errors carry ``_quarto.yml:line``."""
    path = root / CONFIG
    block = load_yaml(path.read_text(encoding="utf-8"), CONFIG)["course"]

    def fail(key: str, problem: str) -> SourceError:
        return SourceError(CONFIG, _line_of(path, f"{key}:") or _line_of(path, "course:"), problem)

    url = block.get("service_url")
    if url is not None and (not isinstance(url, str) or not re.match(r"https?://[^\s\"'<>]+$", url)):
        raise fail("service_url", f"course.service_url must be an http(s) URL, got {url!r}")
    attempts = block.get("attempts_per_day", ServiceSettings.attempts_per_day)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 1000:
        raise fail(
            "attempts_per_day", f"course.attempts_per_day must be a whole number from 1 to 1000, got {attempts!r}"
        )
    policy, per_day = _late_policy(block.get("late_policy", "none"), fail)
    deadlines: dict[str, datetime] = {}
    raw = block.get("deadlines") or {}
    if not isinstance(raw, dict):
        raise fail("deadlines", "course.deadlines must map lessonNN to a date and time, e.g. 2026-12-01T23:59:00+08:00")
    for slug, value in raw.items():
        when = _deadline(value)
        if when is None:
            raise SourceError(
                CONFIG,
                _line_after(path, "deadlines:", f"{slug}:"),
                f"course.deadlines.{slug} must be a date and time with a UTC offset, e.g. 2026-12-01T23:59:00+08:00",
            )
        deadlines[str(slug)] = when
    gradebook = block.get("gradebook", "best")
    if gradebook not in ("best", "latest"):
        raise fail("gradebook", f"course.gradebook must be 'best' or 'latest', got {gradebook!r}")
    return ServiceSettings(url, attempts, policy, per_day, deadlines, gradebook)


def _late_policy(value: Any, fail: Any) -> tuple[str, float]:
    """``none``, ``lock``, or ``{penalty_per_day: N}``."""
    if value in ("none", "lock"):
        return str(value), 0.0
    if isinstance(value, dict) and set(value) == {"penalty_per_day"}:
        points = value["penalty_per_day"]
        if not isinstance(points, bool) and isinstance(points, (int, float)) and 0 < points <= 10:
            return "penalty", float(points)
    raise fail(
        "late_policy",
        f"course.late_policy must be none, lock or {{penalty_per_day: N}} with 0 < N <= 10, got {value!r}",
    )


def _deadline(value: Any) -> datetime | None:
    """A timezone-aware deadline from YAML (a timestamp or an ISO 8601 string with an offset)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    return value


def _line_after(path: Path, section: str, needle: str) -> int | None:
    """The line of key ``needle`` after the line of key ``section`` (a lesson's entry under
    ``deadlines:``, not the same slug under ``answers:``)."""
    start = _line_of(path, section) or 0
    lines = path.read_text(encoding="utf-8").splitlines()
    pattern = re.compile(rf"^\s*{re.escape(needle)}")
    return next((i for i in range(start + 1, len(lines) + 1) if pattern.match(lines[i - 1])), start or None)


def _line_of(path: Path, needle: str) -> int | None:
    """The first line holding ``needle`` as a YAML key, for error messages."""
    pattern = re.compile(rf"^\s*{re.escape(needle)}")
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if pattern.match(line):
            return i
    return None

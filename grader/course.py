"""The course as a whole: settings from ``_quarto.yml`` and every lesson under ``lessons/``.

Loading the course validates the cross-file rules too: each ``solutions/lessonNN/`` folder and each
answer-release entry must name a lesson that exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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


@dataclass
class Course:
    root: Path
    pass_mark: float
    releases: dict[str, str]  # slug -> hidden | released
    limits: Limits
    lessons: dict[str, Lesson] = field(default_factory=dict)
    roster_file: str | None = None  # course.roster, relative to the root
    id_patterns: list[re.Pattern[str]] = field(default_factory=list)

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


def _line_of(path: Path, needle: str) -> int | None:
    """The first line holding ``needle`` as a YAML key, for error messages."""
    pattern = re.compile(rf"^\s*{re.escape(needle)}")
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if pattern.match(line):
            return i
    return None

"""Who submitted what: the class roster, and the student id read from a submission's path.

Students all download ``lesson04.ipynb``, so a batch cannot be keyed by file name. An LMS bulk
download puts the student in the path instead: a folder per student, a ``<id>-lesson04.ipynb`` name,
or the naming schemes of Canvas and Moodle. ``identify`` tries the course's patterns in order on the
last two parts of the path and looks the result up in ``roster.csv``.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SourceError
from .text import one_line

# Each pattern is searched in "parent/name" (the file's folder and its name). A pattern captures
# either ``student`` (an id) or ``name`` (a full name, looked up in the roster's name column).
DEFAULT_ID_PATTERNS: tuple[str, ...] = (
    # Canvas: loginname_[late_]<canvas user id>_<attachment id>_<original name>
    r"(?:^|/)[a-z0-9-]+_(?:late_)?(?P<student>\d+)_\d+_[^/]*\.ipynb$",
    # Moodle: "Full Name_<participant>_assignsubmission_file_" as a folder or as a file-name prefix
    r"(?:^|/)(?P<name>[^/_]+)_\d+_assignsubmission_file_",
    # <id>-lesson04.ipynb or <id>_lesson04.ipynb
    r"(?:^|/)(?P<student>[A-Za-z0-9.]+)[-_]lesson\d{2}(?: ?\(\d+\))?\.ipynb$",
    # <id>/lesson04.ipynb: one folder per student (a browser may add " (1)")
    r"(?:^|/)(?P<student>[^/]+)/lesson\d{2}(?: ?\(\d+\))?\.ipynb$",
)


@dataclass(frozen=True)
class Student:
    id: str
    name: str
    email: str = ""


@dataclass
class Roster:
    path: str  # as shown in messages, relative to the course root
    students: dict[str, Student] = field(default_factory=dict)

    def by_name(self, name: str) -> Student | None:
        found = [s for s in self.students.values() if s.name == name]
        return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Identity:
    """The student a submission belongs to; ``problem`` says why it could not be settled."""

    student: str  # '' when unknown
    name: str
    problem: str = ""  # for the instructor: no id in the path, not on the roster


def load_roster(path: Path, display: str) -> Roster:
    """Read ``roster.csv`` (columns ``student``, ``name``, optional ``email``); errors name the line."""
    if not path.is_file():
        raise SourceError(display, None, "roster file not found; create it with columns student,name[,email]")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(display, None, f"not UTF-8 text ({exc.reason}); save the roster as UTF-8 CSV") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise SourceError(display, 1, "empty roster: the first line must be the header student,name[,email]")
    header = [h.strip().lower() for h in rows[0]]
    if "student" not in header or "name" not in header:
        raise SourceError(
            display, 1, f"the header must name the columns student and name (email optional), got {rows[0]}"
        )
    unknown = [h for h in header if h not in ("student", "name", "email")]
    if unknown:
        raise SourceError(display, 1, f"unknown column(s) {unknown}; use student, name, email")
    roster = Roster(display)
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise SourceError(display, line, f"expected {len(header)} fields ({','.join(header)}), got {len(row)}")
        values = dict(zip(header, (cell.strip() for cell in row)))
        sid = values["student"]
        if not sid or not re.fullmatch(r"[\w.@-]{1,64}", sid):
            raise SourceError(display, line, f"student id {sid!r} must be 1-64 letters, digits, '.', '@', '_' or '-'")
        if sid in roster.students:
            raise SourceError(display, line, f"duplicate student id {sid!r}")
        roster.students[sid] = Student(sid, values["name"], values.get("email", ""))
    return roster


def compile_patterns(patterns: list[str], display: str, line: int | None) -> list[re.Pattern[str]]:
    """Compile the course's id patterns; each must capture ``student`` or ``name``."""
    compiled = []
    for raw in patterns:
        try:
            pattern = re.compile(raw)
        except re.error as exc:
            raise SourceError(display, line, f"invalid id pattern {raw!r}: {exc}") from None
        if not {"student", "name"} & set(pattern.groupindex):
            raise SourceError(display, line, f"id pattern {raw!r} must capture (?P<student>...) or (?P<name>...)")
        compiled.append(pattern)
    return compiled


def identify(path: Path, patterns: list[re.Pattern[str]], roster: Roster | None) -> Identity:
    """The student of a submission, from its path and the roster."""
    where = f"{path.parent.name}/{path.name}"
    for pattern in patterns:
        m = pattern.search(where)
        if m is None:
            continue
        groups = m.groupdict()
        if groups.get("student"):
            sid = groups["student"]
            if roster is None:
                return Identity(sid, "")
            if sid in roster.students:
                return Identity(sid, roster.students[sid].name)
            return Identity(sid, "", f"student {one_line(sid, 40)!r} is not on the roster ({roster.path})")
        if groups.get("name"):
            found = roster.by_name(groups["name"]) if roster is not None else None
            if found is not None:
                return Identity(found.id, found.name)
            return Identity("", groups["name"], f"no single roster entry named {one_line(groups['name'], 40)!r}")
    return Identity("", "", "no student id in the path (see course.id_patterns in docs/grading.md)")

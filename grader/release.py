"""Release or hide a lesson's answers by editing ``course.answers`` in ``_quarto.yml``.

The file is edited with ruamel.yaml's round-trip mode, so comments, key order and layout survive.
"""

from __future__ import annotations

from typing import Any

from .course import CONFIG, Course
from .errors import SourceError
from .yamlio import round_trip


def _insert_in_order(answers: Any, slug: str, state: str) -> None:
    """Add a lesson's entry in lesson order, keeping every comment where it was.

    ruamel attaches the comment that precedes the next key of the parent mapping (``limits:``) to the
    last entry of ``answers``; a new last entry takes that comment over, so it stays above ``limits:``.
    """
    keys = list(answers)
    pos = next((i for i, k in enumerate(keys) if str(k) > slug), len(keys))
    answers.insert(pos, slug, state)
    if pos == len(keys) and keys:
        last = keys[-1]
        before = answers.ca.items.get(last)
        if before and len(before) > 2 and before[2] is not None:
            answers.ca.items[slug] = [None, None, before[2], None]
            before[2] = None


def set_release(course: Course, slug: str, released: bool) -> bool:
    """Set one lesson's release state; return True if the file changed."""
    course.lesson(slug)  # fails clearly for an unknown lesson
    path = course.root / CONFIG
    yaml = round_trip()
    with path.open(encoding="utf-8") as fh:
        data = yaml.load(fh)
    answers = data["course"].get("answers")
    if answers is None:
        raise SourceError(CONFIG, None, "course.answers is missing: add 'answers:' under 'course:'")
    state = "released" if released else "hidden"
    if answers.get(slug, "hidden") == state:
        return False
    if slug in answers:
        answers[slug] = state
    else:
        _insert_in_order(answers, slug, state)
    with path.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    course.releases[slug] = state
    return True

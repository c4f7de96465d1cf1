"""Release or hide a lesson's answers by editing ``course.answers`` in ``_quarto.yml``.

The file is edited with ruamel.yaml's round-trip mode, so comments, key order and layout survive.
"""

from __future__ import annotations

from .course import CONFIG, Course
from .errors import SourceError
from .yamlio import round_trip


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
    if answers.get(slug) == state:
        return False
    answers[slug] = state
    with path.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    course.releases[slug] = state
    return True

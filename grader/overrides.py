"""Instructor overrides: change an item's points or lift a veto for one student, with a reason.

``overrides.yml`` maps a student id (or a submission's sha256, to single out one of several
attempts) to its override. Every key, item and veto id is checked against the batch before any
grading starts, so a typo is a ``file:line`` error rather than an override that silently does nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from .errors import SourceError
from .lesson import CODE_POINTS, QUESTION_IDS, QUESTION_POINTS

SHA256 = re.compile(r"[0-9a-f]{64}")
ENTRY_KEYS = ("items", "lift_vetoes", "reason")


@dataclass(frozen=True)
class Override:
    key: str  # student id or sha256
    items: dict[str, float]
    lift_vetoes: tuple[str, ...]
    reason: str
    line: int  # where the entry starts in the overrides file


def load_overrides(path: Path) -> dict[str, Override]:
    """Read and check the shape of an overrides file; errors carry ``file:line``."""
    display = str(path)
    if not path.is_file():
        raise SourceError(display, None, "overrides file not found")
    try:
        data = YAML(typ="rt").load(path.read_text(encoding="utf-8"))
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SourceError(display, mark.line + 1 if mark else None, f"invalid YAML: {exc.problem}") from None
    except (YAMLError, UnicodeDecodeError) as exc:
        raise SourceError(display, None, f"cannot read: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SourceError(display, 1, "overrides must map a student id (or a sha256) to its override")
    out: dict[str, Override] = {}
    for key, entry in data.items():
        line = _line(data, key, 1)
        name = str(key)
        if not isinstance(entry, dict) or not isinstance(entry.get("reason"), str) or not entry["reason"].strip():
            raise SourceError(display, line, f"override for {name!r} needs a non-empty 'reason'")
        unknown = sorted(set(map(str, entry)) - set(ENTRY_KEYS))
        if unknown:
            raise SourceError(
                display, line, f"override for {name!r} has unknown key(s) {unknown}; use {', '.join(ENTRY_KEYS)}"
            )
        items: dict[str, float] = {}
        for item_id, points in (entry.get("items") or {}).items():
            limit = CODE_POINTS if item_id == "code" else QUESTION_POINTS if item_id in QUESTION_IDS else None
            at = _line(entry.get("items"), item_id, line)
            if limit is None:
                raise SourceError(
                    display, at, f"override for {name!r}: unknown item {item_id!r}; use code, q1, q2 or q3"
                )
            if isinstance(points, bool) or not isinstance(points, (int, float)) or not 0 <= points <= limit:
                raise SourceError(display, at, f"override for {name!r}: {item_id} must be a number from 0 to {limit}")
            items[str(item_id)] = float(points)
        lifts = entry.get("lift_vetoes") or []
        if not isinstance(lifts, list) or not all(isinstance(v, str) for v in lifts):
            raise SourceError(display, line, f"override for {name!r}: lift_vetoes must be a list of veto ids")
        out[name] = Override(name, items, tuple(lifts), entry["reason"].strip(), line)
    return out


def _line(mapping: Any, key: Any, default: int) -> int:
    try:
        return int(mapping.lc.key(key)[0]) + 1
    except (AttributeError, KeyError, TypeError):
        return default


def check_targets(
    overrides: dict[str, Override], display: str, students: set[str], digests: set[str], veto_ids: set[str]
) -> None:
    """Every key names a known student or a submission of the batch; every veto id exists."""
    for o in overrides.values():
        if o.key not in students and o.key not in digests:
            what = (
                "no submission in this batch has this sha256" if SHA256.fullmatch(o.key) else "not a known student id"
            )
            raise SourceError(
                display, o.line, f"override key {o.key!r}: {what}; keys are student ids (roster or batch) or a sha256"
            )
        for veto in o.lift_vetoes:
            if veto not in veto_ids:
                known = ", ".join(sorted(veto_ids)) or "none"
                raise SourceError(display, o.line, f"override for {o.key!r}: unknown veto id {veto!r}; known: {known}")


def apply_override(result: dict[str, Any], override: Override, pass_mark: float) -> None:
    """Apply one override to a graded result and recompute the total and the verdict."""
    for item_id, points in override.items.items():
        item = next(i for i in result["items"] if i["id"] == item_id)
        result["overrides"].append({"target": item_id, "from": item["points"], "to": points, "reason": override.reason})
        item["points"] = points
        item["messages"].append(f"教师调整了本项得分：{override.reason}")
    for veto_id in override.lift_vetoes:
        kept = [v for v in result["vetoes"] if v["id"] != veto_id]
        if len(kept) != len(result["vetoes"]):
            result["overrides"].append(
                {"target": f"veto:{veto_id}", "from": "vetoed", "to": "lifted", "reason": override.reason}
            )
        result["vetoes"] = kept
    result["total"] = round(sum(i["points"] for i in result["items"]), 2)
    result["passed"] = result["total"] >= pass_mark and not result["vetoes"]

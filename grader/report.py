"""Present results: Chinese feedback (Markdown and HTML), a gradebook CSV, and a terminal table.

HTML is rendered from the Markdown by markdown-it-py with raw HTML disabled, so anything a student
wrote (``<script>`` included) comes out escaped.
"""

from __future__ import annotations

import csv
import io
import os
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from .text import csv_cell, one_line

ITEM_NAMES = {"code": "代码填空", "q1": "问题 1", "q2": "问题 2", "q3": "问题 3"}
_MD = MarkdownIt("commonmark", {"html": False})


def _md_escape(text: str) -> str:
    """Keep student text literal inside Markdown: no markup, no raw HTML, no line breaks."""
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", text)


def feedback_markdown(result: dict[str, Any]) -> str:
    verdict = "通过" if result["passed"] else "未通过"
    who = " ".join(str(x) for x in (result.get("student"), result.get("name")) if x) or str(result.get("file", ""))
    lines = [
        f"# {result.get('lesson') or '未知课次'} 评分反馈：{_md_escape(who)}",
        "",
        f"**总分 {result['total']:g} / {result['max']:g}，{verdict}**（通过线 {result.get('pass_mark', 8):g} 分且没有一票否决项）",
        "",
    ]
    for err in result.get("errors", []):
        lines.append(f"> {_md_escape(err)}")
    if result.get("errors"):
        lines.append("")
    for item in result["items"]:
        lines += [f"## {ITEM_NAMES.get(item['id'], item['id'])}：{item['points']:g} / {item['max']:g}", ""]
        lines += [f"- {_md_escape(m)}" for m in item.get("messages", [])]
        lines.append("")
    if result.get("vetoes"):
        lines += ["## 一票否决", "", "以下句子陈述了本课列出的典型误解，因此本次提交判为未通过：", ""]
        for v in result["vetoes"]:
            lines.append(
                f"- {ITEM_NAMES.get(v['question'], v['question'])}：「{_md_escape(v['evidence'])}」——{_md_escape(v['message'])}"
            )
        lines.append("")
    for o in result.get("overrides", []):
        lines.append(f"> 教师调整：{_md_escape(str(o['target']))}（{_md_escape(str(o['reason']))}）")
    return "\n".join(lines).rstrip() + "\n"


def feedback_html(result: dict[str, Any]) -> str:
    body = _MD.render(feedback_markdown(result))
    return (
        '<!doctype html>\n<html lang="zh">\n<head><meta charset="utf-8"><title>评分反馈</title></head>\n'
        f"<body>\n{body}</body>\n</html>\n"
    )


def report_names(results: list[dict[str, Any]]) -> list[str]:
    """A file stem per result: the student id, with the sha256 prefix when a student has several files."""
    stems = []
    for i, r in enumerate(results, start=1):
        base = r.get("student") or "unknown-" + (Path(str(r.get("file") or f"submission-{i}")).stem)
        stems.append(re.sub(r"[^\w.-]+", "_", base)[:80].lstrip(".") or f"submission-{i}")
    counts = Counter(stems)
    return [
        f"{s}-{(r.get('sha256') or f'{i:04d}')[:12]}" if counts[s] > 1 else s
        for i, (s, r) in enumerate(zip(stems, results))
    ]


MANIFEST = ".course-reports"


def write_reports(results: list[dict[str, Any]], folder: Path) -> list[Path]:
    """Write each student's feedback (Markdown and HTML), atomically; remove what the last run left.

    Only files listed in the folder's manifest (written by an earlier run) are ever removed, so a
    folder that also holds other files keeps them.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for stem, result in zip(report_names(results), results):
        for suffix, text in ((".md", feedback_markdown(result)), (".html", feedback_html(result))):
            written.append(_write_atomic(folder / f"{stem}{suffix}", text))
    manifest = folder / MANIFEST
    previous = manifest.read_text(encoding="utf-8").splitlines() if manifest.is_file() else []
    keep = {p.name for p in written}
    for name in previous:
        if name not in keep and "/" not in name and name not in (".", "..", MANIFEST):
            (folder / name).unlink(missing_ok=True)
    _write_atomic(manifest, "".join(f"{p.name}\n" for p in written))
    return written


def _write_atomic(path: Path, text: str, encoding: str = "utf-8") -> Path:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding=encoding)
    os.replace(tmp, path)
    return path


CSV_COLUMNS = [
    "student", "name", "file", "sha256", "lesson", "code", "q1", "q2", "q3", "total", "passed",
    "vetoes", "needs_review", "errors", "overridden", "flags",
]  # fmt: skip


def gradebook_csv(results: list[dict[str, Any]]) -> str:
    """The gradebook as CSV text. Written with a BOM (``write_csv``) so that spreadsheets read UTF-8."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in results:
        points = {i["id"]: i["points"] for i in r["items"]}
        cells = [
            r.get("student", ""), r.get("name", ""), r.get("file", ""), r.get("sha256", ""), r.get("lesson") or "",
            *(f"{points.get(k, 0):g}" for k in ("code", "q1", "q2", "q3")),
            f"{r['total']:g}", "yes" if r["passed"] else "no", ";".join(v["id"] for v in r["vetoes"]),
            ";".join(v["id"] for v in r["vetoes"] if v.get("needs_review")), " | ".join(r.get("errors", [])), "yes" if r.get("overrides") else "no", " | ".join(r.get("flags", [])),
        ]  # fmt: skip
        writer.writerow([csv_cell(str(c)) for c in cells])
    return out.getvalue()


def write_csv(results: list[dict[str, Any]], path: Path) -> None:
    _write_atomic(path, gradebook_csv(results), encoding="utf-8-sig")


def table(results: list[dict[str, Any]]) -> str:
    """A results table for the terminal, aligned for Chinese text; every cell on one line."""
    rows = [["student", "name", "lesson", "code", "q1", "q2", "q3", "total", "passed", "vetoes / errors / file"]]
    for r in results:
        p = {i["id"]: i["points"] for i in r["items"]}
        note = ", ".join(v["id"] + (" (review)" if v.get("needs_review") else "") for v in r["vetoes"]) or (
            r["errors"][0] if r.get("errors") else str(r.get("file", ""))
        )
        cells = [
            str(r.get("student") or "?"), str(r.get("name") or ""), str(r.get("lesson") or "?"),
            *(f"{p.get(k, 0):g}" for k in ("code", "q1", "q2", "q3")),
            f"{r['total']:g}/{r['max']:g}", "PASS" if r["passed"] else "fail", note,
        ]  # fmt: skip
        rows.append([one_line(c, 24) for c in cells[:-1]] + [one_line(cells[-1], 70)])
    widths = [max(_width(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for n, row in enumerate(rows):
        cells = [c + " " * (w - _width(c)) for c, w in zip(row, widths)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 22)
    return "\n".join(lines)


def _width(text: str) -> int:
    """Terminal columns: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 0 if unicodedata.combining(ch) else 1 for ch in text)

"""Present results: Chinese feedback (Markdown and HTML), a gradebook CSV, and a terminal table.

HTML is rendered from the Markdown by markdown-it-py with raw HTML disabled, so anything a student
wrote (``<script>`` included) comes out escaped.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

ITEM_NAMES = {"code": "代码填空", "q1": "问题 1", "q2": "问题 2", "q3": "问题 3"}
_MD = MarkdownIt("commonmark", {"html": False})


def _md_escape(text: str) -> str:
    """Keep student text literal inside Markdown: no markup, no raw HTML, no line breaks."""
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", text)


def feedback_markdown(result: dict[str, Any]) -> str:
    verdict = "通过" if result["passed"] else "未通过"
    lines = [
        f"# {result.get('lesson') or '未知课次'} 评分反馈：{_md_escape(str(result.get('file', '')))}",
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


def report_name(result: dict[str, Any], index: int) -> str:
    stem = Path(str(result.get("file") or f"submission-{index}")).stem
    return f"{index:03d}-" + re.sub(r"[^\w.-]+", "_", stem)[:80]


def write_reports(results: list[dict[str, Any]], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, result in enumerate(results, start=1):
        name = report_name(result, i)
        (folder / f"{name}.md").write_text(feedback_markdown(result), encoding="utf-8")
        (folder / f"{name}.html").write_text(feedback_html(result), encoding="utf-8")


CSV_COLUMNS = ["file", "lesson", "code", "q1", "q2", "q3", "total", "passed", "vetoes", "errors", "overridden"]


def gradebook_csv(results: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in results:
        points = {i["id"]: i["points"] for i in r["items"]}
        writer.writerow(
            [
                r.get("file", ""),
                r.get("lesson") or "",
                *(f"{points.get(k, 0):g}" for k in ("code", "q1", "q2", "q3")),
                f"{r['total']:g}",
                "yes" if r["passed"] else "no",
                ";".join(v["id"] for v in r["vetoes"]),
                " | ".join(r.get("errors", [])),
                "yes" if r.get("overrides") else "no",
            ]
        )
    return out.getvalue()


def table(results: list[dict[str, Any]]) -> str:
    """A fixed-width results table for the terminal."""
    rows = [["submission", "lesson", "code", "q1", "q2", "q3", "total", "passed", "vetoes / errors"]]
    for r in results:
        p = {i["id"]: i["points"] for i in r["items"]}
        note = ", ".join(v["id"] for v in r["vetoes"]) or (r["errors"][0][:60] if r.get("errors") else "")
        rows.append(
            [
                str(r.get("file", "")),
                str(r.get("lesson") or "?"),
                *(f"{p.get(k, 0):g}" for k in ("code", "q1", "q2", "q3")),
                f"{r['total']:g}/{r['max']:g}",
                "PASS" if r["passed"] else "fail",
                note,
            ]
        )
    widths = [max(_width(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for n, row in enumerate(rows):
        cells = [c + " " * (w - _width(c)) for c, w in zip(row, widths)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 15)
    return "\n".join(lines)


def _width(text: str) -> int:
    return sum(2 if ord(ch) > 0x2E80 else 1 for ch in text)

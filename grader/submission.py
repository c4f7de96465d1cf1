"""Read a submitted notebook without trusting its structure.

Only two things are taken from a submission: the source of each exercise cell and the text of each
answer cell, located by the ids the build wrote. Kernelspecs, tags, outputs and any other metadata
are ignored; the graded notebook is rebuilt from the lesson source.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from .lesson import QUESTION_IDS, Lesson
from .notebook import ANSWER_PLACEHOLDER
from .text import clean, one_line


class SubmissionError(Exception):
    """The file cannot be graded at all (not a notebook, too big, another lesson). Message in Chinese."""


@dataclass
class Submission:
    lesson: str
    code: dict[str, str | None]  # exercise id -> source, None when the cell cannot be located
    answers: dict[str, str]  # question id -> answer text ('' when missing)
    notes: dict[str, list[str]] = field(default_factory=dict)  # item id -> messages for the student
    extra_code_cells: int = 0  # non-empty code cells the student added; they are not run

    def note(self, item: str, message: str) -> None:
        self.notes.setdefault(item, []).append(message)


def read_submission_file(path: Path, max_bytes: int) -> bytes:
    """Read a submission that is a regular file, and nothing else.

    A symlink could make one student's entry grade another's notebook, and a named pipe or a device
    would block the batch for ever, so both are refused before anything is read.
    """
    name = path.name
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise SubmissionError(f"{name}：无法读取文件（{exc.strerror}）。") from None
    if stat.S_ISLNK(info.st_mode):
        raise SubmissionError(f"{name}：这是一个符号链接，不是文件本身；请提交 notebook 文件本身。")
    if stat.S_ISDIR(info.st_mode):
        raise SubmissionError(f"{name}：这是一个文件夹；请提交其中的 .ipynb 文件。")
    if not stat.S_ISREG(info.st_mode):
        raise SubmissionError(f"{name}：不是普通文件（管道、设备或套接字），无法评阅；请提交 .ipynb 文件。")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise SubmissionError(f"{name}：无法读取文件（{exc.strerror}）。") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # swapped after lstat
            raise SubmissionError(f"{name}：不是普通文件，无法评阅；请提交 .ipynb 文件。")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SubmissionError(
            f"{name}：文件超过上限 {max_bytes:,} 字节。请清除输出（Kernel → Restart & Clear Output）后重新提交。"
        )
    return data


def read_notebook(data: bytes, name: str, max_bytes: int) -> nbformat.NotebookNode:
    """Parse bytes as a notebook, or raise SubmissionError with a clear reason."""
    if len(data) > max_bytes:
        raise SubmissionError(
            f"{name}：文件有 {len(data):,} 字节，超过上限 {max_bytes:,} 字节。请清除输出（Kernel → Restart & Clear Output）后重新提交。"
        )
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise SubmissionError(
            f"{name}：不是有效的 notebook（.ipynb 应为 JSON 文本：{type(exc).__name__}）。请提交从课程网站下载并填写后的 .ipynb 文件。"
        ) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list) or raw.get("nbformat") != 4:
        raise SubmissionError(
            f"{name}：不是 nbformat 4 的 notebook（缺少 cells 列表或版本不是 4）。请提交课程生成的 .ipynb 文件。"
        )
    try:
        return nbformat.from_dict(raw)
    except Exception:  # noqa: BLE001
        raise SubmissionError(f"{name}：notebook 结构无法读取。请提交课程生成的 .ipynb 文件。") from None


def lesson_of(nb: nbformat.NotebookNode) -> str | None:
    meta = nb.get("metadata", {}).get("course")
    lesson = meta.get("lesson") if isinstance(meta, dict) else None
    return lesson if isinstance(lesson, str) else None


def _course_meta(cell: Any) -> dict[str, Any]:
    meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    course = meta.get("course") if isinstance(meta, dict) else None
    return course if isinstance(course, dict) else {}


def _source(cell: Any) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        src = "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def extract(nb: nbformat.NotebookNode, lesson: Lesson, name: str) -> Submission:
    """Take each exercise's code and each answer's text from a notebook of ``lesson``."""
    found = lesson_of(nb)
    if found is None:
        raise SubmissionError(
            f"{name}：notebook 中没有课程信息（metadata.course），无法判断是哪一课。请从课程网站下载本课的 notebook 后填写。"
        )
    if found != lesson.slug:
        raise SubmissionError(
            f"{name}：这是 {one_line(found, 40)} 的 notebook，而不是 {lesson.slug} 的。请提交对应课次的 notebook。"
        )

    cells = [c for c in nb.get("cells", []) if isinstance(c, dict)]
    expected = [(ex.id, "exercise", "code") for ex in lesson.exercises] + [(q, "answer", None) for q in QUESTION_IDS]
    sub = Submission(lesson=lesson.slug, code={}, answers={})
    positions: list[int] = []
    for ident, role, cell_type in expected:
        item = "code" if role == "exercise" else ident
        claims = [i for i, c in enumerate(cells) if _course_meta(c).get("id") == ident]
        # Jupyter copies metadata when a cell is duplicated, but gives the copy a new cell id.
        if len(claims) > 1:
            originals = [i for i in claims if cells[i].get("id") == ident]
            if len(originals) != 1:
                sub.note(item, f"单元「{ident}」 出现了 {len(claims)} 次，无法确定哪一个是你的答案；请只保留一个。")
                _missing(sub, ident, role)
                continue
            sub.note(item, f"单元「{ident}」 被复制过；只评阅原来的那一个。")
            claims = originals
        if not claims:
            sub.note(
                item,
                f"找不到单元「{ident}」（可能被删除，或其元数据被修改）。请重新下载 notebook，把内容粘贴回对应单元。",
            )
            _missing(sub, ident, role)
            continue
        cell = cells[claims[0]]
        if _course_meta(cell).get("role") != role or (cell_type and cell.get("cell_type") != cell_type):
            sub.note(item, f"单元「{ident}」 的类型或角色被改动了，无法评阅。请重新下载 notebook。")
            _missing(sub, ident, role)
            continue
        positions.append(claims[0])
        text = _source(cell)
        if role == "exercise":
            sub.code[ident] = text
        else:
            sub.answers[ident] = "" if text.strip() == ANSWER_PLACEHOLDER else clean(text)
    sub.extra_code_cells = sum(
        1
        for i, c in enumerate(cells)
        if i not in positions
        and c.get("cell_type") == "code"
        and _course_meta(c).get("role") != "selfcheck"
        and _source(c).strip()
    )
    if positions != sorted(positions):
        sub.note("code", "部分单元的顺序被移动过；评分时按课程规定的顺序重新排列。")
    return sub


def _missing(sub: Submission, ident: str, role: str) -> None:
    if role == "exercise":
        sub.code[ident] = None
    else:
        sub.answers[ident] = ""

"""Generate a lesson's student notebook, and locate the student's work in a submitted one.

The notebook is the contract between the build and the grader: every cell the grader reads carries
``metadata.course = {lesson, role, id}`` and a cell id equal to that id.
"""

from __future__ import annotations

import textwrap

import nbformat
from nbformat import NotebookNode

from .lesson import QUESTION_IDS, SELFCHECK_HINTS_ID, SELFCHECK_ID, Lesson

FORMAT_VERSION = 1
ANSWER_PLACEHOLDER = "（在此作答）"
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def _meta(lesson: Lesson, role: str, ident: str) -> dict:
    return {"course": {"lesson": lesson.slug, "role": role, "id": ident}}


def build_notebook(lesson: Lesson, *, reference: bool = False) -> NotebookNode:
    """The notebook a student fills in; with ``reference=True``, filled with the reference answers.

    Cell ids are fixed (not random) so that the build is byte-for-byte deterministic.
    """
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": KERNELSPEC,
        "language_info": {"name": "python"},
        "course": {"lesson": lesson.slug, "title": lesson.title, "format": FORMAT_VERSION},
    }
    intro = (
        f"# {lesson.title}\n\n"
        "请补全代码单元中的每个 `______` 空白，并在三个问答单元中用中文作答。\n"
        "不要删除、复制或移动带标记的单元：评分程序按单元的 id 找到你的代码和答案，其余内容不计分。\n"
    )
    if lesson.selfcheck is not None:
        intro += "补全代码后运行「自查」单元：它用本页的示例检查你的函数，并指出哪个函数里还留着空白。\n"
    cells = [nbformat.v4.new_markdown_cell(intro, id="intro", metadata=_meta(lesson, "intro", "intro"))]
    for ex in lesson.exercises:
        code = lesson.solution_for(ex.id).code if reference else ex.code
        cells.append(nbformat.v4.new_code_cell(code.strip("\n"), id=ex.id, metadata=_meta(lesson, "exercise", ex.id)))
    cells += _selfcheck_cells(lesson)
    for qid in QUESTION_IDS:
        prompt_id = f"{qid}-prompt"
        cells.append(
            nbformat.v4.new_markdown_cell(
                lesson.question_text(qid), id=prompt_id, metadata=_meta(lesson, "prompt", prompt_id)
            )
        )
        answer = "\n".join(lesson.keypoints(qid)) if reference else ANSWER_PLACEHOLDER
        cells.append(nbformat.v4.new_markdown_cell(answer, id=qid, metadata=_meta(lesson, "answer", qid)))
    nb.cells = cells
    return nb


# Runs the author's asserts inside a function so that a blank reached in the student's code can be
# reported by the name of the function that holds it, rather than as a bare NameError.
_SELFCHECK_TEMPLATE = """\
# 自查：用本页「自查提示」中的示例检查上面的函数。先运行上面的代码单元，再运行本单元。
# 这里只用页面上已经给出的例子；隐藏测试会换用其他输入，所以这里通过并不代表满分。
import traceback


def _course_selfcheck():
{body}


try:
    _course_selfcheck()
except NameError as _exc:
    _frames = traceback.extract_tb(_exc.__traceback__)
    _named = [f for f in _frames if not f.name.startswith("<")]
    _where = _named[-1] if _named else _frames[-1]
    if "______" in str(_exc):
        raise NotImplementedError(
            f"请先补全函数 {{_where.name}}() 中的空白 ______（第 {{_frames[-1].lineno}} 行）"
        ) from None
    if _where.name == "_course_selfcheck":
        raise NameError(f"找不到 {{_exc.name}}：请先运行上面的练习代码单元，再运行自查。") from None
    raise
print("✓ 本页的示例全部对上了。隐藏测试还会用其他输入（包括边界情况）检查你的函数。")
"""


def selfcheck_source(code: str) -> str:
    """The notebook's self-check cell: the author's asserts, plus a clear message for a blank left."""
    return _SELFCHECK_TEMPLATE.format(body=textwrap.indent(code.strip("\n"), "    ", lambda line: bool(line.strip())))


def _selfcheck_cells(lesson: Lesson) -> list[NotebookNode]:
    """The page's self-check hints and its self-check cell, for the student to run after the exercises."""
    cells = []
    hints = lesson.selfcheck_hints
    if hints is not None:
        cells.append(
            nbformat.v4.new_markdown_cell(
                hints.body.strip("\n"),
                id=SELFCHECK_HINTS_ID,
                metadata=_meta(lesson, "selfcheck-hints", SELFCHECK_HINTS_ID),
            )
        )
    cell = lesson.selfcheck
    if cell is not None:
        cells.append(
            nbformat.v4.new_code_cell(
                selfcheck_source(cell.code), id=SELFCHECK_ID, metadata=_meta(lesson, "selfcheck", SELFCHECK_ID)
            )
        )
    return cells


def dumps(nb: NotebookNode) -> str:
    """Serialise deterministically (nbformat sorts keys); always ends with a newline."""
    return nbformat.writes(nb, version=4).rstrip("\n") + "\n"

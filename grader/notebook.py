"""Generate a lesson's student notebook, and locate the student's work in a submitted one.

The notebook is the contract between the build and the grader: every cell the grader reads carries
``metadata.course = {lesson, role, id}`` and a cell id equal to that id.
"""

from __future__ import annotations

import nbformat
from nbformat import NotebookNode

from .lesson import QUESTION_IDS, Lesson

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
    cells = [nbformat.v4.new_markdown_cell(intro, id="intro", metadata=_meta(lesson, "intro", "intro"))]
    for ex in lesson.exercises:
        code = lesson.solution_for(ex.id).code if reference else ex.code
        cells.append(nbformat.v4.new_code_cell(code.strip("\n"), id=ex.id, metadata=_meta(lesson, "exercise", ex.id)))
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


def dumps(nb: NotebookNode) -> str:
    """Serialise deterministically (nbformat sorts keys); always ends with a newline."""
    return nbformat.writes(nb, version=4).rstrip("\n") + "\n"

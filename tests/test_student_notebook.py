"""The student's notebook as a student runs it: top to bottom in Jupyter, with the self-check cell.

An untouched notebook must stop at the self-check, naming the first function that still holds a
blank; the reference notebook must run cleanly. Executed with the real ``jupyter-execute`` in a
fresh kernel (the venv's python, first on PATH, so that numpy is there).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import REPO

from grader.course import load_course
from grader.notebook import build_notebook, dumps

COURSE = load_course(REPO)
BIN = Path(sys.executable).parent


def execute(tmp_path: Path, text: str) -> tuple[int, str]:
    """Run a notebook as ``jupyter-execute`` does; return its exit code and its output without colours."""
    path = tmp_path / "lesson.ipynb"
    path.write_text(text, encoding="utf-8")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run(
        [str(BIN / "jupyter-execute"), "--timeout=60", "--output=executed", path.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return run.returncode, re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)


def first_function(code: str) -> str:
    """The first function defined in an exercise cell whose body holds a blank."""
    blocks = re.split(r"^(?=def )", code, flags=re.M)
    return next(re.match(r"def (\w+)", b).group(1) for b in blocks if b.startswith("def ") and "______" in b)  # type: ignore[union-attr]


@pytest.mark.parametrize("slug", sorted(COURSE.lessons))
def test_untouched_notebook_stops_at_the_first_unfinished_function(slug, tmp_path):
    lesson = COURSE.lessons[slug]
    assert lesson.selfcheck is not None, f"{slug} has no self-check cell"
    code, output = execute(tmp_path, dumps(build_notebook(lesson)))
    assert code != 0
    name = first_function(lesson.exercises[0].code)
    assert re.search(rf"NotImplementedError: 请先补全函数 {name}\(\) 中的空白 ______（第 \d+ 行）", output), output[
        -2000:
    ]


@pytest.mark.parametrize("slug", sorted(COURSE.lessons))
def test_reference_notebook_passes_its_self_check(slug, tmp_path):
    code, output = execute(tmp_path, dumps(build_notebook(COURSE.lessons[slug], reference=True)))
    assert code == 0, output[-2000:]
    executed = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    selfcheck = next(c for c in executed.cells if c.metadata.course.role == "selfcheck")
    printed = "".join(o.get("text", "") for o in selfcheck.outputs)
    assert printed.startswith("✓ 本页的示例全部对上了。隐藏测试还会用其他输入")


def test_self_check_reports_a_wrong_value_in_chinese(tmp_path):
    lesson = COURSE.lessons["lesson04"]
    nb = build_notebook(lesson, reference=True)
    exercise = next(c for c in nb.cells if c.metadata.course.role == "exercise")
    exercise.source = exercise.source.replace("return int(mbs * grad_acc * dp * seq)", "return mbs * grad_acc * dp")
    code, output = execute(tmp_path, dumps(nb))
    assert code != 0
    assert "AssertionError: gbs_tokens：mbs=2、grad_acc=4、dp=128、seq=4096 时应为 4194304" in output


def test_notebook_carries_nothing_from_solutions():
    """Hidden checks stay hidden: no check name or rubric id reaches any student notebook."""
    for slug, lesson in COURSE.lessons.items():
        text = dumps(build_notebook(lesson))
        checks = (REPO / "solutions" / slug / "checks.py").read_text(encoding="utf-8")
        names = re.findall(r"^@check\(.*\)\ndef (\w+)\(", checks, flags=re.M)
        assert names and not [n for n in names if n in text]

"""Shared fixtures: the repository root, a small valid lesson, and a scratch copy of the course."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

MINIMAL_LESSON = """---
title: "第 9 课：测试"
lesson: 9
prerequisites: []
playbook: ["Testing"]
---

## 本课目标

目标。

## 核心概念

概念。

## 具体演示与数值推演

演示。

## 代码填空题

```{python}
#| label: ex-add
#| course_role: exercise
#| eval: false
def add(a, b):
    return ______
```

::: {course_role="selfcheck-hints"}
**自查提示。** `add(2, 3)` 应为 5。
:::

```{python}
#| label: selfcheck
#| course_role: selfcheck
#| eval: false
assert add(2, 3) == 5, "add：add(2, 3) 应为 5"
```

## 三个问答题

::: {#q1 course_role="question"}
问题一？
:::

::: {#q2 course_role="question"}
问题二？
:::

::: {#q3 course_role="question"}
问题三？
:::

## 检查与通过标准

4+2+2+2。

::: {.content-visible when-profile="answers" course_role="answer"}
## 参考答案

```{python}
#| label: ref-add
#| course_role: solution
#| solves: ex-add
def add(a, b):
    return a + b  # SECRET-SOLUTION-LINE
```

::: {course_role="keypoints" question="q1"}
- 要点一 SECRET-KEYPOINT
:::

::: {course_role="keypoints" question="q2"}
- 要点二
:::

::: {course_role="keypoints" question="q3"}
- 要点三
:::
:::
"""


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def lesson_text() -> str:
    return MINIMAL_LESSON


@pytest.fixture
def scratch_course(tmp_path: Path) -> Path:
    """A copy of the real course (sources only) that a test may modify freely."""
    dest = tmp_path / "course"
    dest.mkdir()
    for name in ("_quarto.yml", "_quarto-student.yml", "_quarto-answers.yml", "index.qmd"):
        shutil.copy(REPO / name, dest / name)
    shutil.copytree(REPO / "lessons", dest / "lessons", ignore=shutil.ignore_patterns("*.ipynb"))
    shutil.copytree(REPO / "solutions", dest / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout

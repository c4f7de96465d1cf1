"""`course new lessonNN`: start a lesson from files that already follow the authoring contract.

An author who starts from a blank file has to guess the sections, the cell options, the answer block,
the points and the rubric format. The scaffold writes all three files of a lesson so that they load
cleanly from the first minute (the lesson parses, the checks add up to 4, the rubric validates), with
every part still to be written marked ``TODO(course)``. ``todo_markers`` lists those marks, so
``course check`` can say what is left instead of grading placeholders.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import SourceError

TODO = "TODO(course)"
_SLUG = re.compile(r"^lesson(\d{2})$")
_TITLE_PREFIX = re.compile(r"^第\s*\d+\s*课")


def lesson_files(slug: str) -> list[str]:
    """The three files of a lesson, relative to the course root, in the order they are written."""
    return [f"lessons/{slug}.qmd", f"solutions/{slug}/checks.py", f"solutions/{slug}/rubric.yml"]


def _number(slug: str) -> int:
    match = _SLUG.match(slug)
    if not match or int(match.group(1)) == 0:
        raise SourceError(slug, None, "a lesson is named 'lesson' plus two digits from 01, e.g. lesson07")
    return int(match.group(1))


def new_lesson(root: Path, slug: str, title: str) -> list[Path]:
    """Write the lesson source, its hidden tests and its rubric; return the paths written.

    Refuses (SourceError) a malformed slug, an empty or multi-line title, a folder that is not a
    course root, and any existing file: a scaffold must never overwrite an author's work.
    """
    number = _number(slug)
    title = title.strip()
    if not title or "\n" in title:
        raise SourceError(slug, None, "the title must be one non-empty line, e.g. --title '序列并行 SP'")
    if not (root / "_quarto.yml").is_file():
        raise SourceError(root / "_quarto.yml", None, "not found: run the command from the course root")
    if not _TITLE_PREFIX.match(title):
        title = f"第 {number} 课：{title}"  # the convention of every lesson's page title
    names = lesson_files(slug)
    existing = [name for name in names if (root / name).exists()]
    if existing:
        raise SourceError(existing[0], None, "already exists; course new never overwrites a file (remove it first)")
    texts = [_lesson_text(number, slug, title), _CHECKS.format(slug=slug, title=title), _rubric_text(title)]
    written = []
    for name, text in zip(names, texts):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def todo_markers(root: Path, slug: str) -> list[str]:
    """One ``path:line: TODO(course): ...`` per marker left in the lesson's three files."""
    _number(slug)
    found = []
    for name in lesson_files(slug):
        path = root / name
        if not path.is_file():
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            at = line.find(TODO)
            if at >= 0:
                found.append(f"{name}:{i}: {_marker_text(line[at:])}")
    return found


def _marker_text(text: str) -> str:
    """The marker and what it asks for, without the comment or string syntax around it."""
    text = text.strip()
    text = re.sub(r"\s*-->\s*$", "", text)
    return text.rstrip("\"'],").rstrip()


def _lesson_text(number: int, slug: str, title: str) -> str:
    return (
        _LESSON.replace("@TITLE@", json.dumps(title, ensure_ascii=False))
        .replace("@NUMBER@", str(number))
        .replace("@SLUG@", slug)
    )


# The lesson source. The placeholder exercise (scale a list) is complete enough to run end to end:
# the reference solves it, the self-check passes on it, and the key points match the rubric below.
_LESSON = """\
---
title: @TITLE@
lesson: @NUMBER@
prerequisites: []
playbook: ["TODO(course): 本课对应的 playbook 章节名"]
---

## 本课目标

TODO(course): 列出学完本课应当能够做到的三到五件事。

## 核心概念

TODO(course): 讲清本课的概念、公式和它们成立的条件。

## 具体演示与数值推演

TODO(course): 用具体的数字完整推演一到两个例子；练习的自查会用到这里的数。

## 代码填空题

[下载本课练习 notebook](@SLUG@.ipynb)

TODO(course): 说明要补全哪些函数、共几处空白。

```{python}
#| label: ex-@SLUG@
#| course_role: exercise
#| eval: false
# TODO(course): 换成本课的练习函数；每个空白写作 ______，且只出现在函数体内。
def scale(values, factor):
    \"\"\"把列表中的每个数乘以 factor，返回新的列表（占位示例）。\"\"\"
    out = []
    for v in values:
        out.append(______)
    return ______
```

::: {course_role="selfcheck-hints"}
**自查提示。** TODO(course): 列出本页已经算过的例子，学生补全后可以对照。

- `scale([1, 2], 3)` 应为 `[3, 6]`。
:::

```{python}
#| label: selfcheck
#| course_role: selfcheck
#| eval: false
# TODO(course): 把上面自查提示中的例子写成断言；只用本页已经给出的数，浮点数用容差比较。
assert scale([1, 2], 3) == [3, 6], "scale：scale([1, 2], 3) 应为 [3, 6]"
```

## 三个问答题

::: {#q1 course_role="question"}
**问题 1.** TODO(course): 第一个问题。
:::

::: {#q2 course_role="question"}
**问题 2.** TODO(course): 第二个问题。
:::

::: {#q3 course_role="question"}
**问题 3.** TODO(course): 第三个问题。
:::

## 检查与通过标准

本课满分 10 分：

- **代码填空：4 分。** 由隐藏测试评分，按通过的测试给部分分。
- **三个问答题：每题 2 分，共 6 分。** 按参考要点评分，要点讲清楚即可，不要求与参考答案措辞一致。
- **通过线：8 / 10。**

**一票否决项。** 回答中只要把下列任一错误观点当作正确结论陈述，无论得分多少，本课都判为不通过：

1. TODO(course): 列出至少三个典型误解，与 rubric.yml 中的 vetoes 一一对应。

为了反驳而提到这些观点是完全可以的。

::: {.content-visible when-profile="answers" course_role="answer"}
## 参考答案

TODO(course): 说明参考实现的关键一步。

```{python}
#| label: ref-@SLUG@
#| course_role: solution
#| solves: ex-@SLUG@
def scale(values, factor):
    \"\"\"把列表中的每个数乘以 factor，返回新的列表（占位示例）。\"\"\"
    out = []
    for v in values:
        out.append(v * factor)
    return out
```

TODO(course): 写出每个问题的参考要点（满分答案应当说到的几点），rubric.yml 要能认出每一条。

::: {course_role="keypoints" question="q1"}
- 占位要点一。
- 占位要点二。
:::

::: {course_role="keypoints" question="q2"}
- 占位要点一。
- 占位要点二。
:::

::: {course_role="keypoints" question="q3"}
- 占位要点一。
- 占位要点二。
:::
:::
"""

_CHECKS = '''\
"""Hidden tests for {slug} ({title}). Points add up to 4. Format: docs/checks.md."""

from grader.checks import check, close

# TODO(course): 换成本课的隐藏测试：至少 6 个、合计 4 分，覆盖边界情况，输入尽量用 rng 在评分时生成。


@check(points=1)
def scale_example(student):
    """scale：页面上的示例"""
    return close(student.call("scale", [1, 2], 3), [3, 6])


@check(points=0.5)
def scale_empty(student):
    """scale：空列表"""
    return close(student.call("scale", [], 5), [])


@check(points=0.5)
def scale_zero(student):
    """scale：乘以 0"""
    return close(student.call("scale", [4, -2], 0), [0, 0])


@check(points=0.5)
def scale_negative(student):
    """scale：负数因子"""
    return close(student.call("scale", [1, 2, 3], -1), [-1, -2, -3])


@check(points=0.5)
def scale_float(student):
    """scale：浮点数"""
    return close(student.call("scale", [0.5, 1.5], 0.1), [0.05, 0.15])


@check(points=1)
def scale_random(student, rng, ref):
    """scale：随机生成的输入"""
    values = [rng.randint(-100, 100) for _ in range(rng.randint(1, 20))]
    factor = rng.randint(-9, 9)
    return close(student.call("scale", values, factor), ref.scale(values, factor))
'''

_RUBRIC_HEAD = """\
# Short-answer rubric for {title}. Format: docs/rubric.md.
# TODO(course): 为每个问题写出与参考要点对应的 key points（points 合计 2；says 说明要点，hint 提示方向但不给出答案）。

lexicon:
  placeholder: ['占位']

questions:
"""

_KEY_POINT = """\
      - id: {q}-point-{n}
        points: 1
        says: 占位要点{cn}
        hint: 想一想第{cn}个要点
        any:
          - head: ['@placeholder']
            with: [['要点{cn}']]
"""

_VETOES_HEAD = """
# TODO(course): 为本课的典型误解写出至少 3 个 vetoes，每个至少 5 个应当触发（fire）和 5 个不应触发（keep）的例句。
vetoes:
"""

_VETO = """\
  - id: misconception-{n}
    says: 占位误解{name}
    explain: 占位：说明这个观点为什么是错的
    any:
      - head: ['误解{name}']
    examples:
      fire: ['误解{name}成立。', '我认为误解{name}是对的。', '显然误解{name}。', '结论就是误解{name}。', '误解{name}总是成立。']
      keep: ['这句话没有问题。', '梯度要先求和。', {others}, '本课讲数据并行。']
"""


def _rubric_text(title: str) -> str:
    """A rubric that validates (two key points per question, three vetoes with five examples each)."""
    parts = [_RUBRIC_HEAD.format(title=title)]
    for q in ("q1", "q2", "q3"):
        parts.append(f"  {q}:\n    key_points:\n")
        parts.extend(_KEY_POINT.format(q=q, n=n, cn=cn) for n, cn in ((1, "一"), (2, "二")))
    parts.append(_VETOES_HEAD)
    names = ("甲", "乙", "丙")
    for n, name in enumerate(names, start=1):
        others = ", ".join(f"'误解{other}成立。'" for other in names if other != name)
        parts.append(_VETO.format(n=n, name=name, others=others))
    return "".join(parts)

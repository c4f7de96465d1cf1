"""No veto may fail what the lesson itself teaches: the lesson/rubric consistency check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO, lesson_rubric

from grader.consistency import lesson_claims, self_contradictions
from grader.course import load_course
from grader.errors import SourceError
from grader.lesson import QUESTION_IDS, parse_lesson
from grader.rubric import load_rubric, score_answer

COURSE = load_course(REPO)
SLUGS = sorted(COURSE.lessons)


def test_every_lesson_of_the_course_is_checked():
    """The per-lesson tests below (and the keep-example test) run for every lesson."""
    assert {f"lesson{n:02d}" for n in range(1, 13)} <= set(SLUGS)


@pytest.mark.parametrize("slug", SLUGS)
def test_no_veto_fires_on_the_lessons_own_text(slug):
    assert self_contradictions(lesson_rubric(COURSE, slug), COURSE.lessons[slug]) == []


# Correct sentences that an independent fact check found vetoed (issue 14), several from the lessons.
FACT_CHECK = [
    ("lesson01", "mixed-precision-halves", "混合精度下，bf16 参数只需要 2 字节，梯度也只需要 2 字节。"),
    (
        "lesson01",
        "mixed-precision-halves",
        "混合精度让参数和梯度的显存减半，但是多出 4 字节的 fp32 主参数，所以总量不变。",
    ),
    ("lesson01", "flops-two-nd", "每个 token 的前向需要 2N FLOPs，训练需要 6N FLOPs。"),
    ("lesson01", "flops-two-nd", "反向要做两次矩阵乘，每一次的计算量都和前向相同。"),
    ("lesson03", "allgather-sums", "环形 all-reduce 的第二阶段就是一次 all-gather。"),
    ("lesson03", "ring-time-flat", "p = 8、M = 1 GB 时，环形耗时几乎只取决于 M/β，延迟只占 0.8%。"),
    ("lesson04", "dp-cuts-memory", "DP 把数据分到各张卡上，但每张卡都保存完整的参数。"),
    ("lesson04", "dp-cuts-memory", "即使把状态切到 8 张卡上，每卡也要 140 GB，仍然放不下。"),
    ("lesson04", "nosync-differs", "两种做法的梯度完全一样，区别只是通信次数不同。"),
    ("lesson05", "zero3-same-comm", "FSDP 的 SHARD_GRAD_OP 模式的通信量和 DDP 相同。"),
    ("lesson05", "zero-shards-activations", "ZeRO 只切分模型状态，激活显存不会因此减少。"),
    (
        "lesson06",
        "mlp-two-allreduces",
        "行并行的输出是部分和，GeLU 是非线性的，所以在 GeLU 之前必须先 all-reduce。",
    ),
    (
        "lesson06",
        "col-needs-allreduce",
        "把 A 按行切、B 按列切的话，前向需要两次通信：GeLU 之前一次 all-reduce，最后一次 all-gather。",
    ),
    ("lesson06", "tp-comm-hidden", "反向时，TP 的 all-reduce 可以与权重梯度的计算重叠。"),
]


@pytest.mark.parametrize("slug, veto_id, text", FACT_CHECK)
def test_fact_checked_sentences_are_keep_examples_and_pass(slug, veto_id, text):
    rubric = lesson_rubric(COURSE, slug)
    veto = next(v for v in rubric.vetoes if v.id == veto_id)
    assert text in veto.keep
    fired = {v.id for q in QUESTION_IDS for v, _ in score_answer(rubric, q, text).vetoes}
    assert fired == set()


def test_reversed_mlp_sentence_still_earns_its_key_point():
    """The sentence vetoed by mistake is the one that earns q1's reversed-order key point."""
    text = "行并行的输出是部分和，GeLU 是非线性的，所以在 GeLU 之前必须先 all-reduce。"
    res = score_answer(lesson_rubric(COURSE, "lesson06"), "q1", text)
    assert res.found and res.vetoes == []


@pytest.mark.parametrize("slug", SLUGS)
def test_claims_are_plain_teaching_text(slug):
    lesson = COURSE.lessons[slug]
    claims = lesson_claims(lesson)
    lines = {line for line, _ in claims}
    excluded = {n for d in lesson.questions for n in range(d.line, d.end_line + 1)}
    excluded |= {n for c in lesson.cells for n in range(c.line, c.end_line + 1)}
    assert lines and not lines & excluded
    check = next(i for i, t in enumerate(lesson.lines, 1) if t.startswith("## 检查与通过标准"))
    answer = lesson.answer_blocks[0].line
    assert not any(check <= n < answer for n in lines)
    for _, text in claims:
        assert not re.search(r"\$|`|^:::|^[-*#|] |^\*\*|\\[a-z]+", text), text
    # every bullet of the reference answers' key points is read
    for div in (d for d in lesson.divs if d.role == "keypoints"):
        bullets = {n for n in range(div.line + 1, div.end_line) if lesson.lines[n - 1].startswith("- ")}
        assert bullets and bullets <= lines, div.attrs


# --- a scratch lesson and rubric -----------------------------------------------------------------
CLAIM = "ZeRO 把激活也切分了。"
RUBRIC = """questions:
{questions}
vetoes:
  - id: shards-activations
    says: 认为 ZeRO 会切分激活
    explain: 测试用的否决项。
    any:
      - head: ['切分']
        with: ['激活']
  - id: other
    says: 另一个误解
    explain: 另一个测试用的否决项。
    any:
      - head: ['永远不会出现的词']
"""
QUESTION = """  {qid}:
    key_points:
      - id: k-{qid}
        points: 2
        says: 要点
        hint: 提示
        any: [{{head: '要点'}}]
"""


def scratch(tmp_path: Path, lesson_text: str, extra: str = ""):
    """A lesson that states CLAIM in its prose and key points, and in every place the check skips."""
    text = lesson_text.replace(
        "概念。", f"概念。\n\n{CLAIM}\n\n有人认为{CLAIM}这是错误的。\n\n{CLAIM}\n这种说法是错的。"
    )
    text = text.replace("问题一？", f"问题一：{CLAIM}")
    text = text.replace("4+2+2+2。", f"4+2+2+2。\n\n{CLAIM}")
    text = text.replace("    return ______", f"    # {CLAIM}\n    return ______")
    text = text.replace("- 要点二", f"- {CLAIM}")
    path = tmp_path / "lesson09.qmd"
    path.write_text(text, encoding="utf-8")
    rubric_path = tmp_path / "rubric.yml"
    body = RUBRIC.format(questions="".join(QUESTION.format(qid=q) for q in QUESTION_IDS)) + extra
    rubric_path.write_text(body, encoding="utf-8")
    lesson = parse_lesson(path)
    return lesson, load_rubric(rubric_path, "solutions/lesson09/rubric.yml"), text.splitlines(), body.splitlines()


def firing_lines(lines: list[str]) -> tuple[int, int]:
    """The lines of CLAIM in the prose and in the key points (the check section's copy comes later)."""
    return lines.index(CLAIM) + 1, lines.index(f"- {CLAIM}") + 1


def test_a_veto_on_the_lessons_own_sentence_is_reported_at_its_line(tmp_path, lesson_text):
    lesson, rubric, lines, _ = scratch(tmp_path, lesson_text)
    prose, keypoint = firing_lines(lines)
    assert self_contradictions(rubric, lesson) == [
        f"lessons/lesson09.qmd:{prose}: veto shards-activations fires on the lesson's own sentence: «{CLAIM}»",
        f"lessons/lesson09.qmd:{keypoint}: veto shards-activations fires on the lesson's own sentence: «{CLAIM}»",
    ]


def test_prose_exceptions_suppress_a_firing(tmp_path, lesson_text):
    extra = (
        "prose_exceptions:\n  - veto: shards-activations\n    text: 把激活也切分\n    reason: 测试：这句故意如此。\n"
    )
    lesson, rubric, _, _ = scratch(tmp_path, lesson_text, extra)
    assert [(e.veto, e.text) for e in rubric.prose_exceptions] == [("shards-activations", "把激活也切分")]
    assert self_contradictions(rubric, lesson) == []
    # an explicit list replaces the rubric's own
    assert len(self_contradictions(rubric, lesson, [])) == 2


def test_a_stale_prose_exception_is_reported(tmp_path, lesson_text):
    extra = "prose_exceptions:\n  - veto: other\n    text: 把激活也切分\n    reason: 另一个否决项并不触发。\n"
    lesson, rubric, _, body = scratch(tmp_path, lesson_text, extra)
    line = body.index("  - veto: other") + 1
    problems = self_contradictions(rubric, lesson)
    assert len(problems) == 3
    assert problems[-1].startswith(f"solutions/lesson09/rubric.yml:{line}: prose exception for veto other")


@pytest.mark.parametrize(
    "entry, fragment",
    [
        ("  - veto: shards-activations\n    text: 切分\n", "needs 'reason:'"),
        ("  - veto: shards-activations\n    text: 切分\n    reason: '  '\n", "needs 'reason:'"),
        ("  - veto: nope\n    text: 切分\n    reason: 理由\n", "unknown veto 'nope'"),
        ("  - veto: shards-activations\n    reason: 理由\n", "needs 'text:'"),
        ("  - veto: shards-activations\n    text: 切分\n    reason: 理由\n    why: x\n", "unknown key(s) ['why']"),
    ],
)
def test_malformed_prose_exception_is_located(tmp_path, lesson_text, entry, fragment):
    with pytest.raises(SourceError) as info:
        scratch(tmp_path, lesson_text, "prose_exceptions:\n  - veto: other\n    text: x\n    reason: y\n" + entry)
    body = (tmp_path / "rubric.yml").read_text(encoding="utf-8").splitlines()
    line = len(body) - entry.count("\n") + 1
    assert str(info.value).startswith(f"solutions/lesson09/rubric.yml:{line}: ") and fragment in str(info.value)

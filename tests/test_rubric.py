"""The keyword rubric and the veto checker: every lesson's veto examples, negation and sentence status."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import REPO, lesson_rubric

from grader.course import load_course
from grader.errors import SourceError
from grader.rubric import Rubric, example_outcomes, hint_leaks, load_rubric, negated, score_answer, split_sentences

COURSE = load_course(REPO)
RUBRICS = {slug: lesson_rubric(COURSE, slug) for slug in COURSE.lessons}


def test_every_veto_has_enough_examples():
    for slug, rubric in RUBRICS.items():
        assert len(rubric.vetoes) >= 3, slug
        for v in rubric.vetoes:
            assert len(v.fire) >= 5 and len(v.keep) >= 5, (slug, v.id)


@pytest.mark.parametrize("slug", sorted(RUBRICS))
def test_veto_examples_behave_as_labelled(slug):
    wrong = [
        (v.id, kind, text) for v, kind, text, fired in example_outcomes(RUBRICS[slug]) if fired != (kind == "fire")
    ]
    assert wrong == []


def test_fired_veto_carries_sentence_and_suppressed_carry_reason():
    rubric = RUBRICS["lesson04"]
    text = "有人认为 DP 能降低每卡显存，这是错误的。但是 dp=8 时每卡只存 1/8 的参数。"
    res = score_answer(rubric, "q3", text)
    assert [(v.id, e.sentence) for v, e in res.vetoes] == [("dp-cuts-memory", "但是 dp=8 时每卡只存 1/8 的参数。")]
    res = score_answer(rubric, "q3", "有人认为 DP 能降低每卡显存，这是错误的。")
    assert res.vetoes == [] and [(v.id, why) for v, _, why in res.suppressed] == [("dp-cuts-memory", "reported")]


@pytest.mark.parametrize(
    "text, word, expected",
    [
        ("DP 并不能降低每卡显存", "降低", True),
        ("DP 能降低每卡显存", "降低", False),
        ("DP 解决不了显存问题", "解决", True),
        ("DP 不能解决模型放不下的问题", "解决", True),
        ("不是不能降低", "降低", False),
        ("区别在于 DP 降低显存", "降低", False),
        ("不仅降低了通信", "降低", False),
        ("DP 不会因为增大 dp 而减少显存", "减少", True),
        ("no_sync 会改变结果", "改变", False),
        ("it does not reduce memory", "reduce", True),
        # a negation right before 因此/所以 reaches across it; elsewhere they start a new claim
        ("ZeRO 只切分模型状态，激活显存不会因此减少", "减少", True),
        ("激活显存并没有因此减少", "减少", True),
        ("显存不够所以减少了 batch", "减少", False),
        ("不时降低", "降低", False),
    ],
)
def test_negation(text, word, expected):
    s = split_sentences(text)[0].text
    start = s.index(word)
    assert negated(s, start, start + len(word)) is expected


@pytest.mark.parametrize(
    "text, status",
    [
        ("DP 能不能降低显存？", "question"),
        ("DP 会降低显存吗", "question"),
        ("如果用 ZeRO，每卡显存会降低。", "hedged"),
        ("DP 降低显存。这种说法是错的。", "refuted"),
        ("DP 不降低显存。", "asserted"),
    ],
)
def test_sentence_status(text, status):
    assert split_sentences(text)[0].status == status


def test_text_after_refutation_earns_key_points():
    rubric = RUBRICS["lesson04"]
    text = "有人说结果会不同，这是错误的，梯度求和满足结合律，所以结果相同。"
    res = score_answer(rubric, "q2", text)
    assert "sum-is-associative" in [k.id for k, _ in res.found] and res.vetoes == []


def test_negated_key_point_earns_nothing():
    rubric = RUBRICS["lesson04"]
    assert "factor-independent-of-dp" in [k.id for k, _ in score_answer(rubric, "q2", "这个倍数与 dp 无关。").found]
    assert "factor-independent-of-dp" not in [k.id for k, _ in score_answer(rubric, "q2", "这个倍数与 dp 有关。").found]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("questions: {}\n", "question q1 needs a 'key_points:' list"),
        (
            "lexicon: {a: [x]}\nquestions:\n  q1:\n    key_points:\n      - id: k\n        points: 2\n        says: s\n        hint: h\n        any: [{head: '@nope'}]\n",
            "unknown lexicon entry '@nope'",
        ),
        (
            "questions:\n  q1:\n    key_points:\n      - id: k\n        points: 1\n        says: s\n        hint: h\n        any: [{head: x}]\n",
            "add up to 1, not 2",
        ),
        (
            "questions:\n  q1:\n    key_points:\n      - id: k\n        points: 2\n        says: s\n        hint: h\n        any: [{head: '(unclosed'}]\n",
            "invalid regular expression",
        ),
        ("questions: [\n", "invalid YAML"),
    ],
)
def test_malformed_rubric_is_located(tmp_path: Path, body, fragment):
    path = tmp_path / "rubric.yml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(SourceError) as info:
        load_rubric(path, "solutions/lesson09/rubric.yml")
    assert fragment in str(info.value) and str(info.value).startswith("solutions/lesson09/rubric.yml")


VETO_RUBRIC = """\
questions:
  q1: {key_points: [{id: k, points: 2, says: s, hint: h, any: [{head: x}]}]}
  q2: {key_points: [{id: k, points: 2, says: s, hint: h, any: [{head: x}]}]}
  q3: {key_points: [{id: k, points: 2, says: s, hint: h, any: [{head: x}]}]}
vetoes:
  - id: v
    says: 误解
    explain: 为什么错
    any: [{head: x}]
"""


@pytest.mark.parametrize(
    "tail, line, fragment",
    [
        # An unquoted example holding ": " loads as a mapping, not a sentence.
        (
            "    examples:\n      fire:\n        - 一句\n        - 说明: DP 省显存\n",
            13,
            "fire example 2 must be a sentence",
        ),
        ("    examples:\n      keep: 不是列表\n", 6, "examples 'keep' must be a list"),
        ("    examples: [a, b]\n", 6, "'examples' must map 'fire' and 'keep'"),
        # A bare string would be read one character at a time, each character a term.
        ("    unless: zero\n", 6, "'unless' must be a list of terms"),
        ("    any: [{head: x, context: two}]\n", 6, "'context' must be 0 or 1"),
    ],
)
def test_malformed_veto_is_located(tmp_path: Path, tail, line, fragment):
    body = VETO_RUBRIC.replace("    any: [{head: x}]\n", "") + tail if "any:" in tail else VETO_RUBRIC + tail
    path = tmp_path / "rubric.yml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(SourceError) as info:
        load_rubric(path, "solutions/lesson09/rubric.yml")
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"solutions/lesson09/rubric.yml:{line}:")  # the example's line, else the veto's


KEY_POINT = "      - id: {kid}\n        points: 1\n{fields}        any: [{{head: x}}]\n"
BOTH = "        says: 要点\n        hint: 提示\n"


@pytest.mark.parametrize(
    "fields, line, fragment",
    [
        ("        hint: 提示\n", 9, "key point k2: needs 'says:'"),
        ("        says: 要点\n", 9, "key point k2: needs 'hint:'"),
        ("        says: 要点\n        hint: '  '\n", 9, "key point k2: needs 'hint:'"),
        ("        says: [a]\n        hint: 提示\n", 9, "key point k2: needs 'says:'"),
    ],
)
def test_key_point_without_says_or_hint_is_located(tmp_path: Path, fields, line, fragment):
    """Students would otherwise see an internal id, or no hint at all, for a key point they missed."""
    body = "questions:\n  q1:\n    key_points:\n" + KEY_POINT.format(kid="k1", fields=BOTH)
    body += KEY_POINT.format(kid="k2", fields=fields)
    path = tmp_path / "rubric.yml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(SourceError) as info:
        load_rubric(path, "solutions/lesson09/rubric.yml")
    assert str(info.value).startswith(f"solutions/lesson09/rubric.yml:{line}: {fragment}")


def test_key_points_carry_says_and_hint():
    kp = RUBRICS["lesson04"].key_points["q3"][0]
    assert kp.id == "full-replica" and kp.says.startswith("每个 rank 都保存") and kp.hint.endswith("。")


@pytest.mark.parametrize("slug", sorted(RUBRICS))
def test_hints_do_not_give_the_key_points_away(slug):
    """A hint is shown before the answers are released: no key point's text, number or formula."""
    assert hint_leaks(RUBRICS[slug]) == []


def test_a_hint_with_a_number_is_caught():
    rubric = RUBRICS["lesson04"]  # loaded rubrics are shared (remembered by content): change a copy

    def with_hint(hint: str) -> Rubric:
        q2 = [dataclasses.replace(rubric.key_points["q2"][0], hint=hint), *rubric.key_points["q2"][1:]]
        return dataclasses.replace(rubric, key_points={**rubric.key_points, "q2": q2})

    assert any("contains a digit" in p for p in hint_leaks(with_hint("答案是 8 倍。")))
    assert any("gives away" in p for p in hint_leaks(with_hint(rubric.key_points["q2"][1].says)))
    assert hint_leaks(rubric) == []


def test_a_plain_answer_has_no_notes():
    res = score_answer(RUBRICS["lesson04"], "q2", "梯度求和满足结合律，所以结果相同。")
    assert res.notes == [] and res.as_dict()["notes"] == []


@pytest.mark.parametrize("drop", ["says", "explain"])
def test_a_veto_without_its_student_facing_text_is_an_error(tmp_path, drop):
    from grader.course import load_course

    course = load_course(REPO)
    source = (course.solutions_dir("lesson04") / "rubric.yml").read_text(encoding="utf-8")
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "- id: dp-cuts-memory")
    cut = next(i for i in range(at, len(lines)) if lines[i].strip().startswith(f"{drop}:"))
    del lines[cut]
    path = tmp_path / "rubric.yml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SourceError) as info:
        load_rubric(path, "solutions/lesson04/rubric.yml")
    assert info.value.line == at + 1 and f"needs '{drop}:'" in str(info.value)

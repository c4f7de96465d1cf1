"""The rubric against hostile and unusual text: bounded work, any str, Traditional Chinese, invisible characters.

Work is measured by counting the lines the rubric module executes (never by timing), so these
tests say the same thing on a busy machine as on an idle one.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import opencc
import pytest
from helpers import REPO, lesson_rubric

import grader.rubric as rubric_module
from grader.course import load_course
from grader.rubric import (
    MAX_ANSWER_CHARS,
    NOTE_NO_CHINESE,
    NOTE_TRUNCATED,
    AnswerResult,
    Rubric,
    normalise_mapped,
    score_answer,
)

COURSE = load_course(REPO)
RUBRICS = {slug: lesson_rubric(COURSE, slug) for slug in COURSE.lessons}
LESSON4 = RUBRICS["lesson04"]
TO_TRADITIONAL = opencc.OpenCC("s2t")
TRUNCATED = NOTE_TRUNCATED.format(limit=MAX_ANSWER_CHARS)


@contextmanager
def counted_lines() -> Iterator[list[int]]:
    """Count the lines of grader/rubric.py executed inside the block: a measure of work, not of time."""
    count = [0]
    target = rubric_module.__file__

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            count[0] += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == target else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield count
    finally:
        sys.settrace(previous)


def work(rubric: Rubric, text: str) -> int:
    with counted_lines() as count:
        for qid in ("q1", "q2", "q3"):
            score_answer(rubric, qid, text)
    return count[0]


def vetoed(rubric: Rubric, qid: str, text: str) -> list[str]:
    return [v.id for v, _ in score_answer(rubric, qid, text).vetoes]


# --- 1. bounded work ---------------------------------------------------------------------------
# Many clauses in one sentence, each with negation cues, heads of several vetoes, a reported belief
# and a refutation: the shape that made the old negation and masking passes super-linear.
ADVERSARIAL_CLAUSE = "有人认为DP并不能把每卡显存降低到1/dp不是不能，但其实梯度同步在step之前不一致，"


def test_long_answer_is_cut_and_says_so():
    text = "DP 能降低每卡显存，" * 4500  # 45 000 characters, one clause repeated
    assert len(text) >= 45_000
    res = score_answer(LESSON4, "q1", text)
    assert res.notes == [TRUNCATED]
    assert str(MAX_ANSWER_CHARS) in TRUNCATED
    assert res.as_dict()["notes"] == [TRUNCATED]
    # Nothing past the cap is read: the whole answer costs what its first MAX_ANSWER_CHARS cost
    # (give or take the lines that write the note).
    assert abs(work(LESSON4, text) - work(LESSON4, text[:MAX_ANSWER_CHARS])) <= 10


def test_text_past_the_cap_earns_nothing():
    honest = "梯度求和满足结合律，所以结果相同。"
    padded = "。" * MAX_ANSWER_CHARS + honest
    assert "sum-is-associative" in [k.id for k, _ in score_answer(LESSON4, "q2", honest).found]
    assert score_answer(LESSON4, "q2", padded).found == []


def test_an_answer_at_the_cap_gets_no_note():
    assert TRUNCATED not in score_answer(LESSON4, "q1", "梯" * MAX_ANSWER_CHARS).notes


@pytest.mark.parametrize("separator", ["", "。"])
def test_work_grows_linearly_with_an_adversarial_answer(separator):
    """Doubling a hostile answer (one long sentence, or many) at most about doubles the work."""
    unit = ADVERSARIAL_CLAUSE + separator
    long = (unit * (MAX_ANSWER_CHARS // len(unit) + 1))[:MAX_ANSWER_CHARS]
    half = long[: MAX_ANSWER_CHARS // 2]
    res = score_answer(LESSON4, "q1", long)
    assert res.points >= 0 and res.notes == []
    assert work(LESSON4, long) < 2.4 * work(LESSON4, half)


# --- 2. any str --------------------------------------------------------------------------------
NASTY = [
    "",
    " ",
    "\ud83d",
    "DP 能降低每卡显存\ud83d。",
    "\udc00\ud800\udfff 降低 \ud83d\ude00",
    "\x00" * 50,
    "DP\x00 能降低\x00每卡显存。",
    "\x1b[31mDP 能降低每卡显存\x1b[0m。",
    "DP 能降低\r每卡显存\x07\x08\x7f\x85。",
    "\u202eDP 能降低每卡显存\u202c。",
    "\t\tDP\t能降低每卡显存。",
    "\u2028\u2029\v\f",
    "\u200b\u200c\u200d\u2060\ufeff\u00ad",
    "降" + "\u0301" * 500,
    "ﬁ ① ㎏ Ⅻ ＤＰ ﾃﾞｨｰﾋﾟｰ",
    "İstanbul ẞ ǅ",
    "𠀀𪚥 \U0010ffff \ufffd",
    "。" * 3000,
    "，" * 5000,
    "a" * 100_000,
    "DP 能降低每卡显存" * 400,
    "不" * 3000,
    "吗？" * 2000,
    "((((((((((" * 300,
    "\\" * 3000,
    "有人认为" * 800 + "这是错误的" * 200,
]


def printable_problems(text: str) -> list[str]:
    """Characters that would break printing or UTF-8 encoding of a report."""
    text.encode("utf-8")  # raises on a lone surrogate
    return [repr(c) for c in text if unicodedata.category(c) in ("Cc", "Cs") and c != "\n"]


def evidence_of(res: AnswerResult) -> list[str]:
    return (
        [e.sentence for _, e in res.found]
        + [e.sentence for _, e in res.vetoes]
        + [e.sentence for _, e, _ in res.suppressed]
    )


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
@pytest.mark.parametrize("slug", ["lesson01", "lesson04", "lesson06"])
def test_any_str_is_scored_and_its_evidence_is_printable(slug, text):
    for qid in ("q1", "q2", "q3"):
        res = score_answer(RUBRICS[slug], qid, text)
        assert 0 <= res.points <= res.max
        for sentence in evidence_of(res) + res.notes:
            assert printable_problems(sentence) == []
        for _, e in res.found + res.vetoes:
            assert 0 <= e.start <= e.end <= len(e.sentence)


def test_evidence_of_a_control_laden_answer_is_cleaned_but_still_fires():
    res = score_answer(LESSON4, "q3", "\x1b[31m DP\x00 能降低每卡显存\x07。")
    [(veto, ev)] = res.vetoes
    assert veto.id == "dp-cuts-memory" and ev.sentence == "[31m DP 能降低每卡显存。"
    assert ev.sentence[ev.start : ev.end] == "降低"


# --- 3. normalisation --------------------------------------------------------------------------
def all_vetoes() -> list[tuple[str, str]]:
    return [(slug, v.id) for slug in sorted(RUBRICS) for v in RUBRICS[slug].vetoes]


@pytest.mark.parametrize("slug, veto_id", all_vetoes())
def test_traditional_chinese_examples_behave_as_the_simplified_ones(slug, veto_id):
    rubric = RUBRICS[slug]
    veto = next(v for v in rubric.vetoes if v.id == veto_id)
    wrong = []
    for kind, texts in (("fire", veto.fire), ("keep", veto.keep)):
        for text in texts:
            traditional = TO_TRADITIONAL.convert(text)
            fired = any(veto.id in vetoed(rubric, qid, traditional) for qid in veto.questions)
            if fired != (kind == "fire"):
                wrong.append((kind, traditional))
    assert wrong == []


def test_traditional_answer_fires_and_evidence_keeps_the_students_characters():
    res = score_answer(LESSON4, "q3", "DP 能把每卡顯存降到 1/dp。")
    [(veto, ev)] = res.vetoes
    assert veto.id == "dp-cuts-memory"
    assert ev.sentence == "DP 能把每卡顯存降到 1/dp。"  # not converted to Simplified


@pytest.mark.parametrize("invisible", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"])
def test_invisible_character_inside_a_veto_term_does_not_hide_it(invisible):
    text = f"DP 能降{invisible}低每卡显{invisible}存。"
    [(veto, ev)] = score_answer(LESSON4, "q3", text).vetoes
    assert veto.id == "dp-cuts-memory"
    assert ev.sentence == text and ev.sentence[ev.start : ev.end] == f"降{invisible}低"


def test_full_width_forms_are_folded():
    assert vetoed(LESSON4, "q3", "ＤＰ 能降低每卡显存。") == ["dp-cuts-memory"]
    assert vetoed(LESSON4, "q3", "ＤＰ 并不能降低每卡显存。") == []


def test_evidence_span_points_at_the_head_in_the_students_text():
    text = "  \u200bＤＰ\u00ad 能把每卡顯存\u200b降到 1/dp。"
    [(_, ev)] = score_answer(LESSON4, "q3", text).vetoes
    assert ev.sentence == text.strip() and ev.sentence[ev.start : ev.end] == "降到"


@pytest.mark.parametrize("text", ["頭髮與記憶體", "ｄｐ\u200b＝８，", "ﬁ①㎏", "İ\u00adß", "a\ud83db\x00c"])
def test_offset_map_points_each_character_back_to_its_source(text):
    norm, origin = normalise_mapped(text)
    assert len(norm) == len(origin) and list(origin) == sorted(origin)
    simplified = opencc.OpenCC("t2s")
    for ch, i in zip(norm, origin):
        source = text[i]
        folded = unicodedata.normalize("NFKC", source).lower() if not "\ud800" <= source <= "\udfff" else "\ufffd"
        assert ch in folded or ch == simplified.convert(source)


# --- 4. an answer without Chinese --------------------------------------------------------------
def test_english_answer_gets_a_note_and_is_still_scored():
    text = "Gradient sums are associative, so syncing once after the last micro-batch gives the same result."
    res = score_answer(LESSON4, "q2", text)
    assert NOTE_NO_CHINESE in res.notes
    assert res.points == sum(k.points for k, _ in res.found)


@pytest.mark.parametrize("text", ["梯度求和满足结合律。", "DP 的 all-reduce 在 step 之前。", "顯存"])
def test_answer_with_chinese_gets_no_language_note(text):
    assert NOTE_NO_CHINESE not in score_answer(LESSON4, "q2", text).notes

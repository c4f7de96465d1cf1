"""Short answers that try to earn points without understanding (issue 9): keyword lists, the
question copied back as a statement, and keywords hidden in markup the rendered notebook does not show.

Only visible prose is marked, a key point needs a sentence that reads as a statement, and a sentence
copied from the question earns nothing; the lessons' own key points must still earn full marks.
"""

from __future__ import annotations

import re

import pytest
from helpers import REPO, lesson_rubric

from grader.course import load_course
from grader.lesson import QUESTION_IDS, QUESTION_POINTS
from grader.rubric import (
    FUNCTION_CHARS,
    NOTE_COPIED,
    NOTE_LIST,
    Rubric,
    normalise,
    normalise_mapped,
    score_answer,
)

COURSE = load_course(REPO)
SLUGS = sorted(COURSE.lessons)
RUBRICS = {slug: lesson_rubric(COURSE, slug) for slug in SLUGS}
CASES = [(slug, qid) for slug in SLUGS for qid in QUESTION_IDS]
SAMPLED = ["lesson01", "lesson04", "lesson06", "lesson09", "lesson12"]


def test_the_gaming_tests_cover_the_lessons_the_issue_names():
    assert set(SAMPLED) <= set(SLUGS)


def key_point_terms(rubric: Rubric, qid: str) -> list[str]:
    """The rubric's own terms as they occur in the question's key points: what a keyword list is made of.

    A keyword has a letter (not a bare number or sign) and is not a bare function word such as 是.
    """
    words: list[str] = []
    for kp in rubric.key_points[qid]:
        says = normalise(kp.says)
        for rx in rubric.terms:
            for m in rx.finditer(says):
                word = m.group().strip()
                if re.search(r"[^\W\d_]", word) and not FUNCTION_CHARS.issuperset(word.replace(" ", "")):
                    if word not in words:
                        words.append(word)
    return words


def reference(slug: str, qid: str) -> str:
    return "\n".join(COURSE.lessons[slug].keypoints(qid))


# --- keyword lists ------------------------------------------------------------------------------
@pytest.mark.parametrize("separator", [" ", "、", "，", " / ", "\n", "\n- "])
@pytest.mark.parametrize("slug, qid", CASES)
def test_a_list_of_the_key_point_terms_earns_at_most_half_a_point(slug, qid, separator):
    rubric = RUBRICS[slug]
    words = key_point_terms(rubric, qid)
    assert len(words) >= 4  # a salad worth the name
    res = score_answer(rubric, qid, separator.join(words))
    assert res.points <= 0.5, [k.id for k, _ in res.found]


def test_the_reported_keyword_salad_no_longer_scores_and_says_why():
    salad = "梯度 all-reduce bucket 反向 重叠 step 同步 平均 TP 激活 关键路径"
    results = [score_answer(RUBRICS["lesson04"], qid, salad) for qid in QUESTION_IDS]
    assert all(r.points <= 0.5 for r in results)
    assert sum(r.points for r in results) <= 0.5  # it scored 6/6 before
    assert any(NOTE_LIST in r.notes for r in results)


@pytest.mark.parametrize(
    "slug, qid, statement, listing",
    [
        (
            "lesson04",
            "q1",
            "DP 同步的是梯度，要到 optimizer.step() 才用到，所以可以和反向重叠。",
            "DP 梯度 optimizer.step() 反向 重叠",
        ),
        ("lesson05", "q1", "ZeRO-3 是 3Ψ。", "ZeRO-3 3Ψ ZeRO"),
        (
            "lesson04",
            "q2",
            "每个 micro-batch 都同步是 8 次 all-reduce，no_sync 只有 1 次：8 次 vs 1 次。",
            "micro-batch all-reduce 8 no_sync",
        ),
    ],
)
def test_the_same_terms_earn_in_a_statement_but_not_in_a_list(slug, qid, statement, listing):
    rubric = RUBRICS[slug]
    assert score_answer(rubric, qid, statement).points > 0
    res = score_answer(rubric, qid, listing)
    assert res.points == 0


def test_a_bare_numeric_answer_is_not_a_list():
    """'8 倍。' answers 'how many times more' on its own; a single term is not a keyword list."""
    rubric = RUBRICS["lesson04"]
    assert "eight-times" in [k.id for k, _ in score_answer(rubric, "q2", "梯度累加不影响结果，所以正确。8 倍。").found]
    assert score_answer(rubric, "q2", "8 倍\n1 次\nno_sync").points == 0  # but bare lines in a row are a list


def test_naming_techniques_in_a_bulleted_list_still_counts():
    """A key point that asks to name several things may be answered with a list."""
    res = score_answer(RUBRICS["lesson04"], "q3", "应转向：\n- ZeRO-3 / FSDP\n- TP\n- PP")
    assert "techniques" in [k.id for k, _ in res.found]


# --- the question copied back -------------------------------------------------------------------
def as_statement(question: str) -> str:
    return re.sub(r"[？?]", "。", question)


@pytest.mark.parametrize("slug, qid", CASES)
def test_the_question_copied_as_a_statement_earns_at_most_half_a_point(slug, qid):
    question = COURSE.lessons[slug].question_text(qid)
    res = score_answer(RUBRICS[slug], qid, as_statement(question), question_text=question)
    assert res.points <= 0.5, [k.id for k, _ in res.found]


def test_a_copied_question_that_used_to_score_now_says_why():
    slug, qid = "lesson01", "q2"
    question = COURSE.lessons[slug].question_text(qid)
    assert score_answer(RUBRICS[slug], qid, as_statement(question)).points > 0  # without the question
    res = score_answer(RUBRICS[slug], qid, as_statement(question), question_text=question)
    assert res.points == 0 and NOTE_COPIED in res.notes


@pytest.mark.parametrize("slug, qid", CASES)
def test_an_answer_that_restates_the_question_and_then_answers_keeps_its_points(slug, qid):
    question = COURSE.lessons[slug].question_text(qid)
    answer = as_statement(question) + "\n" + reference(slug, qid)
    assert score_answer(RUBRICS[slug], qid, answer, question_text=question).points == QUESTION_POINTS


# --- the lessons' own key points ------------------------------------------------------------------
@pytest.mark.parametrize("slug, qid", CASES)
def test_the_reference_key_points_still_earn_full_marks_without_a_veto(slug, qid):
    question = COURSE.lessons[slug].question_text(qid)
    for res in (
        score_answer(RUBRICS[slug], qid, reference(slug, qid)),
        score_answer(RUBRICS[slug], qid, reference(slug, qid), question_text=question),
    ):
        assert res.points == QUESTION_POINTS, [k.id for k in res.missing]
        assert res.vetoes == [] and res.notes == []


# --- only visible prose is marked ---------------------------------------------------------------
HIDDEN = [
    "<!-- {} -->",
    "<!--\n{}\n-->",
    '<span style="display:none">{}</span>',
    "<span style='visibility: hidden'>{}</span>",
    "<div hidden>\n{}\n</div>",
    "<div hidden><div>可见的开头</div>{}</div>",
    '<p style="font-size:0">{}</p>',
    "<script>{}</script>",
    "![{}](figure.png)",
    "<!-- 没有闭合的注释 {}",
]


@pytest.mark.parametrize("wrapper", HIDDEN)
@pytest.mark.parametrize("slug", SAMPLED)
def test_key_points_in_hidden_markup_earn_nothing(slug, wrapper):
    for qid in QUESTION_IDS:
        hidden = "\n".join(wrapper.format(line) for line in COURSE.lessons[slug].keypoints(qid) if "]" not in line)
        assert score_answer(RUBRICS[slug], qid, hidden).points == 0


@pytest.mark.parametrize("wrapper", ["<b>{}</b>", "<span>{}</span>", '<span style="color:red">{}</span>', "{}<br>"])
@pytest.mark.parametrize("slug", SAMPLED)
def test_key_points_in_visible_markup_still_score(slug, wrapper):
    for qid in QUESTION_IDS:
        shown = "\n".join(wrapper.format(line) for line in COURSE.lessons[slug].keypoints(qid))
        assert score_answer(RUBRICS[slug], qid, shown).points == QUESTION_POINTS


def test_a_link_keeps_its_text_and_drops_its_target():
    rubric = RUBRICS["lesson04"]
    line = COURSE.lessons["lesson04"].keypoints("q1")[2]  # TP communication is on the critical path
    in_target = score_answer(rubric, "q1", f"[见讲义](https://example.org/{line})")
    as_text = score_answer(rubric, "q1", f"[{line}](https://example.org/notes)")
    assert in_target.points == 0 and as_text.points > 0


def test_hidden_markup_leaves_the_offsets_pointing_into_the_students_text():
    raw = "TP 的<!-- 秘密 -->通信<b>产出</b>下一个算子马上要用的激活，计算必须等它完成，所以在关键路径上。"
    norm, origin = normalise_mapped(raw)
    assert "秘密" not in norm and "<" not in norm
    assert all(normalise(raw[o]) == ch for ch, o in zip(norm, origin))
    res = score_answer(RUBRICS["lesson04"], "q1", raw)
    (kp, ev) = next((k, e) for k, e in res.found if k.id == "tp-on-critical-path")
    assert ev.sentence == raw  # the evidence is what the student wrote
    assert ev.sentence[ev.start : ev.end] in {"关键路径", "等"}


@pytest.mark.parametrize("text", ["x<y 而 z>w", "a < b 且 b > c", "列表 [1, 2] 和 [3]", "<3 次"])
def test_text_that_only_looks_like_markup_is_kept(text):
    assert normalise(text) == text.lower()


# --- sentences strung from the key points' words -----------------------------------------------
GLUE = ["的", "会", "是", "在", "把", "和", "能", "要", "被", "与"]


@pytest.mark.parametrize("slug, qid", CASES)
def test_a_grammatical_sentence_strung_from_the_key_point_terms_earns_at_most_half_a_point(slug, qid):
    """ "A 的 B 会 C 是 D…": every key point's words, glued with function words into one statement.

    One statement earns at most one key point (``_assign``), so this scores like a single key point.
    """
    rubric = RUBRICS[slug]
    words = key_point_terms(rubric, qid)
    for shift in range(3):
        sentence = "".join(f"{w}{GLUE[(n + shift) % len(GLUE)]}" for n, w in enumerate(words)) + "。"
        res = score_answer(rubric, qid, sentence)
        assert res.points <= 0.5, (sentence, [k.id for k, _ in res.found])

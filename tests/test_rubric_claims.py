"""Vetoes and key points judge claims: the predicate said of its subject, read word by word.

Each test holds one pattern of issue 9 with sentences written for this file (not taken from any
lesson or answer set): subject binding, clause-scoped ``unless``, whole-word cues, formulas inside
formulas, answered and rhetorical questions, key points withheld from vetoed or negated sentences,
glued numbers, review flags, and the veto dodges (invisible characters, homoglyphs, softeners, fake
refutations). The rubric is the worked example of docs/rubric.md, plus what the tests need.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.errors import SourceError
from grader.rubric import Rubric, load_rubric, score_answer

RUBRIC = """
lexicon:
  dp: ['数据并行', 'dp', 'ddp']
  memory: ['显存', '内存', 'memory']
  reduce: ['降低', '减少', '节省', '省', '降到', '变少']
questions:
  q1:
    key_points:
      - id: full-copy
        points: 1
        says: 每个副本都保存完整的参数、梯度和优化器状态
        hint: 每张卡上存了哪些东西？
        any:
          - claim:
              subject: ['副本', '每张卡', '每卡']
              predicate: ['保存', '存']
              object: ['完整', '全部', '全套']
      - id: ring-volume
        points: 0.5
        says: 环形 all-reduce 每卡发送 2(p-1)M/p
        hint: 数一数两个阶段各发送多少。
        any:
          - head: ['2 ?\\(p ?- ?1\\) ?m ?/ ?p']
      - id: four-n
        points: 0.5
        says: 大约 4N 次
        hint: 数一数有几次。
        any:
          - head: ['4n']
  q2:
    key_points:
      - id: anything
        points: 2
        says: 占位要点
        hint: 想一想。
        any:
          - head: ['要点']
  q3:
    key_points:
      - id: anything
        points: 2
        says: 占位要点
        hint: 想一想。
        any:
          - head: ['要点']
vetoes:
  - id: dp-cuts-memory
    says: 认为纯 DP 会降低每卡显存
    explain: 纯 DP 的每张卡都保存完整的参数、梯度和优化器状态，显存一点也不省。
    any:
      - claim:
          subject: ['@dp']
          predicate: ['@reduce']
          object: ['@memory']
    unless: ['zero', 'fsdp', '激活', '张量并行']
  - id: dp-linear
    says: 认为 DP 的吞吐随卡数线性增长
    explain: 通信随卡数增加，扩展效率达不到线性。
    any:
      - claim:
          subject: ['@dp', '吞吐']
          predicate: ['线性(增长|增加|提升|扩展)']
  - id: half-volume
    says: 认为环形 all-reduce 每卡只发送 (p-1)M
    explain: 两个阶段各发送 (p-1)M/p。
    any:
      - head: ['(?<!2)\\(p ?- ?1\\) ?m(?! ?/)']
"""


@pytest.fixture(scope="module")
def rubric(tmp_path_factory: pytest.TempPathFactory) -> Rubric:
    path = tmp_path_factory.mktemp("rubric") / "rubric.yml"
    path.write_text(RUBRIC, encoding="utf-8")
    return load_rubric(path, "rubric.yml")


def vetoes(rubric: Rubric, text: str) -> set[str]:
    return {v.id for v, _ in score_answer(rubric, "q1", text).vetoes}


def vetoes_of(tmp_path: Path, rubric_text: str, text: str) -> set[str]:
    """The vetoes that a small rubric written to ``tmp_path`` fires on ``text`` (question q1)."""
    path = tmp_path / "rubric.yml"
    path.write_text(rubric_text, encoding="utf-8")
    return vetoes(load_rubric(path, "rubric.yml"), text)


def key_points(rubric: Rubric, text: str) -> set[str]:
    return {k.id for k, _ in score_answer(rubric, "q1", text).found}


def key_points_of(tmp_path: Path, rubric_text: str, text: str) -> set[str]:
    """The key points that a small rubric written to ``tmp_path`` finds in ``text`` (question q1)."""
    path = tmp_path / "rubric.yml"
    path.write_text(rubric_text, encoding="utf-8")
    return key_points(load_rubric(path, "rubric.yml"), text)


@pytest.mark.parametrize(
    "text",
    [
        "数据并行能把每卡显存降到 1/dp。",
        "DP 的话，每张卡的显存会减少。",  # the subject is the topic of an earlier clause
        "用了 ddp 以后显存明显变少了。",
    ],
)
def test_a_claim_fires_where_the_predicate_is_said_of_its_subject(rubric: Rubric, text: str) -> None:
    assert "dp-cuts-memory" in vetoes(rubric, text)


@pytest.mark.parametrize(
    "text",
    [
        "延迟项随卡数线性增长，所以效率会下降。",  # 线性增长 said of the latency, no DP, no throughput
        "通信时间线性增加。",
        "激活的显存会降低，因为 micro-batch 变小了。",  # 降低 said of memory, but no DP at all
    ],
)
def test_a_predicate_without_its_subject_is_no_claim(rubric: Rubric, text: str) -> None:
    assert vetoes(rubric, text) == set()


def test_unless_counts_only_inside_the_claims_clauses(rubric: Rubric) -> None:
    assert vetoes(rubric, "DP 配合 ZeRO 才能降低每卡显存。") == set()
    fired = score_answer(rubric, "q1", "DP 能降低每卡显存，ZeRO 则是另一回事。").vetoes
    assert [v.id for v, _ in fired] == ["dp-cuts-memory"]
    assert any("competing term" in r for r in fired[0][1].review)


@pytest.mark.parametrize(
    "text",
    ["DP 主要是能降低每卡显存。", "只要是 DP，就能降低每卡显存。", "DP 需要是同步的，它能降低每卡显存。"],
)
def test_cues_are_whole_words(rubric: Rubric, text: str) -> None:
    """要是 inside 主要是/只要是/需要是 is no condition: the claim stands."""
    assert "dp-cuts-memory" in vetoes(rubric, text)


def test_a_real_condition_still_suspends_the_claim(rubric: Rubric) -> None:
    assert vetoes(rubric, "要是 DP 能降低每卡显存就好了。") == set()


def test_a_formula_inside_a_longer_formula_does_not_match(rubric: Rubric) -> None:
    assert vetoes(rubric, "环形 all-reduce 每卡发送 2(p-1)M/p 的数据。") == set()
    assert "ring-volume" in key_points(rubric, "环形 all-reduce 每卡发送 2(p-1)M/p 的数据。")
    assert "half-volume" in vetoes(rubric, "环形 all-reduce 每卡只发送 (p-1)M 的数据。")


def test_numbers_glued_to_letters_match(rubric: Rubric) -> None:
    assert "four-n" in key_points(rubric, "总共约4N次。")
    assert "four-n" not in key_points(rubric, "总共约24N次。")


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("难道 DP 不能降低每卡显存吗？当然能。", True),
        ("DP 能不能降低每卡显存？能。", True),
        ("DP 能降低每卡显存吗？不能，每张卡都存着完整的一份。", False),
        ("难道 DP 能降低每卡显存吗？", False),  # rhetorical: it cannot
        ("难道 DP 不能降低每卡显存吗？", True),  # rhetorical: it can
        ("DP 能降低每卡显存吗？", False),  # an open question asserts nothing
    ],
)
def test_questions_take_the_polarity_of_their_answer(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


def test_a_vetoed_sentence_earns_no_key_point(rubric: Rubric) -> None:
    honest = "每个副本都保存完整的参数、梯度和优化器状态。"
    assert "full-copy" in key_points(rubric, honest)
    mixed = "每个副本都保存完整的参数，所以 DP 能降低每卡显存。"
    result = score_answer(rubric, "q1", mixed)
    assert {v.id for v, _ in result.vetoes} == {"dp-cuts-memory"}
    assert "full-copy" not in {k.id for k, _ in result.found}


def test_a_negated_sentence_earns_no_key_point(rubric: Rubric) -> None:
    assert "full-copy" not in key_points(rubric, "每个副本并不保存完整的参数。")


@pytest.mark.parametrize(
    "text",
    [
        "D\u200bP 能降低每卡显存。",  # zero-width space inside the subject
        "数据\u00ad并行能降低每卡显存。",  # soft hyphen
        "D\u0420 能降低每卡显存。",  # Cyrillic Р for the Latin P
        "D\u0420 可能能降低每卡显存。",  # a softener withdraws nothing
        "有人说这是错的，但其实 DP 能降低每卡显存。",  # a fake refutation
        "難道 DP 不能降低每卡顯存嗎？當然能。",  # Traditional, rhetorical
    ],
)
def test_veto_dodges_fire(rubric: Rubric, text: str) -> None:
    assert "dp-cuts-memory" in vetoes(rubric, text)


def test_softened_and_topic_claims_are_flagged_for_review(rubric: Rubric) -> None:
    fired = score_answer(rubric, "q1", "DP 大概能降低每卡显存。").vetoes
    assert fired and fired[0][1].review and fired[0][1].review[0].startswith("softened")
    topic = score_answer(rubric, "q1", "DP 的话，每张卡的显存会减少。").vetoes
    assert "subject taken from an earlier clause" in topic[0][1].review
    plain = score_answer(rubric, "q1", "DP 能降低每卡显存。")
    assert plain.vetoes[0][1].review == ()
    assert plain.as_dict()["vetoes"][0]["needs_review"] is False


def test_a_malformed_claim_names_the_file_and_line(tmp_path: Path) -> None:
    broken = RUBRIC.replace("          predicate: ['@reduce']\n", "", 1)
    path = tmp_path / "rubric.yml"
    path.write_text(broken, encoding="utf-8")
    with pytest.raises(SourceError) as err:
        load_rubric(path, "solutions/lesson99/rubric.yml")
    assert "solutions/lesson99/rubric.yml:" in str(err.value)
    assert "needs 'subject' and 'predicate'" in str(err.value)


def test_the_gradebook_lists_vetoes_that_need_review() -> None:
    """Instructors find flagged vetoes in the CSV (and the terminal table) without opening each result."""
    import csv
    import io

    from grader.report import gradebook_csv, table

    veto = {"id": "dp-cuts-memory", "question": "q3", "evidence": "…", "message": "…"}
    results = [
        {
            "student": s,
            "lesson": "lesson04",
            "total": 8.0,
            "max": 10.0,
            "passed": False,
            "items": [],
            "vetoes": [{**veto, "needs_review": flagged, "review": ["softened: 大概"] if flagged else []}],
        }
        for s, flagged in (("2026001", True), ("2026002", False))
    ]
    rows = list(csv.DictReader(io.StringIO(gradebook_csv(results))))
    assert [r["needs_review"] for r in rows] == ["dp-cuts-memory", ""]
    assert "dp-cuts-memory (review)" in table(results).splitlines()[2]


# --- the real lesson-4 rubric: every dodge of issue 9 still fires its DP-memory veto -----------
LESSON4_RUBRIC = Path(__file__).resolve().parents[1] / "solutions/lesson04/rubric.yml"


@pytest.fixture(scope="module")
def lesson04() -> Rubric:
    return load_rubric(LESSON4_RUBRIC, "solutions/lesson04/rubric.yml")


@pytest.mark.parametrize(
    "text",
    [
        "D\u200bP 能降低每卡显存。",  # zero-width space inside the subject
        "数据并行能降低每卡显\u200b存。",  # ... and inside the object
        "数据\u00ad并行能降低每卡显存。",  # soft hyphen inside the subject
        "data parallelism reduces per-GPU memory",  # English
        "With DP, the optimizer states are split across GPUs, so each GPU needs less memory.",
        "D\u0420 能降低每卡显存。",  # Cyrillic Р for the Latin P
        "难道 DP 不能降低每卡显存吗？当然能。",  # a rhetorical question answered yes
        "DP 可能能降低每卡显存。",  # a softener withdraws nothing
        "DP 大概能降低每卡显存。",
        "有人说这是错的，但其实 DP 能省显存。",  # a fake refutation
    ],
)
def test_every_dodge_fires_the_lesson4_memory_veto(lesson04: Rubric, text: str) -> None:
    fired = {v.id for v, _ in score_answer(lesson04, "q3", text).vetoes}
    assert "dp-cuts-memory" in fired


@pytest.mark.parametrize(
    "text",
    [
        "data parallelism does not reduce per-GPU memory",
        "难道 DP 能降低每卡显存吗？不能。",
        "有人说 DP 能省显存，这是错的。",
        "D\u200bP 并不能降低每卡显存。",
    ],
)
def test_the_same_words_refuted_do_not_fire_the_lesson4_memory_veto(lesson04: Rubric, text: str) -> None:
    assert score_answer(lesson04, "q3", text).vetoes == []


# --- round 4: conditions, framing clauses, competing subjects, negation, refutation scope ------
@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("如果换成数据并行，每张卡的显存就会减少。", True),  # the consequent is the student's claim
        ("假如卡数翻倍，DP 就能把每卡显存降低一半。", True),
        ("if we add more GPUs then DP 能降低每卡显存。", True),
        ("如果 DP 能降低每卡显存，那就用不着 ZeRO 了。", False),  # only the antecedent says it
        ("要是数据并行真能省显存就好了。", False),
    ],
)
def test_a_condition_suspends_its_antecedent_and_asserts_its_consequent(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    "text",
    [
        "在 ZeRO 下，DP 的每卡显存会降低。",
        "开了 FSDP 的时候，数据并行能减少每卡显存。",
        "如果叠加张量并行，DP 每卡的显存就会变少。",  # a condition frames its consequent too
        "激活重计算的话，DP 每卡显存能降低。",
    ],
)
def test_unless_terms_in_a_leading_framing_clause_count_for_the_claim(rubric: Rubric, text: str) -> None:
    result = score_answer(rubric, "q1", text)
    assert result.vetoes == []
    assert [why for v, _, why in result.suppressed if v.id == "dp-cuts-memory"][0].startswith("unless:")


@pytest.mark.parametrize(
    "text",
    [
        "ZeRO 是另一种方案，DP 能降低每卡显存。",
        "ZeRO 能放下，DP 能降低每卡显存。",  # the 下 of 放下 completes a verb: no "under ZeRO"
        "用了 ZeRO 才装得下，DP 能降低每卡显存。",
    ],
)
def test_a_framing_clause_must_frame_not_state(rubric: Rubric, text: str) -> None:
    """A clause that goes on to say something of its own does not set the next claim's scope."""
    assert "dp-cuts-memory" in vetoes(rubric, text)


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("DP 的显存不变，ZeRO-3 把每卡显存降到 1/N。", False),  # ZeRO-3 is this clause's subject
        ("DP 每卡存一整份，FSDP 的每卡显存会减少。", False),  # a name and 的 open the clause
        ("DP 每卡存一整份，而张量并行会降低每卡显存。", False),
        ("数据并行的话，每张卡上的显存会降低。", True),  # a quantity, no subject of its own: the topic holds
    ],
)
def test_a_clause_with_a_subject_of_its_own_does_not_borrow_the_topic(rubric: Rubric, text: str, fires: bool) -> None:
    result = score_answer(rubric, "q1", text)
    matched = {v.id for v, _ in result.vetoes} | {v.id for v, _, _ in result.suppressed}
    assert ("dp-cuts-memory" in matched) is fires  # no claim at all, not a claim cancelled by 'unless'


@pytest.mark.parametrize(
    "text",
    [
        "DP 能降低每张卡的显存是不对的。",
        "说 DP 会减少每卡显存是错误的，每张卡都是完整副本。",
        "DP 可以节省每卡显存是不可能的。",
        "DP 会把每卡显存降到 1/N 这种说法不成立。",
        "that DP 降低每卡显存 is wrong",
    ],
)
def test_a_negator_after_the_predicate_negates_it(rubric: Rubric, text: str) -> None:
    assert vetoes(rubric, text) == set()


def test_a_negator_after_the_predicate_stays_in_its_clause(rubric: Rubric) -> None:
    assert "dp-cuts-memory" in vetoes(rubric, "DP 能降低每卡显存，TP 的说法不成立。")


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("DP 不能降低每卡显存吗？对，不能。", False),
        ("数据并行不会减少每卡显存吗？对，不会，每张卡存的都一样。", False),
        ("DP 不能降低每卡显存吗？是的。", False),  # agrees with the question as worded
        ("DP 不能降低每卡显存吗？不对，能。", True),
        ("DP 不能降低每卡显存吗？不对。", True),  # disagrees: it can
        ("DP 能降低每卡显存吗？对。", True),
    ],
)
def test_answering_a_negative_question_agrees_with_its_wording(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("每个副本都保存完整的状态，DP 能降低每卡显存是错的。", False),
        ("每个副本都保存完整的状态，DP 能降低每卡显存，这是误解。", False),
        ("DP 能降低每卡显存，因为梯度被平均了，这是错误的。", False),  # points back over a 因为 clause
        ("DP 能降低每卡显存，TP 需要 all-reduce 是错的。", True),  # refutes the second clause only
        ("TP 需要 all-reduce，这是对的，但 DP 降低每卡显存是错的。", False),
    ],
)
def test_a_refutation_reaches_back_to_the_clause_it_points_to(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


def test_a_refuted_clause_leaves_the_earlier_key_point_standing(rubric: Rubric) -> None:
    result = score_answer(rubric, "q1", "每个副本都保存完整的参数，DP 能降低每卡显存是错的。")
    assert result.vetoes == [] and "full-copy" in {k.id for k, _ in result.found}


# --- round 5: dashes, more refutations, punctuated replies, run-ons, terse English, reporters ---
@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("DDP 能降低每卡显存是不对的——每张卡照样存着全部状态。", False),
        ("DDP 能降低每卡显存是不对的--每张卡照样存着全部状态。", False),
        ("在这个例子里数据并行每卡显存会变少——这一步要靠 ZeRO 才做得到。", True),  # unless beyond the dash
        ("不少人以为 DP 能降低每卡显存——其实每张卡仍是完整的一份。", False),
    ],
)
def test_a_dash_ends_a_clause(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    "text",
    [
        "数据并行能降低每卡显存，这个说法站不住脚。",
        "数据并行能降低每卡显存是个常见误解。",
        "数据并行能降低每卡显存是常见的误区。",
        "数据并行能降低每卡显存，那可不是。",
        "数据并行能降低每卡显存，没用的。",
        "DP 能降低每卡显存？没用的。",
        "DP reduces memory, which is just wrong.",
        "DP reduces memory? That's a myth.",
        "Saying DP reduces memory is a misconception.",
        "DP reduces memory. This is not true.",
    ],
)
def test_more_refutation_forms_withdraw_the_claim(rubric_en: Rubric, text: str) -> None:
    assert "dp-cuts-memory" not in vetoes(rubric_en, text)


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("DP 能降低每卡显存吗？Yes.", True),
        ("DP 能降低每卡显存吗？Yes, 因为每卡只存一部分。", True),
        ("DP 能降低每卡显存吗？No.", False),
        ("DP 能降低每卡显存吗？是的。显存直接少了一截。", True),
        ("DP 不能降低每卡显存吗？No, 它能。", True),
    ],
)
def test_replies_with_punctuation_answer_the_question(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


def test_a_long_run_on_keeps_the_key_points_outside_its_vetoed_claim(rubric: Rubric) -> None:
    run_on = (
        "我算了一下，环形里每卡发 2(p-1)M/p，前向大约 4N 次，另外，数据并行能把每卡显存降到一半，毕竟卡多了，就这样"
    )
    res = score_answer(rubric, "q1", run_on)
    assert [v.id for v, _ in res.vetoes] == ["dp-cuts-memory"]
    assert {k.id for k, _ in res.found} == {"ring-volume", "four-n"}
    short = "数据并行每卡显存降到一半，每卡发 2(p-1)M/p。"  # two clauses: the whole sentence earns nothing
    assert key_points(rubric, short) == set()


def test_terse_english_reads_as_a_statement_but_a_keyword_list_does_not(rubric_en: Rubric) -> None:
    assert "dp-cuts-memory" in vetoes(rubric_en, "DP reduces per-GPU memory.")
    assert key_points_en(rubric_en, "Every replica keeps full copies.") == {"full-copy"}
    assert key_points_en(rubric_en, "replica keeps full") == {"full-copy"}
    assert key_points_en(rubric_en, "replica, keeps, full") == set()  # separated terms: a list
    assert key_points_en(rubric_en, "replica\nkeeps\nfull") == set()


@pytest.mark.parametrize(
    "text",
    [
        "有同学据此说数据并行能降低每卡显存，但其实每卡仍是全套。",
        "有人就会说数据并行能降低每卡显存。",
        "网上有文章声称数据并行能降低每卡显存。",
        "我室友坚持认为数据并行能降低每卡显存。",
        "A blog post I read claims DP reduces memory.",
    ],
)
def test_a_report_cue_may_hold_words_between_reporter_and_verb(rubric_en: Rubric, text: str) -> None:
    assert "dp-cuts-memory" not in vetoes(rubric_en, text)


def test_the_reported_clause_ends_at_a_contrast(rubric: Rubric) -> None:
    assert "dp-cuts-memory" in vetoes(rubric, "有同学据此说过这个，但数据并行确实能降低每卡显存。")


@pytest.fixture(scope="module")
def rubric_en(tmp_path_factory: pytest.TempPathFactory) -> Rubric:
    """The same rubric with English words for the predicate and for the full-copy key point."""
    text = RUBRIC.replace("'省', '降到', '变少'", "'省', '降到', '变少', 'reduces?', 'cuts?'")
    text = text.replace("['副本', '每张卡', '每卡']", "['副本', '每张卡', '每卡', 'replicas?']")
    text = text.replace("['保存', '存']", "['保存', '存', 'keeps?']").replace(
        "['完整', '全部', '全套']", "['完整', '全部', '全套', 'full']"
    )
    path = tmp_path_factory.mktemp("rubric_en") / "rubric.yml"
    path.write_text(text, encoding="utf-8")
    return load_rubric(path, "rubric.yml")


def key_points_en(rubric: Rubric, text: str) -> set[str]:
    return key_points(rubric, text)


def test_an_object_goes_with_the_predicate_right_before_it(rubric: Rubric) -> None:
    # 显存 is the object of the negated 降低; the later 变少 is said of something else.
    assert "dp-cuts-memory" not in vetoes(rubric, "数据并行的局限是不降低每卡显存、规模大了吞吐变少。")
    assert "dp-cuts-memory" in vetoes(rubric, "数据并行让每卡显存变少。")


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("开不开 ZeRO，数据并行都能降低每卡显存。", True),  # an A-not-A clause, then a statement
        ("不管卡多卡少，数据并行总能省显存。", True),
        ("可以用显存是否下降来判断数据并行是否省显存。", False),  # 是否 embedded: no claim of its own
        ("数据并行能不能省显存，我觉得能省。", True),
        ("数据并行能不能省显存", False),  # its A-not-A in the last clause, no full stop: a question
    ],
)
def test_an_embedded_a_not_a_leaves_the_statement_standing(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    "text",
    [
        "同桌说数据并行能省显存，我算了一下，并不能。",
        "隔壁组说数据并行能省显存。",
        "组里有人写数据并行会降低显存。",
        "学长以为数据并行能降低每卡显存。",
        "小李也说数据并行能省显存，他忘了每卡都存全套。",
    ],
)
def test_a_person_who_says_something_reports_it(rubric: Rubric, text: str) -> None:
    assert "dp-cuts-memory" not in vetoes(rubric, text)


@pytest.mark.parametrize(
    "text",
    [
        "同学说得对，数据并行能降低每卡显存。",  # endorsing is no report
        "这说明数据并行能降低每卡显存。",
        "所谓数据并行，就是每卡显存会降低的那种并行。",  # the student's own definition
        "室友跟我说过这事，我纠正他：数据并行能降低每卡显存。",  # the correction is the student's own
    ],
)
def test_endorsing_explaining_and_defining_are_the_students_own(rubric: Rubric, text: str) -> None:
    assert "dp-cuts-memory" in vetoes(rubric, text)


@pytest.mark.parametrize(
    "text",
    [
        "与其换更大的卡，不如用数据并行降低显存。",  # 不如 prefers, it does not negate
        "别忘了数据并行会降低每卡显存。",
        "数据并行省显存只能说大差不差。",
    ],
)
def test_preferring_reminding_and_about_the_same_are_no_negation(rubric: Rubric, text: str) -> None:
    assert "dp-cuts-memory" in vetoes(rubric, text)


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("一旦换成数据并行，每卡显存就会降低。", True),  # 一旦 is a condition; its consequent is asserted
        ("一旦数据并行能省显存，就用不着 ZeRO 了。", False),
        ("如果数据并行本身就能省显存，那就用不着 ZeRO 了。", False),  # 本身就 stays in the antecedent
        ("如果数据并行本来就能降低显存，那么 ZeRO 就多余了。", False),
    ],
)
def test_yidan_is_a_condition_and_an_inner_jiu_keeps_the_antecedent(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


def test_unless_does_not_reach_back_past_a_contrast(rubric: Rubric) -> None:
    assert "dp-cuts-memory" in vetoes(rubric, "数据并行常和 ZeRO 一起用，但每卡显存会降低。")
    assert "dp-cuts-memory" not in vetoes(rubric, "数据并行常和 ZeRO 一起用，每卡显存会降低。")
    # a term that stands before the subject still frames the claim
    assert "dp-cuts-memory" not in vetoes(rubric, "ZeRO 跟数据并行不同，但每卡显存会降低。")


def test_a_comma_inside_a_formulas_brackets_does_not_split_the_clause(rubric: Rubric) -> None:
    # 不会 reaches 降低 only if (b,s,h) is one clause with it.
    assert "dp-cuts-memory" not in vetoes(rubric, "数据并行不会让 (b,s,h) 的每卡显存降低。")


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        # the first match is suppressed, the claim after the contrast is the student's own
        ("虽然 DP 配合 ZeRO 时能降低显存，但 DP 自己也能把每卡显存减少。", True),
        ("DP 配合 ZeRO 才能降低显存，不过单用 DP 同样可以减少每卡显存。", True),
        ("有人说 DP 能降低显存，但我认为 DP 本身就能减少每卡显存。", True),
        # traps: every match is suppressed
        ("有人说 DP 能降低显存，还说 DP 能减少每卡显存。", False),  # the report goes on
        ("DP 配合 ZeRO 才能降低显存，配合 FSDP 也能减少每卡显存。", False),  # both about something else
        ("DP 配合 ZeRO 能降低显存，但 DP 配合 FSDP 也能减少显存。", False),
        ("有人认为 DP 能降低显存，这是错的，DP 并不能减少每卡显存。", False),  # reported, then negated
        ("有人说 DP 的显存会降低，但还会一直减少下去。", False),  # borrows the reported clause's subject
    ],
)
def test_a_suppressed_match_does_not_hide_a_later_claim(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("如果每张卡只存一部分参数，DP 就能降低每卡显存了，可惜每张卡存的是完整的一份。", False),
        ("如果通信不花时间，DP 的吞吐就能线性增长，但实际上通信不可能不花时间。", False),
        ("要是通信再快一点，DP 的吞吐就能线性增长，那该多好。", False),
        ("要是 DP 的吞吐自己就能线性增长就好了。", False),
        # a real consequent is still the student's claim
        ("如果把卡数加到 64，DP 的吞吐就能线性增长。", True),
        ("如果把卡数加到 64，DP 的吞吐就能线性增长，但其实显存不会变。", True),  # denies nothing of the antecedent
    ],
)
def test_a_counterfactual_consequent_asserts_nothing(rubric: Rubric, text: str, fires: bool) -> None:
    assert bool(vetoes(rubric, text) & {"dp-cuts-memory", "dp-linear"}) is fires


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        # the antecedent is denied only in the next sentence (after ；or 。)
        ("如果每张卡只存 1/N 的参数，DP 就能降低每卡显存；但它只做梯度同步。", False),  # restricts
        ("如果通信不要时间，DP 的吞吐就能线性增长。但通信总是要时间的。", False),  # affirms what it negated
        ("如果参数被切开放到各张卡上，DP 就能降低每卡显存。但实际上参数没有被切开。", False),  # negates its verb
        ("如果各卡之间不用同步，DP 的吞吐就能线性增长；可它们要同步，所以不行。", False),  # denies the consequent
        # a next sentence that denies nothing of the antecedent leaves the consequent asserted
        ("如果把卡数加到 64，DP 的吞吐就能线性增长。但显存不会变。", True),
        ("如果用 8 张卡，DP 就能降低每卡显存；但它很慢。", True),
    ],
)
def test_a_condition_denied_in_the_next_sentence_asserts_nothing(rubric: Rubric, text: str, fires: bool) -> None:
    assert bool(vetoes(rubric, text) & {"dp-cuts-memory", "dp-linear"}) is fires


# Three questions with one placeholder key point each: the small rubrics below test vetoes only.
PLACEHOLDER_QUESTIONS = """
questions:
  q1:
    key_points:
      - {id: a, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
  q2:
    key_points:
      - {id: a, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
  q3:
    key_points:
      - {id: a, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
"""

GAP_RUBRIC = (
    PLACEHOLDER_QUESTIONS
    + """vetoes:
  - id: more-bytes
    says: 认为通信次数翻倍，字节数也翻倍
    explain: 每次消息减半。
    any:
      - head: ['(字节|数据量)[^，。]{0,6}(变多|增加|翻倍)']
        with: ['次数']
  - id: fsdp-is-tp
    says: 认为 FSDP 是张量并行
    explain: FSDP 是数据并行。
    any:
      - claim:
          subject: ['fsdp']
          predicate: ['是[^，。]{0,8}(tp|pp)', '比[^，。]{0,10}(快|慢)']
  - id: cannot-fit
    says: 认为一张卡放不下就不能训练
    explain: 可以切分。
    any:
      - head: ['放[^，。]{0,4}不下']
"""
)


@pytest.mark.parametrize(
    ("text", "fired"),
    [
        ("消息次数多了一倍，可是发出去的数据量其实并没有增加。", set()),  # the cue sits in the term's gap
        ("次数是翻倍了，但字节数并没变多。", set()),
        ("次数翻倍，所以字节数也跟着变多。", {"more-bytes"}),
        ("FSDP 是 TP 而不是 PP。", {"fsdp-is-tp"}),  # 是 TP is complete before the cue
        ("FSDP 算得比不切分时慢。", {"fsdp-is-tp"}),  # 不 negates 切分, not 慢
        ("FSDP 不是 TP 也不是 PP。", set()),
        ("这么大的模型一张卡根本放不下。", {"cannot-fit"}),  # a cue the term names is the term's
    ],
)
def test_a_negation_inside_a_terms_gap_negates_it(tmp_path: Path, text: str, fired: set[str]) -> None:
    assert vetoes_of(tmp_path, GAP_RUBRIC, text) == fired


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("用 DP 训练比不用更省每卡显存。", True),  # 比不用: a comparison, not a negation
        ("开了 DP，每卡显存比没开变少了。", True),
        ("DP 可不是能降低每卡显存的办法。", False),  # 可不是 negates
        ("如果说 DP 能降低每卡显存，那 ZeRO 就白做了。", False),  # 如果说 opens a condition
        ("每张卡都只存一部分，DP 能降低每卡显存，这不是很明显吗？", True),  # asserts its content
        ("难道不是 DP 降低了每卡显存吗？", True),
        ("DP 能降低每卡显存吗？当然能——每张卡只存一部分。", True),  # a reply before a dash
        ("DP 的吞吐不是线性增长的吗？不完全是。", False),  # a negative reply
        ("说 DP 能降低每卡显存的人，是把 ZeRO 当成了 DP。", False),  # 说…的人 reports
        ("DP 能降低每卡显存，这是混淆了两种做法。", False),  # 这是混淆了 refutes the clause before
        # two techniques open the clause: it does not borrow DP from the first clause
        ("DP 每一步都同步梯度，ZeRO-1/2 和 FSDP 线性增长。", False),
        ("DP 每一步都同步梯度，吞吐随卡数线性增长。", True),
    ],
)
def test_cues_the_rubric_tuners_reported(rubric: Rubric, text: str, fires: bool) -> None:
    assert bool(vetoes(rubric, text) & {"dp-cuts-memory", "dp-linear"}) is fires


SIGN_RUBRIC = (
    PLACEHOLDER_QUESTIONS
    + """vetoes:
  - id: tp-cross-fine
    says: 认为 TP 跨节点没有影响
    explain: TP 的通信在关键路径上。
    any:
      - claim:
          subject: ['tp']
          predicate: ['影响(也|都)?不大']
          object: ['跨 ?(节点|机器)']
  - id: zero3-same
    says: 认为 ZeRO-3 的通信量与 DP 相同
    explain: ZeRO-3 多一次参数 all-gather。
    any:
      - claim:
          subject: ['zero-?3']
          predicate: ['=', '等于']
          object: ['dp']
"""
)


@pytest.mark.parametrize(
    ("text", "fired"),
    [
        ("TP 跨不跨机器影响都不大。", {"tp-cross-fine"}),  # the 不 of an A-not-A negates nothing
        ("TP 跨机器影响不大。", {"tp-cross-fine"}),
        ("ZeRO-3 的通信量 = DP 的通信量。", {"zero3-same"}),
        ("ZeRO-3 的通信量 != DP 的通信量。", set()),  # != denies the comparison it stands in
    ],
)
def test_choices_and_inequality_signs(tmp_path: Path, text: str, fired: set[str]) -> None:
    assert vetoes_of(tmp_path, SIGN_RUBRIC, text) == fired


DOUBLE_RUBRIC = (
    PLACEHOLDER_QUESTIONS
    + """vetoes:
  - id: inexact
    says: 认为重计算会让梯度不准确
    explain: 重算的激活与原来一致。
    any:
      - claim:
          subject: ['重计算', '重算']
          predicate: ['准确', '一致']
          polarity: negative
  - id: no-sync
    says: 认为 DP 不需要同步梯度
    explain: 各卡必须用同一份梯度更新。
    any:
      - claim:
          subject: ['dp', '各卡']
          predicate: ['同步']
          polarity: negative
"""
)


@pytest.mark.parametrize(
    ("text", "fired"),
    [
        ("重计算不会让梯度不准确。", set()),  # 不会让 negates the whole statement that follows it
        ("重计算不会使结果和原来不一致。", set()),
        ("重计算会让梯度变得不准确。", {"inexact"}),
        ("DP 的各卡非同步梯度不可。", set()),  # 非…不可: a "must"
        ("DP 的各卡非要同步梯度不行。", set()),
        ("并非 DP 的各卡可以不同步梯度。", set()),  # 并非 denies the statement, whose 不 it reaches
        ("DP 的各卡不用同步梯度。", {"no-sync"}),
        ("DP 的各卡非常需要同步梯度。", set()),
    ],
)
def test_a_negation_of_a_negation_asserts(tmp_path: Path, text: str, fired: set[str]) -> None:
    assert vetoes_of(tmp_path, DOUBLE_RUBRIC, text) == fired


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("为了让 DP 也能降低每卡显存，得再加一层切分。", False),  # 为了: a goal
        ("想要 DP 降低每卡显存就得把状态切开。", False),  # the goal ends at the need (就得)
        ("要让数据并行省显存，必须先切分优化器状态。", False),  # 要 + a need opening the next clause
        ("为了省时间，DP 降低了每卡显存。", True),  # the main clause is judged as it stands
        ("DP 要降低每卡显存，所以更慢。", True),  # 要 without a need after it says "has to"
    ],
)
def test_a_purpose_clause_names_a_goal_not_a_fact(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("DP 能降低每卡显存——这是我一开始的想法，其实每张卡都存完整的一份。", False),
        ("DP 能降低每卡显存。这是我原来的想法，后来算了一下才知道不是。", False),  # in the next sentence
        ("我一开始也觉得 DP 能降低每卡显存，其实不能。", False),  # a former belief, reported
        ("我起初认为 DP 能降低每卡显存，后来发现每张卡存的是完整的一份。", False),
        ("DP 能降低每卡显存，这是我的想法。", True),  # a belief held now is a claim
        ("DP 能降低每卡显存，这是我一开始的想法，现在我仍然这么认为。", True),
    ],
)
def test_a_retracted_belief_is_no_claim(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


BOUNDARY_RUBRIC = (
    PLACEHOLDER_QUESTIONS
    + """vetoes:
  - id: dp-cuts-memory
    says: 认为纯 DP 会降低每卡显存
    explain: 每张卡都存完整的一份。
    any:
      - claim:
          subject: ['(dp|数据并行)']
          predicate: ['降低']
          object: ['显存']
  - id: four-times
    says: 认为通信量是 4 倍
    explain: 是 2 倍。
    any:
      - head: ['(4|四) ?倍']
        with: ['通信']
"""
)


@pytest.mark.parametrize(
    ("text", "fired"),
    [
        ("FSDP 能降低每卡显存。", set()),  # the group's dp is a Latin word: not inside fsdp
        ("DP 能降低每卡显存。", {"dp-cuts-memory"}),
        ("用了数据并行以后能降低每卡显存。", {"dp-cuts-memory"}),
        ("通信量涨到了 64 倍。", set()),  # the group's 4 is a number: not inside 64
        ("通信量涨到了 4 倍。", {"four-times"}),
    ],
)
def test_a_term_that_opens_with_a_group_keeps_word_boundaries(tmp_path: Path, text: str, fired: set[str]) -> None:
    assert vetoes_of(tmp_path, BOUNDARY_RUBRIC, text) == fired


ENGLISH_RUBRIC = (
    PLACEHOLDER_QUESTIONS
    + r"""vetoes:
  - id: dp-cuts
    says: 认为纯 DP 会降低每卡显存
    explain: 每张卡都存完整的一份。
    any:
      - claim:
          subject: ['dp']
          predicate: ['reduc\w*', 'cuts?']
          object: ['memory']
    unless: ['zero']
  - id: zero-no-cut
    says: 认为 ZeRO 不能降低每卡显存
    explain: ZeRO 切分了模型状态。
    any:
      - claim:
          subject: ['zero']
          predicate: ['reduc\w*', 'cuts?']
          object: ['memory']
          polarity: negative
  - id: allreduce-averages
    says: 认为 all-reduce 自己会求平均
    explain: all-reduce 只求和。
    any:
      - head: ['averages?']
        with: ['all-reduce']
    unless: ['divid\w*']
"""
)


@pytest.mark.parametrize(
    ("text", "fired"),
    [
        # "but" without a comma still starts a clause with a subject of its own
        ("ZeRO reduces memory but DP does not cut memory.", set()),
        ("DP does not cut memory but ZeRO cuts it.", set()),
        ("Someone says DP reduces memory but actually DP reduces memory.", {"dp-cuts"}),
        # a head pattern's unless term on the far side of "but" does not cancel it
        ("All-reduce averages the gradients but we still divide by N.", {"allreduce-averages"}),
        ("We divide by N, and all-reduce averages the gradients.", set()),
    ],
)
def test_english_but_starts_a_claim_of_its_own(tmp_path: Path, text: str, fired: set[str]) -> None:
    assert vetoes_of(tmp_path, ENGLISH_RUBRIC, text) == fired


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("对于显存，DP 能降低它。", True),  # the object named as the topic
        ("至于每卡显存，数据并行会让它变少。", True),
        ("对于 ZeRO，DP 的每卡显存会降低。", False),  # the topic frames the claim: unless zero
        ("对于 DP，每卡显存会降低。", True),  # the subject named as the topic
    ],
)
def test_a_topic_named_by_duiyu_frames_the_clause_after_it(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("谁能降低每卡显存？当然是 DP。", True),  # the reply names who: DP 能降低每卡显存
        ("什么能降低每卡显存？当然是数据并行。", True),
        ("什么能降低每卡显存？当然是 ZeRO。", False),
        ("DP 能降低什么？当然是通信时间。", False),  # the named thing is no memory
        ("谁能降低每卡显存？", False),  # the question itself asserts nothing
    ],
)
def test_a_what_question_takes_the_named_answer(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


def test_the_evidence_of_a_named_answer_shows_the_question_and_the_reply(rubric: Rubric) -> None:
    fired = score_answer(rubric, "q1", "谁能降低每卡显存？当然是 DP。").vetoes
    evidence = fired[0][1]
    assert evidence.sentence == "谁能降低每卡显存？当然是 DP。"
    assert evidence.sentence[evidence.start : evidence.end] == "降低"


# --- round 10: arrows, enumerations, verdict clauses, clefts -----------------------------------


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        # an arrow between words ends a clause: the 不 before it does not reach the claim after it
        ("DP 不需要额外通信 → 每卡显存会降低。", True),
        ("数据并行不切分任何东西 => 显存能降低。", True),
        ("DP 并不降低每卡显存 → 所以才要用 ZeRO。", False),  # the negation is in the claim's own clause
        # between numbers or symbols an arrow is a change of value inside one clause
        ("DP 的每卡显存 16 -> 16 GB，降低不了。", False),
    ],
)
def test_an_arrow_between_words_ends_a_clause(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        # an ellipsis trails off one thought before the next: the 不 before it does not reach past it
        ("DP 不需要额外通信……每卡显存会降低。", True),
        ("数据并行不切分任何东西...显存能降低。", True),
        ("DP 并不降低每卡显存……所以才要用 ZeRO。", False),  # the negation is in the claim's own clause
    ],
)
def test_an_ellipsis_ends_a_clause(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


LIST_RUBRIC = """
questions:
  q1:
    key_points:
      - id: shards-params
        points: 1
        says: ZeRO-3 切分参数
        hint: 参数放在哪里？
        any:
          - claim: {subject: ['zero-3'], predicate: ['切分', '切'], object: ['参数', '权重']}
      - id: shards-grads
        points: 1
        says: ZeRO-3 切分梯度
        hint: 梯度放在哪里？
        any:
          - claim: {subject: ['zero-3'], predicate: ['切分', '切'], object: ['梯度']}
  q2:
    key_points:
      - {id: anything, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
  q3:
    key_points:
      - {id: anything, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
vetoes: []
"""


@pytest.mark.parametrize(
    ("text", "found"),
    [
        # each item of a 、-list is a statement of its own: two claims in one list earn both
        ("ZeRO-3 切分权重、梯度以及优化器状态。", {"shards-params", "shards-grads"}),
        ("ZeRO-3 会把参数、梯度都切到各张卡上。", {"shards-params", "shards-grads"}),
        # a negation before the list still covers every item
        ("ZeRO-3 并不切分参数、梯度。", set()),
    ],
)
def test_each_item_of_an_enumeration_is_a_statement(tmp_path: Path, text: str, found: set[str]) -> None:
    assert key_points_of(tmp_path, LIST_RUBRIC, text) == found


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        # a clause that is only a verdict refutes the clause before it
        ("DP 可以让每卡显存变少，其实不对。", False),
        ("数据并行能降低每卡显存——不对，每张卡都存着完整的一份。", False),
        ("DP 能降低每卡显存，这个不正确。", False),
        ("DP 能降低每卡显存，不对称的是通信。", True),  # 不对称 is no verdict
        # a verdict after a comment on the claim reaches the claim too
        ("DP 会降低每卡显存，但这是只看激活算的，不对。", False),
        # a verdict on timing judges a what-if
        ("等 DP 把每卡显存降低了再去切分，那就来不及了。", False),
        ("等数据并行降低每卡显存之后再扩容，为时已晚。", False),
        # a first reaction is a belief reported, not the student's claim
        ("我的第一反应是 DP 能降低每卡显存，可每张卡都存着完整副本。", False),
        ("第一感觉是数据并行能把每卡显存降低。", False),
    ],
)
def test_verdicts_and_first_reactions_withdraw_a_claim(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        # a cleft (降低的是 X) names its own object and does not borrow the earlier one
        ("DP 不会降低每卡显存，降低的是每张卡分到的样本数。", False),
        ("DP 并不能减少每卡显存，减少的其实是单卡的 batch。", False),
        ("DP 不会降低通信量，降低的是每卡显存。", True),  # the cleft's own object is the memory
        ("DP 不会降低通信量，但能降低每卡显存。", True),  # no cleft: the predicate still takes its object
    ],
)
def test_a_cleft_names_its_own_object(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


REPLY_RUBRIC = (
    PLACEHOLDER_QUESTIONS
    + r"""vetoes:
  - id: no-difference
    says: 认为 GPU 利用率和 MFU 没有区别
    explain: 利用率只看有没有 kernel 在跑。
    any:
      - claim: {subject: ['利用率'], predicate: ['区别', '差别'], object: ['mfu'], polarity: negative}
  - id: cross-node-free
    says: 认为 TP 跨节点也不会变慢
    explain: 跨节点带宽低一个数量级。
    any:
      - claim: {subject: ['跨节点', '跨机'], predicate: ['拖慢', '变慢'], polarity: negative}
"""
)


@pytest.mark.parametrize(
    ("text", "fired"),
    [
        # a sameness reply to a question about a difference says there is none
        ("利用率和 MFU 有区别吗？本质上一样。", {"no-difference"}),
        ("利用率和 MFU 有区别吗？基本上相同，只是叫法不同。", {"no-difference"}),
        ("利用率和 MFU 有区别吗？有，差得很远。", set()),
        # a worry dismissed (其实还好 / 问题不大) is a no
        ("跨机会不会拖慢 TP？其实还好。", {"cross-node-free"}),
        ("跨节点会让 TP 变慢吗？问题不大，能重叠掉。", {"cross-node-free"}),
        ("跨节点会不会拖慢 TP？会，而且很明显。", set()),
    ],
)
def test_replies_that_dismiss_or_equate_answer_the_question(tmp_path: Path, text: str, fired: set[str]) -> None:
    assert vetoes_of(tmp_path, REPLY_RUBRIC, text) == fired


RIVAL_RUBRIC = (
    PLACEHOLDER_QUESTIONS
    + r"""vetoes:
  - id: dp-cuts
    says: 认为纯 DP 会降低每卡显存
    explain: 每张卡都存完整的一份。
    any:
      - claim: {subject: ['dp', '数据并行'], predicate: ['降低', '减少'], object: ['显存']}
    unless: ['zero']
  - id: kernel-fusion
    says: 认为算子融合会减少通信
    explain: 融合只减少访存。
    any:
      - claim: {subject: ['fusion', '融合'], predicate: ['减少'], object: ['通信']}
    unless: ['kernel']
"""
)


@pytest.mark.parametrize(
    ("text", "fired"),
    [
        # another veto's escape word opening a clause is no rival subject: the topic still binds
        ("DP 的话，kernel 的显存占用会降低。", {"dp-cuts"}),
        ("数据并行的话，kernel 之外的显存也会减少。", {"dp-cuts"}),
        # the claim's own escape word, or another veto's subject, still opens a clause of its own
        ("DP 的话，ZeRO 的显存会降低。", set()),
        ("DP 的话，fusion 的显存会降低。", set()),
    ],
)
def test_only_the_claims_own_escapes_and_subjects_compete(tmp_path: Path, text: str, fired: set[str]) -> None:
    assert vetoes_of(tmp_path, RIVAL_RUBRIC, text) == fired


STATEMENT_RUBRIC = r"""
questions:
  q1:
    key_points:
      - id: cp-keeps-weights
        points: 1
        says: CP 不切权重
        hint: CP 切的是什么？
        any:
          - head: ['不切权重', '不切分权重']
            with: ['cp']
      - id: bubble-shrinks
        points: 1
        says: m 越大气泡越小
        hint: m 和气泡是什么关系？
        any:
          - head: ['气泡(比例)?越小']
            with: ['m ?越大']
  q2:
    key_points:
      - {id: anything, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
  q3:
    key_points:
      - {id: anything, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
vetoes: []
"""


@pytest.mark.parametrize(
    ("text", "found"),
    [
        # a term that opens with its own negation states something: no keyword list
        ("CP 不切分权重", {"cp-keeps-weights"}),
        # a 越…越 pair relates its two halves, even when each half is a term
        ("m 越大 气泡比例越小", {"bubble-shrinks"}),
        # terms strung without a negation or a pair still make a list
        ("CP、不切权重、m 越大、气泡越小", set()),
        ("CP、不切权重", set()),
    ],
)
def test_negated_terms_and_yue_pairs_are_statements(tmp_path: Path, text: str, found: set[str]) -> None:
    assert key_points_of(tmp_path, STATEMENT_RUBRIC, text) == found


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        # a noun phrase set up as the topic frames the claim after it: its unless term counts
        ("ZeRO 这类切分模型状态的方案，DP 的每卡显存会降低。", False),
        ("ZeRO 那种做法，数据并行的每卡显存能减少。", False),
        # a clause with a verb after the demonstrative states something of its own: no frame
        ("ZeRO 这种方案很常见，DP 的每卡显存会降低。", True),
    ],
)
def test_a_noun_phrase_topic_frames_the_claim(rubric: Rubric, text: str, fires: bool) -> None:
    assert ("dp-cuts-memory" in vetoes(rubric, text)) is fires


ESCAPED_KEY_POINT_RUBRIC = r"""
questions:
  q1:
    key_points:
      - id: zero12-like-dp
        points: 2
        says: ZeRO-1/2 的通信量与 DP 相同
        hint: ZeRO-1/2 比 DP 多传了什么吗？
        any:
          - claim:
              subject: ['zero-?[12]']
              predicate: ['一样', '相同']
              object: ['dp']
            unless: ['zero-?3']
  q2:
    key_points:
      - {id: anything, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
  q3:
    key_points:
      - {id: anything, points: 2, says: 占位要点, hint: 想一想。, any: [{head: ['要点']}]}
vetoes: []
"""


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("ZeRO-2 的通信量和 DP 一样。", {"zero12-like-dp"}),
        # a key point's own `unless` term in the claim's clauses says it is about something else
        ("ZeRO-2 和 ZeRO-3 的通信量都跟 DP 一样。", set()),
        ("ZeRO-2 的通信量跟开了 ZeRO-3 的 DP 一样。", set()),
        # outside the claim's clauses it does not count
        ("ZeRO-2 的通信量跟 DP 一样，而 ZeRO-3 多一半。", {"zero12-like-dp"}),
        ("ZeRO-2 的通信量和 DP 一样。ZeRO-3 多一次 all-gather。", {"zero12-like-dp"}),
    ],
)
def test_a_key_points_own_unless_term_withholds_it(tmp_path: Path, text: str, found: set[str]) -> None:
    assert key_points_of(tmp_path, ESCAPED_KEY_POINT_RUBRIC, text) == found

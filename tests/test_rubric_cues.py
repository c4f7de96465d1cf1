"""Cues read in their place: a condition suspends only what follows it, 要是 can mean "must be",
a verb's complement negates (得不到), compound nouns with 不/非 do not, and 不就…吗 is rhetorical."""

from __future__ import annotations

import re
import string
import sys

import pytest

from grader.literals import Index, anchors, folded
from grader.rubric import _CLAUSE_END, negated, split_sentences


def status_at(text: str, word: str) -> str:
    s = split_sentences(text)[0]
    pos = s.text.index(word)
    for start, end, status in s.regions:
        if start <= pos < end:
            return status
    return s.status


def test_a_condition_hedges_its_antecedent_only() -> None:
    text = "每个 token 都会被送到所有专家，如果某些专家太忙，它们所在的 rank 就会很慢。"
    assert status_at(text, "所有专家") == "asserted"
    assert status_at(text, "太忙") == "hedged"
    assert status_at(text, "很慢") == "asserted"  # the consequent is the student's own claim
    assert status_at("如果用了 ZeRO，DP 会降低显存。", "zero") == "hedged"


def test_yaoshi_without_a_consequence_means_must_be() -> None:
    assert status_at("调度更复杂，m 要是 p 的倍数。", "倍数") == "asserted"
    assert status_at("要是显存不够，就得开 ZeRO。", "不够") == "hedged"


@pytest.mark.parametrize(
    ("text", "word", "expected"),
    [
        ("加起来或平均都得不到正确的权重", "正确", True),
        ("交错调度的点对点通信量和非交错一样", "一样", False),
        ("专家之间的不平衡也无所谓", "无所谓", False),
    ],
)
def test_negation_cues_are_read_as_words(text: str, word: str, expected: bool) -> None:
    start = text.index(word)
    assert negated(text, start, start + len(word)) is expected


@pytest.mark.parametrize(
    ("text", "answered"),
    [
        ("专家越大，all-to-all 不就越慢吗？", "flip"),
        ("all-to-all 会更慢吗？当然，因为要传权重。", "positive"),
    ],
)
def test_rhetorical_and_answered_questions(text: str, answered: str) -> None:
    first = split_sentences(text)[0]
    assert first.answered == answered and first.status == "asserted"


@pytest.mark.parametrize(
    ("text", "word", "expected"),
    [
        ("结果和全量 bit 级别一样", "一样", False),  # the 别 of 级别 is no 别 (do not)
        ("不用跟别人相加", "相加", True),
        ("这绝不会降低显存", "降低", True),  # an adverb glued to the cue
        ("从未减少", "减少", True),
    ],
)
def test_a_cue_at_the_end_of_a_word_negates_only_after_an_adverb(text: str, word: str, expected: bool) -> None:
    start = text.index(word)
    assert negated(text, start, start + len(word)) is expected


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("跟用不用 ZeRO 没关系", "asserted"),  # A-not-A inside a statement that it does not matter
        ("DP 能不能降低显存", "question"),
    ],
)
def test_an_a_not_a_that_does_not_matter_asks_nothing(text: str, status: str) -> None:
    assert split_sentences(text)[0].status == status


def test_endorsing_a_classmate_is_not_reporting_a_belief() -> None:
    assert status_at("同学说得对，SP 的通信更多。", "通信") == "asserted"
    assert status_at("网上有种说法：MLP 两层之后各要一次 all-reduce。", "all-reduce") == "reported"
    assert status_at("我一开始以为会减少，后来想明白了：分片结果完全相同。", "完全相同") == "asserted"


@pytest.mark.parametrize(
    ("text", "word", "expected"),
    [
        ("显存不降是因为每个 rank 都是完整副本", "完整", False),  # 因为 starts a new claim
        ("DP 不会因为卡多而减少显存", "减少", True),  # …unless the negation sits right before it
        ("不然每张卡的参数会越来越不一样", "参数", False),  # 不然 means otherwise
    ],
)
def test_because_cuts_a_negation_and_otherwise_is_no_negation(text: str, word: str, expected: bool) -> None:
    start = text.index(word)
    assert negated(text, start, start + len(word)) is expected


def test_a_refutation_with_qishi_refutes() -> None:
    assert status_at("all-reduce 会自动求平均，这其实不对：它只负责求和。", "平均") == "refuted"


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("GPU-Util 只看有没有 kernel 在跑，不等于 MFU。", "mfu", "asserted"),  # an embedded A-not-A
        ("要是用纯 SGD，优化器几乎不占显存。", "sgd", "hedged"),  # 要是 with a consequence clause
        ("我室友说 DP 能省显存，我觉得他搞错了。", "省", "reported"),
        ("有人说重计算让训练变快了，这是误会。", "变快", "reported"),
    ],
)
def test_more_reported_speech_refutations_and_embedded_questions(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status


def test_doubting_replies_hedged_a_not_a_and_ke_as_but() -> None:
    first = split_sentences("TP 非得放节点内吗？其实未必，跨节点也能跑。")[0]
    assert first.answered == "negative"
    assert split_sentences("TP 跨不跨节点影响不大。")[0].status == "asserted"
    assert status_at("很多人以为激活越少，可 1F1B 下第一个 stage 挂着 pp 份激活。", "挂着") == "asserted"


def test_a_quoted_report_ends_at_the_closing_quote_and_at_the_students_rejection() -> None:
    text = "网上看到说“cf 调大就能解决不均衡”，我觉得站不住：cf 大只会多 padding。"
    assert status_at(text, "解决") in ("reported", "refuted")
    assert status_at(text, "padding") == "asserted"


def test_a_contrast_ends_a_condition_and_more_reports_and_replies() -> None:
    text = "如果 mbs=1 还放不下，可以再叠加激活重计算，不过重计算会带来轻微的数值误差。"
    assert status_at(text, "放不下") == "hedged" and status_at(text, "误差") == "asserted"
    assert status_at(text, "叠加") == "asserted"  # the consequent
    assert status_at("有篇博客说 FA 是近似算法，其实它是精确的。", "近似") == "reported"
    assert split_sentences("梯度累积的更新和大 batch 一样吗？不一样。")[0].answered == "negative"


# --- round 4 ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "word", "expected"),
    [
        # long names and English words no longer push the cue out: distance is counted in words
        ("data parallelism does not by itself reduce", "reduce", True),
        ("并不会让 LayerNorm 之后的 all-reduce 通信量增加", "增加", True),
        ("不会因为 gradient accumulation 的步数变多而变慢", "变慢", True),  # 不会 reaches across 因为
        ("不需要在 backward 结束后立刻做 all-reduce 同步", "同步", True),
        # ...but a cue too many words away belongs to a predicate of its own
        ("没有人会怀疑这个方案在大规模训练集群里跑起来以后每张卡上的显存会降低", "降低", False),
        # two cues negate together only when they stand together
        ("不是不能降低", "降低", False),
        ("不能 fully overlap（没法像 DP 那样完全隐藏）", "隐藏", True),
        ("所以不能说 TP 不省显存", "省", False),  # 不能说 negates the whole statement
    ],
)
def test_negation_distance_is_counted_in_words(text: str, word: str, expected: bool) -> None:
    s = split_sentences(text)[0].text
    start = s.index(word.lower())
    assert negated(s, start, start + len(word)) is expected


@pytest.mark.parametrize(
    ("text", "word", "expected"),
    [
        ("流水线并行能减少气泡是不对的", "减少", True),
        ("序列并行会增加通信量是不需要的", "增加", True),
        ("把 TP 放到跨节点是不行的", "放到", True),
        ("说 ZeRO 切分激活这种说法不成立", "切分", True),
        ("an all-reduce after the column-parallel layer is not needed", "all-reduce", True),
        ("this overlap is false", "overlap", True),
        ("流水线并行能减少气泡，是不对的说法太多了", "减少", False),  # the negator is in another clause
        ("流水线并行能减少气泡是对的", "减少", False),
    ],
)
def test_a_negator_closing_the_clause_negates_the_predicate(text: str, word: str, expected: bool) -> None:
    s = split_sentences(text)[0].text
    start = s.index(word.lower())
    assert negated(s, start, start + len(word)) is expected


@pytest.mark.parametrize(
    ("text", "answered"),
    [
        ("流水线并行不能消除气泡吗？对，不能。", "negative"),  # the echoed verb decides
        ("流水线并行不能消除气泡吗？对，不是。", "negative"),
        ("流水线并行不能消除气泡吗？不对，能。", "positive"),
        ("流水线并行不能消除气泡吗？是的。", "agree"),  # as worded: it cannot
        ("流水线并行不能消除气泡吗？不对。", "flip"),
        ("流水线并行能消除气泡吗？对。", "positive"),
        ("难道 1F1B 不能减少激活吗？是的。", "positive"),  # agreeing with a rhetorical question: it can
    ],
)
def test_replies_to_negative_questions(text: str, answered: str) -> None:
    assert split_sentences(text)[0].answered == answered


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("如果把 pp 加到 16，激活就能降到一半。", "pp", "hedged"),
        ("如果把 pp 加到 16，激活就能降到一半。", "降到", "asserted"),
        ("要是显存够大就不用切分了。", "够大", "hedged"),  # 就 opens the consequent inside the clause
        ("要是显存够大就不用切分了。", "切分", "asserted"),
        ("when the batch is small, the bubble grows", "small", "hedged"),
        ("when the batch is small, the bubble grows", "grows", "asserted"),
        ("if it fits then we skip recomputation", "skip", "asserted"),
    ],
)
def test_only_the_antecedent_of_a_condition_is_hypothetical(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("张量并行切分权重，流水线能消除气泡是错的。", "切分", "asserted"),
        ("张量并行切分权重，流水线能消除气泡是错的。", "消除", "refuted"),
        ("张量并行切分权重，流水线能消除气泡，这是误解。", "切分", "asserted"),
        ("张量并行切分权重，流水线能消除气泡，这是误解。", "消除", "refuted"),
        ("流水线能消除气泡，因为 stage 多了，这是错误的。", "消除", "refuted"),
        ("“流水线能消除气泡”的说法，至少在 1F1B 下是错的。", "消除", "refuted"),
        ("TP 需要 all-reduce，这是对的，但流水线能消除气泡是错的。", "all-reduce", "asserted"),
    ],
)
def test_a_refutation_refutes_the_clauses_it_points_back_to(text: str, word: str, status: str) -> None:
    assert status_at(text, word.lower()) == status


# --- the literal prefilter: it may only skip sentences where a term cannot match ---------------
@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"(?<![a-z0-9_])(?:dp)(?![a-z0-9_])|(?:数据并行)", "我们用 DP 训练"),
        (r"(?:(砍|省|少)(了|掉)?(一半|50 ?%))", "显存省掉50%"),
        (r"zero-?1[^。]{0,30}优化器", "zero1 只切分了优化器"),
        (r"(?:all[-_ ]?reduce)+之后", "allreduce之后"),
        (r"\(p-1\)m", "通信量是 (P-1)M"),
        (r"distributed", "dıstributed"),  # re.IGNORECASE reads the dotless ı as i
        (r"sharding", "ſharding"),  # and the long ſ as s
        (r"(?:(?P<x>梯度)(?P=x))?同步", "梯度同步"),
    ],
)
def test_the_prefilter_never_skips_a_sentence_where_a_term_matches(pattern: str, text: str) -> None:
    rx = re.compile(pattern, re.IGNORECASE)
    need = anchors(rx)
    assert rx.search(text) and need is not None
    assert any(a in folded(text) for a in need)


def test_one_scan_finds_every_sentence_that_holds_a_literal_of_each_term() -> None:
    """Overlapping literals, literals that are prefixes of others, and one literal in several sentences."""
    terms = [re.compile(p, re.IGNORECASE) for p in (r"显存", r"显存占用|存占", r"zero-?3", r"zero", r"占用率", r"pp")]
    sentences = ["zero-3 把显存占用降到", "显存占用率", "没有关系", "ppp 和 zero"]
    located = Index(terms).locate([folded(s) for s in sentences])
    for rx in terms:
        expected = {k for k, s in enumerate(sentences) if any(a in folded(s) for a in anchors(rx) or ())}
        assert located.get(id(rx), set()) == expected, rx.pattern


@pytest.mark.parametrize("pattern", [r"\u6570据", r"(?i)dp", r"[ab]", r"a|.", r"(?:x)?"])
def test_a_term_the_prefilter_cannot_read_is_always_searched(pattern: str) -> None:
    assert anchors(re.compile(pattern)) is None


def test_the_prefilter_folds_every_character_that_ignorecase_matches_to_a_letter() -> None:
    """ı and ſ are the only characters besides its cases that re.IGNORECASE matches to an ASCII letter."""
    every = "".join(chr(n) for n in range(sys.maxunicode + 1) if not 0xD800 <= n <= 0xDFFF)
    for letter in string.ascii_lowercase:
        for ch in set(re.findall(letter, every, re.IGNORECASE)):
            assert letter in folded(ch), (letter, hex(ord(ch)))


# --- round 5: dashes, reporters with inner words, refutations, punctuated replies --------------
@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("说流水线没有气泡是不对的——气泡一直都在。", "没有气泡", "refuted"),
        ("说流水线没有气泡是不对的——气泡一直都在。", "一直", "asserted"),
        ("有人说流水线没有气泡——我的看法是气泡一直都在。", "一直", "asserted"),
        ("有同学据此说流水线没有气泡。", "没有气泡", "reported"),
        ("我师兄一直坚持认为流水线没有气泡。", "没有气泡", "reported"),
        ("网上有篇文章就声称流水线没有气泡。", "没有气泡", "reported"),
        ("流水线没有气泡，这种说法站不住脚。", "没有气泡", "refuted"),
        ("pipelines have no bubble, that's a myth.", "bubble", "refuted"),
        ("pipelines have no bubble is just wrong.", "bubble", "refuted"),
    ],
)
def test_dashes_reporters_and_refutations(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status


def test_a_dash_ends_the_negation_scope() -> None:
    text = "流水线并不复杂——气泡会变小。"
    s = split_sentences(text)[0]
    assert not negated(s.text, s.text.index("变小"), s.text.index("变小") + 2)


@pytest.mark.parametrize(
    ("text", "answered"),
    [
        ("流水线会有气泡吗？Yes.", "positive"),
        ("流水线会有气泡吗？No.", "negative"),
        ("流水线会有气泡吗？Yes, 填充和排空时都有。", "positive"),
        ("流水线会有气泡吗？是的。填充阶段就有。", "positive"),
        ("加卡能省显存吗？没用的。", "negative"),
    ],
)
def test_punctuated_replies_answer_the_question(text: str, answered: str) -> None:
    assert split_sentences(text)[0].answered == answered


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("开不开重计算，每层的激活都得存下来。", "asserted"),  # an A-not-A clause followed by a statement
        ("用损失是否下降来判断学习率是否合适。", "asserted"),  # a full stop: a statement
        ("HFU 和 MFU 区别在于有没有把重计算算进去。", "asserted"),
        ("两种切法的结果大差不差。", "asserted"),  # no A-not-A at all
        ("重计算到底划不划算", "question"),  # last clause, no full stop
        ("是否需要重计算", "question"),
        ("要先确定是否需要重计算", "asserted"),  # embedded after a verb
    ],
)
def test_only_a_sentence_that_reads_as_a_question_is_one(text: str, status: str) -> None:
    assert split_sentences(text)[0].status == status


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("舍友坚持认为流水线没有气泡，我指出第一个 stage 要等。", "气泡", "reported"),
        ("舍友坚持认为流水线没有气泡，我指出第一个 stage 要等。", "要等", "asserted"),
        ("师妹担心梯度会溢出，这话不对，bf16 范围够大。", "范围", "asserted"),
        ("小张写的代码里 loss 没除以步数。", "除以", "asserted"),  # 写 with no report: 小张 is not followed by it
        ("所谓流水线气泡，就是 stage 空等的时间。", "空等", "asserted"),
    ],
)
def test_people_report_and_the_students_correction_ends_the_report(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status


def test_a_comma_in_a_formulas_brackets_is_no_clause_boundary() -> None:
    text = "每层前向要做形状为 (b,s,h) 的 all-reduce，反向也一样"
    s = split_sentences(text)[0].text
    assert [m.start() for m in _CLAUSE_END.finditer(s)] == [s.index("all-reduce") + len("all-reduce")]
    aside = "比如 (tp，通信多)，"  # a Chinese aside in brackets keeps its clauses
    assert len(list(_CLAUSE_END.finditer(aside))) == 2


@pytest.mark.parametrize("text", ["不管显存够不够", "两者的区别在于有没有算上重计算"])
def test_an_unpunctuated_indirect_question_is_no_question(text: str) -> None:
    assert split_sentences(text)[0].status == "asserted"


def test_a_classmate_who_was_right_is_endorsed_and_qianwan_bie_negates() -> None:
    assert status_at("那位学长没说错，流水线确实有气泡。", "气泡") == "asserted"
    text = "千万别把显存占用率当成利用率"
    start = text.index("当成")
    assert negated(text, start, start + 2)


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("要是 all-reduce 本来就会求平均就好了，可惜它只会求和。", "求平均", "hedged"),
        ("要是 all-reduce 本来就会求平均就好了，可惜它只会求和。", "求和", "asserted"),
        ("如果 DP 能省显存，那就用不着 ZeRO 了，但实际上它不能。", "用不着", "hedged"),
        ("如果 DP 能省显存，那就用不着 ZeRO 了，但实际上它不能。", "它不能", "asserted"),
        ("假如通信不要时间，扩展就是线性的，其实通信不可能不要时间。", "线性", "hedged"),
        ("如果把 pp 加到 16，激活就能降到一半，但其实 pp 不能无限加。", "降到一半", "asserted"),
        ("如果 micro-batch 再多一些，气泡就会小很多，效果也就更好。", "小很多", "asserted"),
    ],
)
def test_a_counterfactual_consequent_is_hypothetical(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("“流水线越深气泡越小”是很常见的误解。", "气泡越小", "refuted"),
        ("“流水线越深气泡越小”是非常典型的误区。", "气泡越小", "refuted"),
        ("说 EP 只传权重，这话一点道理都没有。", "只传权重", "refuted"),
        ("有文章说 EP 只传权重，那句话毫无道理，它传的是 token。", "传的是", "asserted"),
        ("EP 只传 token，这话有道理。", "只传", "asserted"),
    ],
)
def test_a_refutation_may_grade_the_misconception_and_call_it_baseless(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status


@pytest.mark.parametrize(
    ("text", "word", "expected"),
    [
        ("开了重计算以后每一步反而比不开慢一些", "慢", False),  # 比不开 names the baseline
        ("切了 ZeRO 之后比没有 ZeRO 时省显存", "省", False),
        ("DP 比不上 ZeRO 省显存", "省", True),  # 比不上 is "cannot match": a negation
        ("ZeRO-1 可不是把参数也切开了", "切开", True),  # emphatic 可 glued to 不是
        ("这个 batch 能不能放下主要看显存", "能放下", False),  # the A-not-A runs into the head
        ("PP 分不分组对气泡影响不大", "分组", False),
        ("TP 的通信量 ≠ PP 的通信量", "pp", True),
        ("TP 的通信量 != PP 的通信量", "pp", True),
    ],
)
def test_comparisons_choices_and_signs(text: str, word: str, expected: bool) -> None:
    s = split_sentences(text)[0].text
    start = s.rindex(word.lower())
    assert negated(s, start, start + len(word)) is expected


def test_rushuo_opens_a_condition() -> None:
    text = "如果说 TP 的通信能藏起来，那也只能藏住一部分。"
    assert status_at(text, "藏起来") == "hedged"
    assert status_at(text, "一部分") == "asserted"


@pytest.mark.parametrize(
    ("text", "answered"),
    [
        ("参数切成 N 份，每卡只存 1/N，这不是很省吗？", "agree"),  # asserts what it holds, as worded
        ("难道不是 TP 的通信更多吗？", "agree"),
        ("难道 TP 不能跨节点吗？", "flip"),  # the 不 is the predicate's own
        ("两种算法的结果相同吗？不完全相同。", "negative"),
        ("流水线的气泡多吗？当然不多。", "negative"),
        ("反向的通信量比前向高吗？不高。", "negative"),
        ("TP 的吞吐能线性增长吗？不完全是。", "negative"),
        ("需要再同步一次吗？不用——每张卡已经有完整的梯度。", "negative"),  # a dash after the reply
        ("流水线的气泡多吗？不少。", None),  # 不少 means "many": no negative reply
        ("ZeRO-3 的通信能被预取藏起来吗？不能完全藏住。", "negative"),  # a reply that says how far it goes
        ("ZeRO-3 的通信能被预取藏起来吗？能完全藏住。", "positive"),
    ],
)
def test_rhetorical_negations_and_negative_replies(text: str, answered: str | None) -> None:
    assert split_sentences(text)[0].answered == answered


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("觉得 TP 能跨节点的人，是把 NVLink 当成了网卡。", "跨节点", "reported"),
        ("这种认为流水线没有气泡的说法，忽略了填充和排空。", "没有气泡", "reported"),
        ("这种认为流水线没有气泡的说法，忽略了填充和排空。", "排空", "asserted"),
        ("ZeRO-2 也切分了激活，这是把梯度和激活搞混了。", "切分了激活", "refuted"),
        ("TP 只在反向通信，这是混淆了 TP 和 DP。", "反向通信", "refuted"),
        ("TP 只在反向通信。这是把 TP 和 DP 弄混了。", "反向通信", "refuted"),
        ("我觉得 TP 通信多的原因是每层都要同步。", "每层", "asserted"),
        ("有人会想把 TP 开到跨节点也没事，其实跨节点带宽差太多。", "跨节点也没事", "reported"),
        ("我的想法是把 TP 留在节点内。", "节点内", "asserted"),  # 想法 is a noun, no report
    ],
)
def test_reporting_phrases_and_mix_ups(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status


def test_abbreviations_and_not_equal_end_no_sentence() -> None:
    text = "Memory grows w.r.t. the batch, e.g. activations, i.e. approx. linearly. TP vs. PP differs, etc. too."
    assert len(split_sentences(text)) == 2
    assert len(split_sentences("ZeRO-3 的通信量 != DP 的通信量！所以更慢。")) == 2


# --- round 8: etc. ending a sentence, double negations in refutations, retractions, purposes ---------
def test_etc_before_a_capital_letter_ends_the_sentence() -> None:
    texts = [s.text for s in split_sentences("We tried ZeRO, FSDP, etc. DP alone keeps a full copy.")]
    assert len(texts) == 2 and texts[1].strip().startswith("dp alone")
    assert len(split_sentences("ZeRO、FSDP etc. 都能切分优化器状态。")) == 1  # a list goes on
    assert len(split_sentences("We compared DP vs. ZeRO on memory.")) == 1  # vs. names what follows


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("说流水线没有气泡，这个说法我不能不反对。", "没有气泡", "refuted"),  # 不能不反对: must object
        ("流水线没有气泡——这是我一开始的想法，后来发现不对。", "没有气泡", "refuted"),
        ("我以前也以为流水线没有气泡，后来才知道气泡一直在。", "没有气泡", "reported"),
        ("我以前也以为流水线没有气泡，后来才知道气泡一直在。", "一直", "asserted"),
        ("为了让流水线没有气泡，得用交错调度。", "没有气泡", "hedged"),  # a goal
        ("要让气泡变小，需要更多的 micro-batch。", "变小", "hedged"),
        ("每个 stage 要等上一级，需要的时间更长。", "等上一级", "asserted"),  # 要 = has to: no goal
    ],
)
def test_retractions_refusals_and_purposes(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status


@pytest.mark.parametrize(
    ("text", "word", "status"),
    [
        ("有人算出流水线没有气泡，其实不对。", "没有气泡", "reported"),  # someone else's result
        ("室友测到流水线没有气泡。", "没有气泡", "reported"),
        ("隔壁组发现流水线没有气泡。", "没有气泡", "reported"),
        ("我算出流水线没有气泡。", "没有气泡", "asserted"),  # the student's own result is a claim
    ],
)
def test_a_result_found_by_someone_else_is_reported(text: str, word: str, status: str) -> None:
    assert status_at(text, word) == status

"""Score short answers by key points, and veto answers that assert a known misconception.

Terms are regular expressions over characters; cues are read as words (jieba). The text is
normalised (Traditional → Simplified, NFKC, lower case, invisible characters dropped) and cut into
sentences and clauses; a pattern is a *head* (the predicate) plus groups, or a claim that binds the
predicate to its subject. Negation is read off the head alone: the parity of cue words at most a
few words before it in its clause, plus negators after it (解决不了, …是不对的). A question, a
reported belief, a refuted clause or the antecedent of a condition is not the student's own
assertion (a condition's consequent is): it earns no key point that needs an assertion, and it
never fires a veto. Every veto match that is suppressed is recorded with why. Only visible prose
is read (HTML comments, hidden elements and link targets are dropped), and a key point needs a
sentence that states something: a bare list of terms, or a sentence copied from the question, earns
none (docs/rubric.md).

Student text is hostile: it is only ever matched against regular expressions, never executed; it
is cut at ``MAX_ANSWER_CHARS`` and every pass over it is bounded (matches per sentence, regions per
sentence), so that no answer can keep the grader busy; evidence shown back is made safe to print.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import sys
import tempfile
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .errors import SourceError
from .lesson import QUESTION_IDS, QUESTION_POINTS
from .literals import Index, folded
from .text import clean
from .yamlio import load_yaml

if TYPE_CHECKING:
    import opencc

# --- bounds ------------------------------------------------------------------------------------
# An honest answer to one question is a few hundred characters; 3000 leaves a wide margin and
# bounds the work a pasted essay (or a 45 KB repeated clause) can cause.
MAX_ANSWER_CHARS = 3000
MAX_HITS = 256  # matches of one term kept per sentence
MAX_HEADS = 64  # head matches tried per pattern and sentence
MAX_REGIONS = 16  # reported/refuted spans kept per sentence
RUN_ON_CLAUSES = 6  # a vetoed sentence this long keeps the key points of clauses outside the vetoed claim
MAX_OPTIONS = 4  # statements kept per key point when each key point is given a statement of its own

# --- student-facing notes (Chinese) ------------------------------------------------------------
NOTE_TRUNCATED = "答案超过 {limit} 个字符，只评阅了前 {limit} 个字符，后面的内容没有计分。"
NOTE_NO_CHINESE = "本题按中文作答评阅：答案中没有找到中文内容，请用中文回答。"
NOTE_LIST = "有的句子只罗列了术语，没有说明它们之间的关系，这样的句子不计分：请用完整的句子写出你的理由。"
NOTE_COPIED = "有的句子基本是照抄题目，照抄题目的句子不计分：请用自己的话回答。"

# --- statements, not keyword lists -----------------------------------------------------------
# A key point is earned only by a sentence that reads as a statement. A sentence is a keyword
# list when none of these glue its terms together: a function or predicate character outside the
# rubric's terms, an English function word, a relation sign, or two terms written as one phrase
# (no separator between them, as in 切优化器状态). See ``_bare_terms``.
FUNCTION_CHARS = frozenset(
    "是会能要把被让的了在因所需可就都也还再才又将对为从由到给向于以而并且则使得着过有没不无非比与和及或即"
    "等各每只仅很更最越太这那其它之该应当若如够却但用做令致靠随占"
    "先共计走切分存放算传发收省降增减加乘除跑取换拆拼留花读写变成含超达涨掉快慢"  # predicates of this course
)
_EN_FUNCTION = re.compile(
    r"(?<![a-z])(?:is|are|was|were|be|because|so|the|an?|of|to|in|must|can|will|only|than|when|after|before"
    r"|and|or|with|by|for|on|not|no|it|this|that|each|per)(?![a-z])"
)
_RELATION = re.compile(r"[=≈<>≤≥≠→⇒∝]|约|大约|(?<![a-z])vs(?![a-z])")  # states a value or compares
_LIST_SEPARATORS = frozenset("+|&*#~^`·•")
# A term with a gap of any characters (zero-1[^。]{0,30}优化器) spans a whole clause: it relates
# words rather than naming one, so it does not count as a term when a keyword list is recognised.
_GAP = re.compile(r"\[\^[^\]]*\][*+{]|\.[*+{]")
# --- copied question text --------------------------------------------------------------------
# A sentence copied from the question earns nothing: one whose Chinese characters are, for at least
# COPY_SHARE, inside runs of at least COPY_RUN letters/digits that also occur in the question.
COPY_RUN = 6
COPY_SHARE = 0.6

# --- cue lists -------------------------------------------------------------------------------
_NEG_CUES = [
    "并不是",
    "并没有",
    "并非",
    "并不",
    "不是",
    "没有",
    "无法",
    "无需",
    "不需要",
    "不需",
    "不用",
    "不必",
    "不能",
    "不会",
    "不可能",
    "不可以",
    "不再",
    "未能",
    "未必",
    "毋须",
    "不",
    "没",
    "无",
    "未",
    "非",
    "别",
    "勿",
    "not",
    "no",
    "never",
    "cannot",
    "can't",
    "doesn't",
    "don't",
    "isn't",
    "won't",
    "without",
    "≠",  # ZeRO-3 通信量 ≠ DP 通信量 denies the comparison it stands in
    "!=",
]
# Words that contain a cue character but do not negate what follows.
_FALSE_CUES = [
    "区别",
    "差别",
    "分别",
    "特别",
    "别的",
    "类别",
    "不仅",
    "不只",
    "不但",
    "不光",
    "不论",
    "无论",
    "不管",
    "不断",
    "不少",
    "不同",
    "不过",
    "非常",
    "无限",
    "未来",
    "除非",
    "无非",
    "不外乎",
    "毫无疑问",
    "不得不",
    "非得",
    "非线性",
    "并非只",
    "不止",
    "无关紧要",
    "不一样",
    "无穷",
    "别人",
    "不然",
    "级别",
    "个别",
    "识别",
    "告别",
    "鉴别",
    "不平衡",
    "不均衡",
    "不均匀",
    "非均匀",
    "非交错",
    "不交错",
    "不分块",
    "不对称",
    "差不多",
    "了不起",
    "大不了",
    "说不定",
    "大差不差",  # "about the same": neither a negation nor an A-not-A
    "别忘",  # 别忘了 X: a reminder that X holds
]
_FALSE_CUES_AFTER_YUQI = [*_FALSE_CUES, "不如"]
_POST_NEG = re.compile(r"^(?:不了|不下|不到|不动|不成|不起|不开|不完)")
_A_NOT_A = re.compile(r"([\u4e00-\u9fff])[不没]\1")
_TERMINATORS = re.compile(r"但是|但|然而|而是|可是|却|所以|因此|因为|由于|否则|的时候|时候|时|—+|but")
_CAUSAL = frozenset({"所以", "因此", "因为", "由于"})  # terminators that a negation right before them reaches across
_QUESTION_END = re.compile(r"(?:吗|么|呢)\s*[?？]?\s*$|[?？]\s*$")
_QUESTION_CUES = re.compile(r"难道")  # a rhetorical question wherever it stands
# 是否 / whether and A-not-A forms ask only when nothing declarative follows them (see ``_asks``).
_WHETHER = re.compile(r"是否|whether")
# A sentence closed by a full stop is a statement, whatever it embeds (开不开重计算，计算量都差不多。).
_FULL_STOP = re.compile(r"[。.!;]\s*$")
# An A-not-A inside a statement that says it does not matter (用不用 ZeRO 都一样) asks nothing.
_WHETHER_OR_NOT = re.compile(
    r"都(?:一样|行|可以|相同|没关系|无所谓|不影响)|没(?:有)?(?:什么)?关系|无关|区别不大|影响(?:都)?不大|无所谓|不影响"
)
# Verbs that embed a yes/no question as their object (只看有没有 kernel 在跑, 取决于是不是).
_EMBEDDING_VERBS = re.compile(r"看|取决于|判断|知道|决定|在于|关心|检查|确认|确定|问|区别")
# After one of them, or after a concessive (不管够不够), an A-not-A makes no question of the sentence.
_EMBEDS = re.compile(rf"{_EMBEDDING_VERBS.pattern}|管|无论|不论")
EMBED_CHARS = 12  # how far before 是否 / an A-not-A an embedding verb is looked for, within its clause


def _asks(text: str) -> bool:
    """Does 是否 / whether or an A-not-A form (能不能, 有没有) make this sentence a question?

    Only when it is the last thing the sentence says: an unpunctuated sentence whose last clause holds
    it, not after a verb that embeds it (判断路由是否均衡, 看有没有). A sentence closed by a full stop,
    or whose A-not-A clause is followed by a statement clause, is a claim that merely mentions a choice
    (开不开重计算，计算量都差不多), and reading it as a question would drop the claim.
    """
    if _FULL_STOP.search(text) or _WHETHER_OR_NOT.search(text):
        return False
    masked = _mask(text, _FALSE_CUES)
    last = 0
    for c in _CLAUSE_END.finditer(masked):
        last = c.end()
    cues = _choice_cues(masked, text, last)
    return any(not _EMBEDS.search(text, max(last, m.start() - EMBED_CHARS), m.start()) for m in cues)


def _choice_cues(masked: str, text: str, pos: int = 0) -> list[re.Match[str]]:
    """是否 / whether (whole words) and A-not-A forms from ``pos`` on: where a yes/no choice is named."""
    return [m for m in _WHETHER.finditer(masked, pos) if _whole(m, text)] + list(_A_NOT_A.finditer(masked, pos))


_PEOPLE = (
    r"同桌|室友|舍友|师弟|师妹|师兄|师姐|学长|学姐|学弟|学妹|同学|队友|同事|朋友|老师|助教|导师|网友|别人"
    r"|隔壁组|组里有人|组里的人|组长|同组的人"
)
# Someone else's result is reported as theirs (有人算出…, 室友测到…); the student's own (我算出) is a claim.
_FOUND = r"(?:算出|算得|测出|测到|测得|看到|发现|得出)"
_SAYS = rf"(?:说|写|讲|担心|觉得|以为|认为|坚持|{_FOUND})"
# When a belief was held: 我一开始以为…, 这是我最初的想法 report a belief the student has left behind.
_FORMER = r"(?:一开始|刚开始|开始时|一开头|最初|起初|原来|原先|以前|之前|当初|本来|曾经|过去)"
_RETRACTED = (
    rf"(?:这|那)(?:只|也)?(?:是|曾是|曾经是)我{_FORMER}的(?:想法|看法|理解|猜测|直觉|印象|误解|结论)"
    r"(?![^。!?;]{0,12}(?:仍然|依然|还是|至今)(?:这么|这样)?(?:认为|觉得|想))"  # …，现在我仍然这么认为: still held
)
_REPORTED = re.compile(
    # A reporter, a few words, then the verb: 有同学据此说, 有人就会说, 网上有文章声称, 我室友坚持认为,
    # 有人会想.
    r"(?:有(?:人|些人|的人|同学|朋友|网友)|网上有(?:篇|个|些)?(?:文章|帖子|博客|人)|我(?:的)?(?:室友|同学|朋友|同事|师兄|师姐)"
    rf"|很多人|不少人|别人)[^,:;，：；。!?]{{0,6}}?(?:说|认为|觉得|声称|以为|宣称|想(?!法)|{_FOUND})(?![得的](?:对|没错|有道理))"
    r"|(?<![a-z])(?:someone|people|a (?:blog|post|friend|classmate|tutorial)|my (?:friend|roommate|classmate)"
    r"|some (?:people|posts?|blogs?))(?: [a-z]+){0,3}? (?:claims?|says?|thinks?|believes?)(?![a-z])|"
    r"有人(?:会)?(?:认为|说|以为|觉得|主张|声称|担心|想(?!法))|(?:网上|论坛)?有(?:篇|个|些|的)?(?:帖子|博客|文章|资料|教程|回答)(?:里|上|中)?(?:说|写着?|认为|称)|(?:教程|帖子|博客|文章|资料)(?:里|上|中)(?:说|写着?|认为|称)|网上(?:常|经常|都)?(?:看到|有人)?(?:说|写)|有的(?:资料|文章|博客|人|教程)(?:上)?(?:写|说|认为)|(?:很多|不少|许多|一些|常有)(?:人|博客|文章|资料)?(?:认为|以为|觉得|说|误以为|宣称|声称)|误以为|误认为|错误地认为|"
    r"以为|据说|听说|宣称|声称|号称|有(?:一)?种说法|"
    # A former belief of the student's own (我以前以为, 我一开始也觉得, 起初我认为): a report, until 后来/其实.
    rf"我(?:也|还)?{_FORMER}(?:也|还|一直)?(?:觉得|认为|以为|想|猜|相信)|{_FORMER}我(?:也|还)?(?:觉得|认为|以为|想|猜|相信)|"
    # A person (同桌, 室友, 隔壁组, 组里有人) or 小+one-character name, then within a few words a verb of
    # saying or believing: 同桌说, 室友跟我说, 学长以为, 小王也说. Not 说得对 / 说明 / 说法.
    rf"(?:{_PEOPLE}|(?:(?<![\u4e00-\u9fff])|(?<=[听跟和问]))小[\u4e00-\u9fff](?=(?:跟我|和我|对我|也|还|就|一直)?{_SAYS}))"
    rf"[^,:;，：；。!?]{{0,6}}?{_SAYS}(?![得的](?:对|没错|有道理)|明|法|错)(?<![写讲](?=的))|"
    r"(?:直觉上|乍看|表面上|容易)(?:会)?(?:觉得|以为|认为)|会觉得|"
    # A first reaction is a belief reported, until a contrast: 第一反应是 X，但…; 我的直觉是 X.
    r"(?:我的|我)?(?:第一反应|第一感觉|第一直觉|第一印象|直觉)(?:上)?(?:是|会是|就是|告诉我|会(?:觉得|以为|认为))|"
    r"(?:一种|常见的?|典型的?)(?:误解|错误观点|错误说法|说法|看法)(?:是|认为)?|乍一看|乍看之下|表面上看|some people (?:think|say|believe)"
)
# "说 DP 能省显存的人，是把…" / "这种认为…的说法": a noun phrase that reports a belief, opening a clause.
# Only the phrase is reported; what the clause goes on to say of it is the student's own.
_REPORT_NP = re.compile(
    r"(?:^|(?<=[,:，：]))\s*(?:那些|这些|凡是|所有|这种|那种|一种|这个|那个)?\s*(?:说|认为|觉得|以为|主张|声称)"
    r"[^,:;，：；。!?]{1,40}?的(?:人|同学|那些人|说法|观点|看法|想法)"
)
# A correction by the student ends a report (同桌说 X，我算了一下…): what follows is the student's own.
_CORRECTION = re.compile(
    r"我(?:纠正|指出|提醒|算了(?:一下|下)?|查了|验证了|觉得不对|认为不对|不这么看)"
    r"|(?:这|那)(?:句)?话(?:不对|有问题|不成立|站不住)|(?:他|她|他们|对方)(?:忘了|漏了|搞错了|弄错了|说错了|混淆了)"
)
_CONTRAST = re.compile(
    r"但是|但|然而|可是|(?<=[,，])\s*可(?![以能是见否])|实际上|其实|事实上|而是|后来|现在(?:我)?(?:知道|明白)|however|actually"
)
# "…，这是把 ZeRO 和 DP 搞混了" / "这是混淆了…" / "他是把 A 当成了 B": the clause before is a confusion.
_MIXED_UP = (
    r"(?:这|那|他|她|他们)(?:其实|就|只)?(?:是)?(?:把[^,:;，：；。!?]{1,30}?(?:搞混|弄混|混淆|混为一谈|(?:当成|当作|看成)了)"
    r"|(?:混淆|搞混|弄混)了)"
)
_REFUTATION = re.compile(
    r"(?:这|此|该)(?:种|个|一|样)?(?:说法|观点|理解|看法|想法)?(?:其实|实际上)?(?:是|属于|并|完全)*(?:一种|一个)?(?:错误|错|误解|误区|不对|不正确|不成立)"
    r"|(?:是|属于)(?:一种|一个|个)?(?:完全)?(?:很|非常|最|特别|相当)?(?:常见|典型)?的?(?:错误的?|错的|误解|误区|不对的?|不正确的?)(?:说法|观点|理解|看法)?(?=[,:;。!?]|—|--|$)"
    r"|(?:这|那)(?:种说法|个说法|句话|话)(?:[^,:;，：；。!?]{0,4}?(?:没(?:有)?|毫无)(?:什么|一点)?道理|(?:一点)?道理(?:都|也)没有)"
    r"|(?:这|此)(?:是|属于)?(?:一种|个)?(?:误会|不准确|不严谨)|(?:他|她|他们|对方)(?:搞|说|弄)错了"
    r"|我(?:觉得|认为)?(?:站不住|不同意|不认同|不赞同)|我(?:不能不|不得不|不可能不|必须|要)反对|站不住(?:脚)?|(?:可|并)不是这样|那可不是"
    r"|(?:(?<=[,:，：])|^)\s*没(?:有)?用(?:的|啊|呀)?\s*(?=[,:;。!?]|—|--|$)"
    r"|(?:那)?就(?:大错特错|错|不对)了(?=[,:;。!?]|—|--|$)"  # 说整个耗时跟 p 无关就错了
    # A clause that is only a verdict refutes the clause before it: "X，其实不对" / "X——不对" / "X，这是错的";
    # a verdict on timing judges a what-if's consequence ("等 X 再 Y，那就太晚了" / "…，为时已晚").
    r"|(?:(?<=[,:，：—-]))\s*(?:(?:其实|实际上|事实上|但是|但|可)\s*)?(?:这|那)?(?:(?:是|就|也|都|并)\s*)?"
    r"(?:不对|错了|错的|不正确|不成立|(?:太|有点|已经|就)?(?:晚了|来不及了)|为时(?:已|太)晚)(?:的|啊|呀)?"
    r"\s*(?=[,:;。!?]|—|--|$)"
    rf"|{_MIXED_UP}"
    rf"|{_RETRACTED}"  # X——这是我一开始的想法: the student reports what they no longer hold
    r"|并非如此|其实不然|事实并非如此|that(?:[’']s| is) (?:wrong|a myth|not true|false)|is (?:just |simply |plain |flat )?wrong"
    r"|(?:is|that[’']s|this is) (?:a )?(?:common )?(?:misconception|myth)|this is (?:not true|false|untrue)"
)
_REFUTATION_START = re.compile(
    r"^(?:但|但是|然而|可是|其实)?(?:这|此|该|这种|这个|这一|这样的?)(?:说法|观点|理解|看法|想法)?(?:是|属于|并)?(?:一种|一个)?(?:完全)?(?:错误|错|误解|误区|不对|不正确|不成立)"
    r"|^(?:this|that)(?: is|[’']s) (?:(?:just |simply )?(?:not true|wrong|false|untrue)|a (?:common )?(?:myth|misconception))"
    rf"|^{_MIXED_UP}|^{_RETRACTED}"
    r"|^(?:其实不然|并非如此|事实并非如此|不对|错|没(?:有)?用(?:的|啊|呀)?\s*(?:[,:;。!?]|$)|那可不是|可不是这样)|^(?:但|但是|然而|可是)?(?:其实|实际上|事实上)(?:并)?(?:不会|不是|不对|不然|没有|不成立)"
)
# A condition makes its antecedent hypothetical: it earns key points but fires no veto. A mere softener
# (可能, 好像, 大概) does not withdraw the claim: the veto fires and is flagged for review (``_review``).
_HEDGES = re.compile(r"如果|假如|假设|若|要是|万一|倘若|一旦|(?<![a-z])(?:if|when)\b")
_HEDGE_FALSE = ["不可能", "尽可能", "若干"]
# The period of an abbreviation (w.r.t., e.g., i.e., vs., etc., approx., cf.) ends no sentence.
# The look-behinds follow the period, so they are read only where a period stands.
_ABBREVIATION = (
    r"(?<!w\.r\.t\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)(?<!\betc\.)(?<!\bapprox\.)(?<!\bcf\.)(?<!\bresp\.)"
)
_SENTENCE_END = re.compile(rf"(?:[。?;\n]|!(?!=))+|\.{_ABBREVIATION}(?=\s|$)")  # != is a sign, not a "!"
# A dash (——, —, --) ends a clause like a comma: "…是不对的——…" closes the claim before it.
# A comma inside brackets of formula or code, as in a shape (b,s,h) or f(x, y), separates items, not
# clauses. A bracketed Chinese aside (比如 TP，通信多) may hold clauses of its own, so its commas cut.
BRACKET_CHARS = 80
_DASH = re.compile(r"—+|-{2,}")
# An ellipsis (……, normalised to dots, or a typed ...) trails off one thought before the next: "ring 要
# 5 秒多……我算出来还是树快" holds two clauses.
_ELLIPSIS = r"\.{3,}"
# English writes "DP does not cut memory but ZeRO does" without a comma: the space before "but" ends the
# clause, so the second half is a claim of its own (its subject is not the first half's).
# An arrow (→ ⇒ => ->) between words says "so": "TP 的 all-reduce 不用等 → 不在关键路径上" holds two claims,
# and the 不 before it does not reach across. Between symbols, numbers or Latin names it names a step or a
# change of value (896 → 448 MiB, m → ∞, forward → all-reduce) and stays inside the clause; so it ends a
# clause only when Chinese stands on one side of it.
_ARROW_SIGN = r"(?:→|⟶|⇒|=>|(?<!-)->)"
_ARROW = rf"(?<=[\u3400-\u9fff])\s*{_ARROW_SIGN}|{_ARROW_SIGN}(?=\s*[\u3400-\u9fff])"
_SEPARATOR = re.compile(rf"[,:，：]|{_DASH.pattern}|{_ELLIPSIS}|{_ARROW}|\s(?=but(?![a-z]))")
# The same, for text without an arrow.
_NO_ARROW_SEPARATOR = re.compile(rf"[,:，：]|{_DASH.pattern}|{_ELLIPSIS}|\s(?=but(?![a-z]))")
_ARROW_CHARS = frozenset("→⟶⇒>")
_FORMULA_BRACKET = re.compile(rf"[(\[{{][^()\[\]{{}}\u3400-\u9fff]{{1,{BRACKET_CHARS}}}[)\]}}]")


@functools.lru_cache(maxsize=1024)
def _bracket_masked(text: str) -> str:
    """``text`` with the separators inside a formula's brackets blanked, same length (so offsets hold)."""
    if not any(c in text for c in "([{"):
        return text
    return _FORMULA_BRACKET.sub(lambda m: _SEPARATOR.sub(lambda d: "＿" * len(d.group()), m.group()), text)


@functools.lru_cache(maxsize=1024)
def _separator_for(text: str) -> re.Pattern[str]:
    """The clause separators to search ``text`` with: the arrows' look-arounds cost a search twice as
    much, and most sentences hold no arrow."""
    return _SEPARATOR if not _ARROW_CHARS.isdisjoint(text) else _NO_ARROW_SEPARATOR


def _in_formula_bracket(text: str, i: int) -> bool:
    """Is the separator at ``i`` inside a bracket of formula or code (no Chinese inside)?"""
    return _bracket_masked(text)[i] == "＿" and text[i] != "＿"


class _ClauseEnds:
    """Clause separators (，： and a dash), less those inside a formula's brackets.

    It offers the two calls the engine makes of a compiled pattern, so every clause walk agrees; the
    search runs on the masked text, so its cost stays that of one regular expression.
    """

    def finditer(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        return _separator_for(text).finditer(_bracket_masked(text), pos, endpos)

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        return _separator_for(text).search(_bracket_masked(text), pos)


_CLAUSE_END = _ClauseEnds()
# Negation reaches NEG_WORDS words back from the predicate, inside its clause: words, not characters,
# so that long terms (LayerNorm, all-reduce, gradient accumulation) do not push the cue out. The
# window is also capped at NEG_CHARS characters, which bounds the work per predicate.
NEG_WORDS = 8
NEG_CHARS = 64
NEG_CHAIN = 1  # words that may stand between two cues that negate together (不是不能)
# ≠ / != deny the comparison they stand in (ZeRO-3 通信量 ≠ DP 通信量): its right-hand side, a few words
# at most, not a predicate further on (P 均匀 ≠ 负载均匀（大家都以微弱优势选同一专家）).
_SIGNS = frozenset({"≠", "!="})
SIGN_WORDS = 2
# 不能说 / 不是说 / 不等于说 negate a whole statement: they reach a second cue anywhere in the window
# (不能说 TP 不省参数显存 says TP does save it).
_SAYING = re.compile(r"说|认为|代表|意味着|等于说|让|使|令|导致|造成")
# 并非 / 并不是 deny a whole statement too (并非重计算没有作用), unless they deny a cause (并不是因为…).
_STATEMENT_CUES = frozenset({"并非", "并不是"})
# 非 X 不可 / 非要 X 不行: the two negations assert X ("must"), they do not deny it.
_MUST_TAIL = re.compile(r"[^,:;，：；。!?]{0,12}?不(?:可|行|成)(?![以能])")
STATUSES = ("question", "reported", "refuted", "hedged")


# Cyrillic letters that look Latin (DР with a Cyrillic Р): read as the Latin letter they imitate.
# Greek look-alikes are left alone, since formulas use Greek letters (Ψ, α, β).
_HOMOGLYPHS = dict(zip("АВЕКМНОРСТХУаеорсхуіјѕӏ", "abekmhopctxyaeopcxyijsl"))
_INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad")  # zero-width characters, soft hyphen
_LINE_BREAKS = frozenset("\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")  # read as a line break
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")


# Markup that a rendered notebook does not show as prose (see ``_markup``). Tags follow
# CommonMark's raw-HTML syntax, so that "x<y 而 z>w" stays text, as it does when rendered.
_ATTRS = r"""(?:\s+[a-z_:][\w.:-]*(?:\s*=\s*(?:[^\s"'=<>`]+|'[^']*'|"[^"]*"))?)*\s*"""
_MARKUP = re.compile(
    rf"(?P<comment><!--.*?(?:-->|\Z))"
    rf"|<(?P<tag>[a-z][a-z0-9-]*)(?P<attrs>{_ATTRS})/?>"
    r"|</(?P<close>[a-z][a-z0-9-]*)\s*>"
    r"|(?P<image>!\[[^\[\]\n]*\](?:\([^()\n]*\)|\[[^\[\]\n]*\]))"
    r"|(?P<link>\[[^\[\]\n]*\](?P<target>\([^()\n]*\)|\[[^\[\]\n]*\]))"
    r"|(?P<refdef>^ {0,3}\[[^\[\]\n]+\]:[^\n]*$)",
    re.IGNORECASE | re.DOTALL | re.MULTILINE,
)
_TAG = re.compile(rf"<(/?)([a-z][a-z0-9-]*)(?:{_ATTRS})/?>", re.IGNORECASE)
_HIDDEN_TAGS = frozenset(
    {"script", "style", "template", "noscript", "iframe", "object", "svg", "math", "head", "title"}
)
_HIDDEN_ATTR = re.compile(
    r"(?<![\w-])hidden(?![\w-])|display\s*:\s*none|visibility\s*:\s*hidden|"
    r"(?<![\w-])(?:font-size|opacity|width|height|max-height|max-width)\s*:\s*0(?![.\d]*[1-9])",
    re.IGNORECASE,
)
_VOID_TAGS = frozenset({"br", "hr", "img", "input", "meta", "link", "wbr", "area", "base", "col", "embed", "source"})
_BLOCK_TAGS = frozenset(
    "br p div li ul ol tr td th table h1 h2 h3 h4 h5 h6 hr blockquote pre section details summary".split()
)


# --- text --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sentence:
    index: int
    start: int  # offset of ``text`` in the normalised answer
    text: str  # normalised, used for matching
    original: str  # as the student wrote it, made safe to print: the evidence shown
    status: str  # asserted | question | reported | refuted | hedged
    regions: tuple[tuple[int, int, str], ...]  # (start, end, status) sub-spans with their own status
    raw: str = ""  # the student's text of this sentence, unstripped and unsanitised
    origin: tuple[int, ...] = ()  # origin[k]: index in ``raw`` of the character behind text[k]
    answered: str | None = None  # a question the student answers: positive, negative, agree (as worded), flip


@functools.cache
def _converter() -> opencc.OpenCC:
    """One Traditional → Simplified converter per process, made on first use (loading costs)."""
    import opencc

    return opencc.OpenCC("t2s")


# Words of this course that a general dictionary lacks, so that a cue character inside one of them
# (the 非 of 非均匀, the 无 of 无气泡) is not read as a cue. A fixed list, not the rubrics' terms: the
# segmenter is shared by the whole process, and a grade must not depend on which rubric loaded first.
COURSE_WORDS = (
    "数据并行 张量并行 流水线并行 序列并行 上下文并行 专家并行 梯度累积 梯度累加 优化器状态 混合精度 重计算 "
    "激活值 显存 微批次 全局批 气泡 无气泡 非均匀 负载均衡 通信量 带宽 算术强度 主参数 分片 切分 环形 "
    "非阻塞 无关 无损 不均衡 不均匀 不对称"
).split()


def _private_cache_dir() -> Path:
    """Where jieba keeps its prefix-dictionary cache: a folder only this user can write.

    jieba's default is a fixed name in the shared /tmp, so any local user could plant a cache that
    changes how answers are segmented, and a second user's grader fails to replace it."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "course-grader"
    try:
        base.parent.mkdir(mode=0o700, exist_ok=True)  # never a missing home: that falls through
        base.mkdir(mode=0o700, exist_ok=True)
        info = base.stat()
        if info.st_uid == os.geteuid() and not info.st_mode & 0o022:
            return base
    except OSError:
        pass
    scratch = tempfile.mkdtemp(prefix="course-jieba-")  # private to this process, removed at its exit
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return Path(scratch)


@functools.cache
def _segmenter() -> Any:
    """jieba, initialised once per process with the course's words (loading its dictionary costs ~0.7 s)."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    tokenizer.tmp_dir = str(_private_cache_dir())
    tokenizer.initialize()
    for word in COURSE_WORDS:
        tokenizer.add_word(word, freq=50000)
    return tokenizer


@functools.lru_cache(maxsize=4096)
def word_bounds(text: str) -> frozenset[int]:
    """Offsets where a word starts or ends, so that cues are read as words (要是 is not in 主要是).

    Asked only where a cue was found, and cached per sentence: segmenting is the costliest step."""
    bounds = {0, len(text)}
    for _, a, b in _segmenter().tokenize(text, HMM=False):
        bounds.update((a, b))
    return frozenset(bounds)


def _whole(m: re.Match[str], text: str, offset: int = 0) -> bool:
    """Is the cue ``m`` (found in a window of ``text`` that starts at ``offset``) a word of its own?"""
    bounds = word_bounds(text)
    return offset + m.start() in bounds and offset + m.end() in bounds


def _negates(m: re.Match[str], text: str, offset: int = 0) -> bool:
    """Is the negation cue ``m`` a negation here? It must start a word (不降, 不会) or end one: an
    adverb glued to it (绝不, 毫无, 尚未, 并不) still negates, a cue inside a longer word does not,
    except the 不 of a verb with its complement (得不到, 放不下, 做不完)."""
    bounds = word_bounds(text)
    a, b = offset + m.start(), offset + m.end()
    if _compares(text, a, b):
        return False
    if a in bounds:
        return True
    start = max((k for k in bounds if k < a), default=0)
    if b in bounds:
        return text[start:a] in _NEG_ADVERBS  # 绝不, 毫无, 尚未; not the 别 of 级别
    return m.group() == "不" and start == a - 1 and b + 1 in bounds and bool(_HAN.match(text[a - 1 : a]))


# Adverbs that the segmenter glues to a negation cue (绝不, 毫无, 从未, 并非, 可不是); the word still negates.
# 可 glued to 不 is emphatic (FSDP 可不是 TP): jieba reads 可不是 as one word, "exactly", a sense it
# has only as a reply, where the refutation forms (那可不是) already read it.
_NEG_ADVERBS = frozenset(
    "绝 毫 从 并 决 永 尚 也 都 就 还 亦 而 仍 均 皆 全 可 根本 完全 丝毫 始终 从来 绝对 一概 几乎 压根 千万".split()
)
# 比不开 / 比没有重计算时: a cue right after 比 names the baseline of a comparison (比不开更快 says it
# is faster), it does not negate the predicate. 比不上 / 比不过 / 比不了 are "cannot match": negations.
_COMPARED_TO = re.compile(r"(?:上|过|了)")


def _compares(text: str, a: int, b: int) -> bool:
    """Is the cue text[a:b] the baseline of a comparison (比不开, 比没有 ZeRO 时) rather than a negation?"""
    return a > 0 and text[a - 1] == "比" and not _COMPARED_TO.match(text, b)


def _simplified(text: str) -> str:
    """Traditional → Simplified, one output character per input character.

    The whole text is converted first, so that phrases convert with their context. If that changed
    the length or moved a non-Han character (the offset map would be wrong), every character is
    converted on its own instead, keeping any that would not convert to exactly one character.
    """
    conv = _converter()
    whole = conv.convert(text)
    if len(whole) == len(text) and all(a == b or (_HAN.match(a) and _HAN.match(b)) for a, b in zip(text, whole)):
        return whole
    out = []
    for ch in text:
        one = conv.convert(ch) if _HAN.match(ch) else ch
        out.append(one if len(one) == 1 else ch)
    return "".join(out)


def _markup(text: str) -> dict[int, tuple[int, str]]:
    """Markup that is not visible prose: start -> (end, what to put in its place).

    A rendered notebook shows neither HTML comments, nor hidden elements (``hidden``,
    ``display:none``, ``<script>``...), nor tags, link targets or image alt text: words there
    are not the student's visible answer and must not earn points. Block tags become a line
    break (they end a sentence when rendered); the rest becomes nothing. Spans never overlap;
    an unclosed comment or hidden element hides the rest of the text. Linear: the text after a
    hidden element's start is scanned once, to find its end, and then skipped.
    """
    spans: dict[int, tuple[int, str]] = {}
    pos = 0
    for m in _MARKUP.finditer(text):
        if m.start() < pos:
            continue
        start, end = m.start(), m.end()
        name = (m.group("tag") or m.group("close") or "").lower()
        if m.group("link") is not None:  # keep the link's text, drop '[' and '](target)'
            spans[start] = (start + 1, "")
            start = m.start("target") - 1
        elif m.group("tag") and (name in _HIDDEN_TAGS or _HIDDEN_ATTR.search(m.group("attrs"))):
            if not m.group(0).endswith("/>") and name not in _VOID_TAGS:
                end = _element_end(text, name, end)
        spans[start] = (end, "\n" if name in _BLOCK_TAGS else "")
        pos = end
    return spans


def _element_end(text: str, name: str, pos: int) -> int:
    """Where the element ``name`` opened just before ``pos`` ends: after its matching close tag."""
    depth = 1
    for t in _TAG.finditer(text, pos):
        if t.group(2).lower() == name and not t.group(0).endswith("/>"):
            depth += -1 if t.group(1) else 1
            if depth == 0:
                return t.end()
    return len(text)


def normalise_mapped(text: str) -> tuple[str, tuple[int, ...]]:
    """The text the rubric matches, and for each of its characters the index it came from.

    Markup that is not visible prose is dropped first (``_markup``). Per character: zero-width
    characters and soft hyphens are dropped (they would split a term), other line-separating
    controls become a newline, remaining control characters are dropped, lone surrogates become
    U+FFFD, the rest is NFKC-folded (full-width forms) and lower-cased, which may give several
    characters. Then Traditional becomes Simplified, length-preserving.
    """
    chars: list[str] = []
    origin: list[int] = []
    hidden = _markup(text) if "<" in text or "[" in text else {}
    skip_to = 0
    for i, ch in enumerate(text):
        if i < skip_to:
            continue
        if hidden and i in hidden:
            skip_to, put = hidden[i]
            chars.extend(put)
            origin.extend([i] * len(put))
            continue
        # Han characters and printable ASCII are left alone by NFKC; only their case may change.
        out = ch.lower() if "\u4e00" <= ch <= "\u9fff" or " " <= ch <= "~" else _fold_char(ch)
        if len(out) == 1:
            chars.append(out)
            origin.append(i)
        elif out:
            chars.extend(out)
            origin.extend([i] * len(out))
    return _simplified("".join(chars)), tuple(origin)


def _fold_char(ch: str) -> str:
    """What one character of an answer becomes (see ``normalise_mapped``): "" when it is dropped."""
    if ch in _INVISIBLE:
        return ""
    if ch in _LINE_BREAKS:
        return "\n"
    if "\ud800" <= ch <= "\udfff":
        return "\ufffd"
    if ch not in "\n\t" and unicodedata.category(ch) == "Cc":
        return ""
    return _HOMOGLYPHS.get(ch) or unicodedata.normalize("NFKC", ch).lower()


def normalise(text: str) -> str:
    """The text the rubric matches (see ``normalise_mapped``)."""
    return normalise_mapped(text)[0]


def _safe(raw: str) -> str:
    """Student text made safe to print: no lone surrogates, no control characters but newline."""
    return clean(raw).replace("\t", " ")


def _mask(text: str, words: list[str]) -> str:
    """``text`` with each of ``words`` blanked out, in list order (an earlier word wins an overlap).

    One search for any of the words comes first: most windows hold none, and masking only ever
    removes characters, so a word absent from the text cannot appear while masking.
    """
    if not _any_of(tuple(words)).search(text):
        return text
    for w in words:
        text = text.replace(w, "＿" * len(w))
    return text


@functools.lru_cache(maxsize=64)
def _any_of(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(w) for w in words))


# "We tried ZeRO, FSDP, etc. DP alone keeps a full copy": the period of etc. that a capital letter
# follows (read in the student's text, since matching is lower-cased) ends the sentence as well.
# Only etc. closes a list; e.g., i.e. and vs. are followed by a name (e.g. DP, ZeRO vs. FSDP) mid-sentence.
_ABBREVIATION_END = re.compile(r"(?<![a-z])etc\.(?=\s+[a-z])")


def _sentence_ends(norm: str, origin: tuple[int, ...], original: str) -> list[int]:
    """Where the sentences of the normalised answer end: at 。?!;, line breaks, a period that ends no
    abbreviation, and the period of etc. when a capital letter follows it."""
    ends = {m.end() for m in _SENTENCE_END.finditer(norm)}
    for m in _ABBREVIATION_END.finditer(norm):
        nxt = len(norm[m.end() :]) - len(norm[m.end() :].lstrip()) + m.end()
        if original[origin[nxt]].isupper():
            ends.add(m.end())
    return sorted(ends)


def split_sentences(original: str) -> list[Sentence]:
    """Cut an answer into sentences, each with its status and its original text for evidence."""
    norm, origin = normalise_mapped(original)
    pieces: list[tuple[int, int]] = []
    pos = 0
    for end in _sentence_ends(norm, origin, original):
        pieces.append((pos, end))
        pos = end
    if pos < len(norm):
        pieces.append((pos, len(norm)))
    raw = [(s, e) for s, e in pieces if norm[s:e].strip(" 。!?;\n\t-*•")]
    sentences: list[Sentence] = []
    for i, (s, e) in enumerate(raw):
        text = norm[s:e]
        nxt = norm[raw[i + 1][0] : raw[i + 1][1]].strip() if i + 1 < len(raw) else ""
        status, regions = _status(text, nxt)
        answered = _answered(text, nxt) if status == "question" else None
        if answered == "flip" and _NOT_SO.search(text):
            answered, text = "agree", _NOT_SO.sub(lambda m: m.group(1) + "＿" * len(m.group(2)), text)
        if answered:
            status = "asserted"
            text = _plain_question(text)
        lo, hi = origin[s], origin[e - 1] + 1
        piece = original[lo:hi]
        sentences.append(
            Sentence(
                i,
                s,
                text,
                _safe(piece).strip(),
                status,
                regions,
                piece,
                tuple(o - lo for o in origin[s:e]),
                answered,
            )
        )
    for i in range(1, len(sentences)):
        nxt = sentences[i + 1].text.strip() if i + 1 < len(sentences) else ""
        sentences[i] = _filled(sentences[i - 1], sentences[i], nxt) or sentences[i]
    return sentences


# A what-question answered by naming the thing: "谁能降低每卡显存？当然是 DP。" The question asserts
# nothing; the reply, read with the question's words around it (DP 能降低每卡显存), is the claim.
_WH = re.compile(r"谁|什么|哪(?:一种|一个|一部分|种|个|些|部分|项)?")
_NAMED = re.compile(
    r"\s*(?:答[:：]?\s*)?(?:当然|肯定|显然|自然|答案)?\s*(?:就|当然|应该)?\s*是\s*"
    r"(?P<x>[^,:;，：；。!?\s][^,:;，：；。!?]{0,19}?)\s*(?:了|啊|呀|嘛)?\s*[。.!]?\s*"
)


def _filled(question: Sentence, reply: Sentence, next_text: str) -> Sentence | None:
    """The reply to a what-question (当然是 DP) as a statement: the question with its wh-word replaced by
    what the reply names, mapped back to the student's words of both sentences (for evidence)."""
    if question.status != "question" or question.answered:
        return None
    named = _NAMED.fullmatch(reply.text)
    if named is None:
        return None
    wh = next((m for m in _WH.finditer(question.text) if m.start() in word_bounds(question.text)), None)
    if wh is None:
        return None
    end = len(question.text.rstrip(" ?？\n").removesuffix("呢").removesuffix("吗"))
    if wh.end() > end:
        return None
    x0, x1 = named.span("x")
    shift = len(question.raw)
    text = question.text[: wh.start()] + reply.text[x0:x1] + question.text[wh.end() : end] + "。"
    origin = (
        question.origin[: wh.start()]
        + tuple(shift + o for o in reply.origin[x0:x1])
        + question.origin[wh.end() : end]
        + (shift + reply.origin[-1],)
    )
    raw = question.raw + reply.raw
    status, regions = _status(text, next_text)
    return Sentence(reply.index, reply.start, text, _safe(raw).strip(), status, regions, raw, origin)


# A short reply right after a question: 当然能。/ 不能，因为… / 是的。/ 对，不能。/ 不对，能。
# It may open with agreement (对, 是的) or disagreement (不对) with the question as worded, and may
# echo the verb (能 / 不能), which says the polarity outright. A short negated comparison (不完全一样,
# 不多, 不大, 不高) denies the question's predicate; 不少 / 不小 are left out, they mean "many" / "large".
# A dash may follow the reply (确实不用——…), as a comma may. A reply may say how far it goes
# (不能完全藏 is still a no, 能完全藏住 a yes). A reply may open with how far it holds (本质上一样, 基本上
# 不会), and a worry asked about may be dismissed (会不会拖慢？其实还好 / 问题不大): a no.
_REPLY = re.compile(
    r"^(?:答[:：]?\s*)?(?:(?:当然|肯定|显然|确实|其实|实际上|事实上|答案是|本质上|基本上|大体上|总体上)\s*(?:也)?\s*(?=[^\s,，。;；!?]))?"
    r"(?:(?P<agree>是的|对的|对啊|没错|对|嗯|当然|yes|right)|(?P<disagree>不对|错了|错|no|wrong))?"
    r"\s*[,:，：]?\s*(?:当然|肯定|确实|其实)?\s*(?:也)?\s*"
    r"(?:(?P<no>不能|不会|不是|不行|不可以|不需要|不用|没有用|没用|没有|未必|不一定|不见得|不一样"
    r"|不(?:完全|太|怎么|全|很)?(?:一样|相同|相等|等|多|大|高)|不(?:完全|全|太)是|否|还好|还行|问题不大|影响不大|不)"
    r"|(?P<same>一样|相同|差不多|一回事)|(?P<yes>能|可以|会|是|行|需要|要|有))?"
    r"(?:(?<=能|会|用|行)(?:完全|全部|彻底|真正)[\u4e00-\u9fff]{1,3})?"
    r"\s*(?:的|啊|呀)?\s*(?=[,:;。!?，：；]|—|--|\.(?!\d)|$)"
)
# A question about a difference (有区别吗, 不一样吗) is answered "no" by a reply of sameness (本质上一样).
_ASKS_DIFFERENCE = re.compile(r"区别|差别|差异|不同")
_RHETORICAL = re.compile(r"难道|岂不|何尝|不就|不也|不是[^,:;，：；]*[吗么]")
# "这不是…吗？" / "难道不是…吗？" / "岂不是…": the 不是 only makes the question rhetorical, and the
# sentence asserts what it holds, as worded (层数按 pp 平分，激活也跟着平分，这不是很自然吗？). Its
# 不是 is blanked and the rest read as a statement; 难道 X 不能 Y 吗 keeps "flip", its 不 is X's.
_NOT_SO = re.compile(
    r"(难道|岂|(?:^|(?<=[,:，：\s]))(?:但是?|可是?|而)?\s*(?:这|那))\s*(不是|不就是|不也是)(?=[^?？]*(?:[吗么嘛]|[?？]))"
)


def _plain_question(text: str) -> str:
    """An answered question with its A-not-A form made plain (会不会增加 → 会  增加), same length.

    The 不 of 会不会 only makes the question; read as a negation it would turn the answer around.
    """
    out = list(text)
    for m in _A_NOT_A.finditer(_mask(text, _FALSE_CUES)):
        out[m.start() + 1 : m.end()] = " " * (m.end() - m.start() - 1)
    return "".join(out)


def _answered(text: str, next_text: str) -> str | None:
    """The polarity a question is given by the student: "positive", "negative", or None if left open.

    A question answered in the next sentence (DP 能降低显存吗？当然能。) asserts the predicate with the
    answer's polarity, whatever negation the question itself holds (难道…不能…吗？能。). A rhetorical
    question left unanswered (难道 DP 不能降低显存吗？) asserts the opposite of its wording: "flip". A
    bare 对 / 不对 judges the wording: "agree" (read each predicate as worded) or "flip".
    """
    reply = _REPLY.match(next_text)
    rhetorical = bool(_RHETORICAL.search(text))
    if reply and reply.group("same"):
        # "有区别吗？本质上一样。" says there is none; "一样吗？一样。" says yes.
        return "negative" if _ASKS_DIFFERENCE.search(text) else "positive"
    if reply and (reply.group("no") or reply.group("yes")):
        return "negative" if reply.group("no") else "positive"
    if reply and (reply.group("agree") or reply.group("disagree")):
        # 对 / 不对 judge a plain question as worded: "DP 不能降低显存吗？对。" agrees that it cannot. A
        # rhetorical question (难道不是…吗？是的。) is agreed with as a claim of what it implies: yes.
        if rhetorical or not _asks_negatively(text):
            return "positive" if reply.group("agree") else "negative"
        return "agree" if reply.group("agree") else "flip"
    if rhetorical:
        return "flip"
    return None


def _asks_negatively(text: str) -> bool:
    """Does the question hold a negation (DP 不能降低显存吗)? Its A-not-A form (能不能) is no negation."""
    masked = _mask(_A_NOT_A.sub(lambda m: "＿" * 3, _mask(text, _FALSE_CUES)), _FALSE_CUES)
    return any(_negates(m, text) for m in _CUE_RE.finditer(masked))


def _embedded_questions(text: str) -> list[tuple[int, int, str]]:
    """Spans of a statement that an embedding verb asks about (判断路由是否均衡, 看有没有 kernel 在跑):
    the sentence is no question, but what 是否 / the A-not-A leads into is not asserted either."""
    masked = _mask(text, _FALSE_CUES)
    # The concessive 不管/无论 are not embedding verbs here: an asserted main clause follows them.
    cues = _choice_cues(masked, text)
    spans: list[tuple[int, int, str]] = []
    for m in cues[:MAX_REGIONS]:
        lo, hi = _clause(text, m.start())
        if _EMBEDDING_VERBS.search(text, max(lo, m.start() - EMBED_CHARS), m.start()):
            spans.append((m.start(), hi, "question"))
    return spans


def _status(text: str, next_text: str) -> tuple[str, tuple[tuple[int, int, str], ...]]:
    """Whole-sentence status, plus spans with a status of their own (reported or refuted parts).

    Linear in the sentence: contrast words and refutations are found once and looked up by
    bisection, and at most ``MAX_REGIONS`` spans of each kind are kept. Cues count only as whole
    words, so the 要是 inside 主要是 is no hedge.
    """
    stripped = text.strip()
    if _QUESTION_END.search(stripped) or any(_whole(m, text) for m in _QUESTION_CUES.finditer(text)) or _asks(text):
        return "question", ()
    contrasts = [m.span() for m in _CONTRAST.finditer(text)]
    contrast_starts = [a for a, _ in contrasts]
    contrast_ends = [b for _, b in contrasts]
    refutations = [m.start() for m in islice(_REFUTATION.finditer(text), MAX_REGIONS)]
    regions: list[tuple[int, int, str]] = []
    for m in islice(_REPORTED.finditer(text), MAX_REGIONS):
        ends = [len(text)]
        k = bisect_left(contrast_starts, m.end())
        if k < len(contrast_starts):
            ends.append(contrast_starts[k])
        k = bisect_left(refutations, m.end())
        if k < len(refutations):
            ends.append(refutations[k])
        correction = _CORRECTION.search(text, m.end())
        if correction:
            ends.append(correction.start())
        dash = _DASH.search(text, m.end())
        if dash and text[m.end() : dash.start()].strip():
            ends.append(dash.start())  # 有人说 DP 能省显存——DP 的显存其实不变: the dash ends the report
        regions.append((m.start(), min(ends), "reported"))
    regions.extend((m.start(), m.end(), "reported") for m in islice(_REPORT_NP.finditer(text), MAX_REGIONS))
    if _REFUTATION_START.search(next_text):
        return "refuted", ()
    for r in refutations:
        k = bisect_right(contrast_ends, r)  # the last contrast word that ends before the refutation
        regions.append((_refuted_start(text, r, contrast_ends[k - 1] if k else 0), r, "refuted"))
    regions.extend(_embedded_questions(text))
    regions.extend(_purposes(text))
    masked = _mask(text, _HEDGE_FALSE)
    condition = next(
        (m for m in _HEDGES.finditer(masked) if (_whole(m, text) or _hedge_said(m, text)) and _conditional(m, masked)),
        None,
    )
    if condition is None:
        return "asserted", tuple(regions)
    # Only the antecedent is hypothetical: the consequent (如果把 pp 加到 16，激活就能降到一半) is the
    # student's own claim. A sentence that opens with the condition keeps "hedged" as its status, and
    # its consequent is an asserted region; a condition later in the sentence hedges only its antecedent.
    antecedent = _antecedent_end(text, condition.end())
    antecedent = _counterfactual_end(text, condition.end(), antecedent, next_text) or antecedent
    if text[: condition.start()].strip(" ,:，："):
        regions.append((condition.start(), antecedent, "hedged"))
        return "asserted", tuple(regions)
    if antecedent < len(text):
        regions.append((antecedent, len(text), "asserted"))
    return "hedged", tuple(regions)


# A purpose clause names a goal, not a fact: "要减少显存，需要 ZeRO", "为了让激活变小，得开重计算", "想要
# X 就得 Y". It opens its clause with 为了/为的是 (always a goal there) or 要/想/想要/要想 (a goal only
# when a need follows: 需要, 得, 必须, 就要, 只能, 应该, 才能…, later in its clause or opening the next
# one; else 要 says "has to"), and it reaches to the end of its clause or to the need.
_PURPOSE = re.compile(
    r"(?:^|(?<=[,:;，：；]))\s*(?:(?:但是|但|而|那么|那)\s*)?(?P<cue>(?P<always>为了|为的是)|要想|想要|要|想)"
)
_NEED = re.compile(r"(?:就|还|都|也|才)?(?:需要|必须|就要|只能|应该|应当|才能|得(?![到出知了]))|就(?:要|用|开|靠|只能)")
_NEED_OPENS = re.compile(rf"\s*(?:那么|那|则)?\s*(?:{_NEED.pattern})")  # the next clause opens with the need


def _after_separator(text: str, pos: int) -> int:
    """Where the next clause starts, for a clause that ends at ``pos`` (a separator may be a dash)."""
    m = _SEPARATOR.match(text, pos)
    return m.end() if m else pos


def _purposes(text: str) -> list[tuple[int, int, str]]:
    """Spans of purpose clauses (要减少显存，…; 为了让激活变小，…): goals, hedged like a condition's
    antecedent, so a veto does not fire on them while the main clause is judged as it stands."""
    spans: list[tuple[int, int, str]] = []
    for m in islice(_PURPOSE.finditer(text), MAX_REGIONS):
        cue = m.start("cue")
        hi = _clause(text, cue)[1]
        need = _NEED.search(text, m.end(), hi)
        if need and need.start() > m.end():
            hi = need.start()  # 想要显存降下来就得用 ZeRO: the goal ends at the need
        elif not m.group("always") and not _NEED_OPENS.match(text, _after_separator(text, hi)):
            continue  # 要做两次 all-reduce，所以更慢: 要 says "has to", no goal
        bounds = word_bounds(text)  # segmenting costs: only for a clause that reads as a goal
        if cue in bounds and m.end("cue") in bounds:  # not the 要 of 要求 / 主要
            spans.append((cue, hi, "hedged"))
    return spans


# A counterfactual: the consequent is a wish (要是 X 就好了, 该多好), or a later clause regrets it (可惜…)
# or says what is the case instead (但/其实 + a denial of the antecedent, see ``_denial``), in the same
# sentence or at the start of the next one (如果 X，那就 Y；但它只做求和。).
_WISH = re.compile(r"(?:就好|就太好|该(?:有)?多好|多好)(?:了|啦)?[啊呀]?$")
_WISH_CLAUSE = re.compile(r"\s*(?:那|那样|这样)?(?:就|那)?(?:该(?:有)?多好|太好了|就好了|好了)[啊呀]?[\s。!?~…]*")
_REGRET = re.compile(r"\s*(?:但是|但|可是|可|然而|不过|只)?\s*(?:可惜|遗憾的是)")
_REALITY = re.compile(
    r"\s*(?:(?:但是|但|可是|可(?![以能是见否])|然而|不过)\s*(?:实际上|其实|事实上|现实中|实际)?"
    r"|(?:实际上|其实|事实上|现实中))"
)
_NEGATORS = "并不没无非未别"  # what a negation cue's verb is left with when these are stripped (不能 → 能)
# Light words skipped when the word a negation cue governs is looked for (没被切 → 切, 不是逐元素 → 逐元素).
_LIGHT = frozenset("被 把 是 有 在 会 能 要 再 也 都 就 还 真 直接 一定".split())
# "但它只做求和": a restriction of what the antecedent supposed (within a few characters of the contrast).
_RESTRICTS = re.compile(r"[^,:;，：；。!?]{0,8}?(?:只(?!要)|仅)")
# "…，所以不需要 / 所以仍要 / 所以必须保存": the clause after the reality denies the consequent.
_DENIES_CONSEQUENT = re.compile(r"\s*(?:所以|因此|因而|于是)\s*(?:不|没|无|并不|仍|还是|依然|照样|必须|一样)")


def _counterfactual_end(text: str, cue_end: int, antecedent: int, next_text: str = "") -> int | None:
    """Where the counterfactual part of a condition ends, if its consequent asserts nothing; else None.

    "要是 all-reduce 自己就会求平均就好了" wishes; "如果 DP 能省显存，那就不用 ZeRO 了，但实际上它不能"
    takes the antecedent back. Then the consequent is as hypothetical as the antecedent, up to the
    wish's end or to the clause that regrets (可惜) or denies (但实际上…不能) it. A student who explains
    what would follow IF a misconception held often denies it only in the next sentence, after ；or 。
    ("…，那就不用再除以 N 了；但它只做求和。"): then the whole consequent is hypothetical. "如果把 pp 加到
    16，激活就能降到一半" has neither, and its consequent stays the student's claim.
    """
    start = antecedent + 1 if antecedent < len(text) and _SEPARATOR.match(text, antecedent) else antecedent
    end = _clause(text, start)[1] if start < len(text) else len(text)
    if _WISH.search(text[max(start, end - 8) : end].rstrip(" 。!?~…\n")):
        return end
    for n, cut in enumerate(_CLAUSE_END.finditer(text, start)):
        if n >= MAX_REGIONS:
            break
        if _REGRET.match(text, cut.end()):
            return cut.start()
        clause_end = _clause(text, cut.end())[1]
        if _WISH_CLAUSE.fullmatch(text, cut.end(), clause_end):
            return clause_end  # …，DP 的吞吐就能线性增长，那该多好
        reality = _REALITY.match(text, cut.end())
        if reality and _denial(text, (cue_end, antecedent), text, reality):
            return cut.start()
    if start < len(text) and next_text:
        reality = _REALITY.match(next_text)
        if _REGRET.match(next_text) or (
            reality and reality.end() and _denial(text, (cue_end, antecedent), next_text, reality)
        ):
            return len(text)
    return None


def _denial(text: str, antecedent: Span, other: str, reality: re.Match[str]) -> bool:
    """Does the clause of ``other`` that ``reality`` opens (但, 其实, 但实际上…) deny the antecedent
    text[antecedent]? It does when it negates a word of it (它不能, 它们没被切), affirms what the
    antecedent negated (如果 GeLU 不是逐元素…，但它恰恰是逐元素的), restricts it (但它只做求和), or
    the clause after it denies the consequent (但它复用 TP 组，所以不需要). A fact that merely limits the
    supposition (但其实 pp 不能无限加) takes nothing back."""
    lo = reality.end()
    hi = _clause(other, lo)[1]
    a, b = antecedent
    if _negated_word(other, lo, hi, text[a:b]) or _RESTRICTS.match(other, lo, hi):
        return True
    if any(not negated(other, k, k + len(w)) for w, k in _cue_objects(text, a, b, other, lo, hi)):
        return True
    return hi < len(other) and bool(_DENIES_CONSEQUENT.match(other, _after_separator(other, hi)))


def _governed(text: str, pos: int, n: int = 2) -> list[Span]:
    """The next ``n`` words after ``pos`` that a negation cue there governs, skipping light words (被, 是),
    within the clause."""
    bounds = _sorted_bounds(text)
    k = bisect_right(bounds, pos)
    out: list[Span] = []
    prev = pos
    while k < len(bounds) and len(out) < n:
        x, y = prev, bounds[k]
        prev, k = y, k + 1
        word = text[x:y].strip()
        if _SEPARATOR.search(text, x, y) or _SENTENCE_END.search(text, x, y):
            break
        if word and _WORDISH.search(word) and word not in _LIGHT:
            out.append((x, y))
    return out


def _negated_word(text: str, lo: int, hi: int, antecedent: str) -> bool:
    """Does text[lo:hi] negate a word of the antecedent: the cue's own modal (不能 → 能) or the word it
    governs (没被切开 → 切开)? Only the first: in "pp 不能无限加" 不能 limits 无限, it does not deny 加."""
    for m in _CUE_RE.finditer(_mask(text[lo:hi], _FALSE_CUES)):
        if not _negates(m, text, lo):
            continue
        verb = m.group().lstrip(_NEGATORS).strip()
        verbs = [verb] if verb else []
        verbs += [text[x:y].strip() for x, y in _governed(text, lo + m.end(), 1)]
        if any(v in antecedent for v in verbs):
            return True
    return False


def _cue_objects(text: str, a: int, b: int, other: str, lo: int, hi: int) -> Iterator[tuple[str, int]]:
    """What the antecedent text[a:b] negates (如果 GeLU 不是逐元素 → 逐元素: the governed word, with the
    next one when it is a single character), with where it first stands in other[lo:hi]."""
    for m in _CUE_RE.finditer(_mask(text[a:b], _FALSE_CUES)):
        if not _negates(m, text, a):
            continue
        words = _governed(text, a + m.end())
        if not words:
            continue
        x, y = words[0]
        if y - x == 1 and len(words) > 1:
            y = words[1][1]
        phrase = text[x:y].strip()
        k = other.find(phrase, lo, hi)
        if len(phrase) > 1 and k >= 0:
            yield phrase, k


# Where a condition's antecedent ends: at the next clause boundary, or at a word that opens the
# consequent inside the clause (要是 DP 能省显存就好了, if the batch fits then ...).
_CONSEQUENT = re.compile(r"[,:，：]|就|则|那么|那|便|(?<![a-z])then(?![a-z])")


def _antecedent_end(text: str, pos: int) -> int:
    """The end of the antecedent of a condition whose cue ends at ``pos``: a clause boundary or a
    consequent word (就, 那么, then) read as a whole word (the 那 of 那个 opens nothing)."""
    for m in _CONSEQUENT.finditer(text, pos):
        if m.group() in ",:，：":
            if not _in_formula_bracket(text, m.start()):
                return m.start()
        elif _whole(m, text) and not _inner_jiu(text, m):
            return m.start()
    return len(text)


# 就 right after these words is an adverb inside the antecedent (如果 all-reduce 本身就求平均), not the
# start of the consequent, when a later clause opens the consequent with 那/那么/则.
_INNER_JIU = re.compile(r"(?:本身|本来|早|也|都)\s*$")
_LATER_CONSEQUENT = re.compile(r"[,:，：]\s*(?:那么|那就|那|则)(?!个|些|种|样|里|儿)")


def _inner_jiu(text: str, m: re.Match[str]) -> bool:
    """Is this 就 an adverb inside the antecedent rather than the start of the consequent?"""
    return (
        m.group() == "就"
        and bool(_INNER_JIU.search(text, max(0, m.start() - 2), m.start()))
        and bool(_LATER_CONSEQUENT.search(text, m.end()))
    )


# Clauses that go on with the statement before them (…，因为…，这是错的 refutes both clauses).
_CONTINUES = re.compile(r"\s*(?:因为|所以|因此|而且|并且|从而|由于|于是|也|并|还|so|because|since|and)(?![a-z])")
# What may stand before a refutation that points back to the clause before it (，但这是误解 / , which is wrong).
_POINTS_BACK = re.compile(
    r"[\s,:，：]*(?:但是|但|其实|而且|并且|所以|因此|which|that|this|and)?\s*"
    r"(?:(?:这|此|该)(?:种|个|一|样)?(?:说法|观点|理解|看法|想法)?(?:其实|根本|完全)?)?\s*"  # 这个说法站不住脚
)
# A clause that comments on the one before it (，但这是按 1 个 micro-batch 算的): a verdict after it judges both.
_COMMENT = re.compile(r"\s*(?:但是|但|不过|可是|可)?\s*(?:这|那)(?:只|其实|也)?(?:是|就是)")
_NAMES_A_CLAIM = re.compile(r"(?:说法|观点|看法|想法|理解|结论|印象)[\"'”’」』)]?\s*[,:，：]\s*$")
MAX_REFUTED_CLAUSES = 4  # clauses one refutation may reach back over: bounds the walk


def _refuted_start(text: str, r: int, floor: int) -> int:
    """Where the claim refuted at ``r`` starts (never before ``floor``, the last contrast word).

    "X 是错的" refutes its own clause; "…，这是误解" opens a clause of its own and points back to the
    clause before it, together with the clauses that clause continues (…，因为…，这是错的). Earlier
    clauses stay the student's: in "ZeRO-1 切分优化器状态，DP 能省显存是错的" only the second is refuted.
    """
    lo = _clause(text, r)[0]
    if lo <= floor:
        return floor
    if not _POINTS_BACK.fullmatch(text, lo, r):
        # "…的说法，至少对静态显存来说是错的": the claim judged is named in the clause before.
        before = _clause_before(text, lo)[0]
        return max(before if _NAMES_A_CLAIM.search(text, before, lo) else lo, floor)
    for _ in range(MAX_REFUTED_CLAUSES):
        lo = _clause_before(text, lo)[0]
        if lo > 0 and _COMMENT.match(text, lo):
            # "X，但这是按 1 个 micro-batch 算的，不对": the clause before the verdict comments on X, so the
            # verdict reaches X too, past the 但 that opens the comment.
            floor = min(floor, _clause_before(text, lo)[0])
            continue
        if lo <= floor or not _CONTINUES.match(text, lo):
            break
    return max(lo, floor)


def _hedge_said(m: re.Match[str], text: str) -> bool:
    """Is the cue the start of 如果说 / 假如说 / 要是说? jieba keeps these one word, yet they open a
    condition just as 如果 does (如果说分片后结果不一样，…); 如果说起 stays 如果 + 说起."""
    end = m.end() + 1
    return text[m.end() : end] == "说" and m.start() in word_bounds(text) and end in word_bounds(text)


def _conditional(m: re.Match[str], text: str) -> bool:
    """Is this cue a condition? 要是 is one only with a consequence (…，/ 就 / 的话 / 那); else it means "must be"."""
    return m.group() != "要是" or bool(re.search(r"就|的话|那|则|会|[,，]", text[m.end() :]))


def _status_at(sentence: Sentence, pos: int) -> str:
    """The status that applies at a position: a reported/refuted region overrides the sentence's."""
    for start, end, status in sentence.regions:
        if start <= pos < end:
            return status
    return sentence.status


def _clause_before(text: str, lo: int) -> tuple[int, int]:
    """The clause before the one that starts at ``lo``: step back over its whole separator (a dash is
    several characters), so that the walk lands in the previous clause, not inside the dash."""
    j = max(0, lo - 1)
    while j > 0 and text[j] in "—-" and text[j - 1] in "—-":
        j -= 1
    return _clause(text, j)


def _clause(text: str, pos: int) -> tuple[int, int]:
    start = 0
    for m in _CLAUSE_END.finditer(text, 0, pos):
        start = m.end()
    end_match = _CLAUSE_END.search(text, pos)
    return start, end_match.start() if end_match else len(text)


def negated(text: str, start: int, end: int, masks: tuple[tuple[int, int], ...] = ()) -> bool:
    """Is the word at text[start:end] negated? Parity of cues before it, within its clause, plus a
    negator right after it (解决不了) or closing its clause (…是不对的, … is not needed).

    ``masks`` are spans of other terms of the same pattern: a cue inside a named term (the 没 of
    梯度还没算出) belongs to that term and does not negate the head, and a term counts as one word.
    A cue counts when at most ``NEG_WORDS`` words stand between it and the head; only the
    ``NEG_CHARS`` characters before the head are read, so a call costs the same whatever the
    sentence's length.
    """
    lo = _negation_start(text, start, masks)
    chars = list(text[lo:start])
    for a, b in masks:
        if lo < b <= start:
            for k in range(max(a, lo), b):
                chars[k - lo] = "＿"
    false_cues = _false_cues(text, start)
    for a, b in _a_not_a(_mask(text[lo:start], false_cues), text[start : start + 1]):
        chars[a:b] = "＿" * (b - a)
    window = _mask(_A_NOT_A.sub(lambda m: "＿" * 3, _mask("".join(chars), false_cues)), false_cues)
    count, reach = 0, start
    for m in reversed([m for m in _CUE_RE.finditer(window) if _negates(m, text, lo)]):
        # The nearest cue within NEG_WORDS words negates the head; a cue before it counts only when it
        # stands right against it (不是不能), else it negates a predicate of its own (不能 X（没法 Y）).
        chain = NEG_WORDS if reach == start or _negates_statement(text, m, lo) else NEG_CHAIN
        if m.group() in _SIGNS:
            chain = min(chain, SIGN_WORDS)
        if _words_between(text, lo + m.end(), reach, masks) > chain:
            break
        if m.group() == "非" and _MUST_TAIL.match(text, end):
            reach = lo + m.start()  # 非开不可: a "must", no negation
            continue
        count, reach = count + 1, lo + m.start()
    if _POST_NEG.match(text[end : end + 3]):
        count += 1
    if text[start - 1 : start + 1] == "!=":
        count += 1  # the head is the = of != (a term "=" states equality; != denies it)
    clause_end = _CLAUSE_END.search(text, end)
    if _TAIL_NEG.match(text, end, clause_end.start() if clause_end else len(text)):
        count += 1
    return count % 2 == 1


def _negates_statement(text: str, m: re.Match[str], lo: int) -> bool:
    """Does the cue ``m`` (in a window starting at ``lo``) negate a whole statement, so that it reaches a
    second cue further on (不能说 TP 不省显存, 不会让梯度不准确, 并非重计算没有作用: each asserts)?"""
    after = lo + m.end()
    if _SAYING.match(text, after):
        return True
    return m.group() in _STATEMENT_CUES and not re.match(r"\s*(?:因为|由于|说明)", text[after : after + 4])


def _a_not_a(window: str, after: str) -> list[tuple[int, int]]:
    """Spans of the A-not-A forms (是不是, 跨不跨) in ``window``, read before other terms are masked.

    ``after`` is the text right after the window: in 跨不跨节点 the term 跨节点 starts at the second 跨,
    so the form ends past the window (and inside a term), yet its 不 only makes the choice: TP 跨不跨
    节点影响不大 negates nothing."""
    return [(m.start(), min(m.end(), len(window))) for m in _A_NOT_A.finditer(window + after)]


def _false_cues(text: str, start: int) -> list[str]:
    """The false cues for a head at ``start``: after 与其 (与其切 TP，不如切 PP), 不如 prefers what follows
    it and negates nothing. Elsewhere (DP 不如 ZeRO 省显存) it still says "less than"."""
    return _FALSE_CUES_AFTER_YUQI if "与其" in text[:start] else _FALSE_CUES


def _negation_start(text: str, start: int, masks: tuple[tuple[int, int], ...] = ()) -> int:
    """Where the negation scope of the head at ``start`` begins: its clause, cut at terminators
    (但, 所以, 时...), never more than ``NEG_CHARS`` characters back."""
    lo = max(0, start - NEG_CHARS)
    cuts = list(_CLAUSE_END.finditer(text, lo, start))
    if cuts:
        lo = cuts[-1].end()
    window = list(text[lo:start])
    for a, b in masks:  # a terminator inside a named term (所以 in a formula's words) cuts nothing
        for k in range(max(a, lo), min(b, start)):
            window[k - lo] = "＿"
    return lo + _scope_start("".join(window))


@functools.lru_cache(maxsize=4096)
def _sorted_bounds(text: str) -> tuple[int, ...]:
    return tuple(sorted(word_bounds(text)))


def _words_between(text: str, a: int, b: int, masks: tuple[tuple[int, int], ...] = ()) -> int:
    """How many words stand in text[a:b]: jieba tokens holding a letter, digit or Han character.

    A term of the pattern (``masks``) counts as one word, and so does a hyphenated or underscored
    compound (all-reduce, no_sync), so that the distance does not depend on how long a name is.
    """
    bounds = _sorted_bounds(text)
    lo, hi = bisect_left(bounds, a), bisect_right(bounds, b)
    cuts = [a, *bounds[lo:hi], b]
    words = 0
    for x, y in zip(cuts, cuts[1:]):
        if y <= x or not _WORDISH.search(text, x, y):
            continue
        if x > a and text[x - 1] in "-_" and x - 1 > a:
            continue  # the second half of all-reduce / no_sync
        if any(m0 < x < m1 for m0, m1 in masks):
            continue  # inside a named term, which counted once where it starts
        words += 1
    return words


_WORDISH = re.compile(r"[0-9a-z\u3400-\u9fff]")
# A negator that closes the predicate's clause: DP 能降低显存是不对的 / 这种说法不成立 / … is not needed.
_TAIL_NEG = re.compile(
    r"[^,:;，：；。!?]*?(?:"
    r"(?:是|就是|其实是|显然是|肯定是|也是)(?:完全|根本|绝对)?"
    r"(?:不对|错误|错|不行|不需要|不必要|没必要|不可能|不正确|不成立|不准确)的"
    r"|(?:这种|这个|这一|这样的?|的)?(?:说法|观点|想法|结论|理解)(?:是|其实|并|完全|根本)*(?:不对|错误|错|不成立|不正确)的?"
    r"|(?:是)?不成立的?"
    r"|(?<![a-z])(?:is|are)\s+(?:not\s+(?:needed|necessary|required|true|correct|right|the\s+case)"
    r"|wrong|false|incorrect|unnecessary|untrue|a\s+myth)(?![a-z])"
    r")\s*(?:的|了)?\s*(?=$|[,:;，：；。!?\n]|—|--|因为|所以|because|since)"
)


def _scope_start(window: str) -> int:
    """Where the negation scope of the head begins: after the last terminator that cuts it.

    A causal connective right after a negation cue does not cut: in 激活不会因此减少 the 不会
    negates 减少 through 因此, whereas in 通信变少，所以减少了时间 the 所以 starts a new claim.
    """
    masked = _mask(window, _FALSE_CUES)
    for t in reversed(list(_TERMINATORS.finditer(window))):
        if t.group() in _CAUSAL and _CUE_END.search(masked, 0, t.start()):
            continue
        return t.end()
    return 0


_CUE_RE = re.compile(
    "|".join(
        rf"(?<![a-z0-9_']){re.escape(c)}(?![a-z0-9_'])" if c.isascii() and c[0].isalpha() else re.escape(c)
        for c in sorted(_NEG_CUES, key=len, reverse=True)
    )
)
_CUE_END = re.compile(rf"(?:{_CUE_RE.pattern})\s*$")  # a cue that ends the text before a terminator


# --- rubric model ------------------------------------------------------------------------------
@dataclass
class Pattern:
    head: re.Pattern[str] | None
    groups: list[re.Pattern[str]]
    polarity: str = "positive"
    span: int | None = None
    context: int = 0
    clause: bool = False  # groups must sit in the head's clause, not just its sentence
    unless: list[re.Pattern[str]] = field(default_factory=list)  # vetoes only: cancel this pattern
    at_least: int = 0  # > 0: count distinct groups over the whole answer instead
    subject: re.Pattern[str] | None = None  # a claim: what the head (predicate) must be said of
    # ids of the ``unless`` terms (the pattern's and its veto's) that may open a clause as a rival subject
    rivals: frozenset[int] = frozenset()


@dataclass
class KeyPoint:
    id: str
    points: float
    says: str  # the key point itself: shown once the lesson's answers are released
    hint: str  # a nudge that does not give the answer away: shown before release
    patterns: list[Pattern]


@dataclass
class Veto:
    id: str
    questions: tuple[str, ...]
    says: str
    explain: str
    patterns: list[Pattern]
    unless: list[re.Pattern[str]]  # cancels a match when found in the clauses of the matched claim
    fire: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ProseException:
    """A lesson sentence a veto may fire on by design (it reads like the misconception out of context).

    Listed under ``prose_exceptions:`` in rubric.yml, so that the lesson/rubric consistency check
    (grader.consistency) stays quiet about it; ``reason`` is required so that a reviewer can judge it.
    """

    veto: str  # the veto's id
    text: str  # a substring of the lesson's sentence
    reason: str
    line: int | None  # line of the entry in rubric.yml


@dataclass
class Rubric:
    path: str
    key_points: dict[str, list[KeyPoint]]
    vetoes: list[Veto]
    prose_exceptions: list[ProseException] = field(default_factory=list)
    terms: tuple[re.Pattern[str], ...] = ()  # every term the rubric knows: what a keyword list is made of
    subjects: tuple[re.Pattern[str], ...] = ()  # veto subjects and unless terms: who else a clause may be about
    subject_ids: frozenset[int] = frozenset()  # ids of the veto subjects among them: rivals for every claim
    literals: Index = field(default_factory=lambda: Index(()))  # the prefilter (grader.literals)

    def vetoes_for(self, question: str) -> list[Veto]:
        return [v for v in self.vetoes if question in v.questions]


@dataclass
class Evidence:
    sentence: str  # the student's sentence, safe to print
    start: int  # span of the matched word in ``sentence`` (0, 0 when there is none)
    end: int
    review: tuple[str, ...] = ()  # a fired veto: signals that nearly suppressed it (for instructors)


@dataclass
class AnswerResult:
    question: str
    points: float
    max: float
    found: list[tuple[KeyPoint, Evidence]]
    missing: list[KeyPoint]
    vetoes: list[tuple[Veto, Evidence]]
    suppressed: list[tuple[Veto, Evidence, str]]
    notes: list[str] = field(default_factory=list)  # for the student, in Chinese

    def as_dict(self) -> dict[str, Any]:
        return {
            "points": self.points,
            "max": self.max,
            "key_points": [
                {"id": k.id, "points": k.points, "evidence": e.sentence, "span": [e.start, e.end]}
                for k, e in self.found
            ],
            "missing": [k.id for k in self.missing],
            "vetoes": [
                {
                    "id": v.id,
                    "evidence": e.sentence,
                    "span": [e.start, e.end],
                    "needs_review": bool(e.review),
                    "review": list(e.review),
                }
                for v, e in self.vetoes
            ],
            "suppressed": [{"id": v.id, "evidence": e.sentence, "reason": r} for v, e, r in self.suppressed],
            "notes": list(self.notes),
        }


# --- loading -----------------------------------------------------------------------------------
class _Loader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.lexicon: dict[str, list[str]] = {}
        self.text = text

    @functools.cached_property
    def positions(self) -> Any:
        """The rubric parsed again by the round-trip loader, only for the line numbers it records.

        Only an error, or a prose exception's line, needs them, so a valid rubric is parsed once.
        """
        try:
            return YAML(typ="rt", pure=True).load(self.text)
        except YAMLError:
            return None

    def key_point_line(self, qid: str, n: int, kid: str | None) -> int | None:
        """The line of key point ``n`` of ``qid`` (its id's line, or the question's, if not known)."""
        return self.item_line(("questions", qid, "key_points"), n) or self.line(f"id: {kid}" if kid else f"{qid}:")

    def item_line(self, keys: tuple[str | int, ...], index: int) -> int | None:
        """The 1-based line of item ``index`` of the list at ``keys``, as the YAML parser saw it."""
        node: Any = self.positions
        try:
            for key in keys:
                node = node[key]
            return int(node.lc.item(index)[0]) + 1
        except (KeyError, IndexError, TypeError, AttributeError):
            return None

    def line(self, needle: str) -> int | None:
        for i, line in enumerate(self.lines, start=1):
            if needle in line:
                return i
        return None

    def fail(self, needle: str, problem: str) -> SourceError:
        return SourceError(self.path, self.line(needle), problem)

    def alternatives(self, spec: Any, where: str) -> list[str]:
        items = spec if isinstance(spec, list) else [spec]
        out: list[str] = []
        for item in items:
            if not isinstance(item, str) or not item:
                raise self.fail(where, f"{where}: each term must be a non-empty string, got {item!r}")
            if item.startswith("@"):
                name = item[1:]
                if name not in self.lexicon:
                    raise self.fail(item, f"{where}: unknown lexicon entry {item!r}; define it under 'lexicon:'")
                out.extend(self.lexicon[name])
            else:
                out.append(item)
        return out

    def regex(self, spec: Any, where: str) -> re.Pattern[str]:
        parts = []
        for alt in self.alternatives(spec, where):
            body = unicodedata.normalize("NFKC", alt)
            pre, post = _term_bounds(body)
            parts.append(f"{pre}(?:{body}){post}")
        try:
            return re.compile("|".join(parts), re.IGNORECASE)
        except re.error as exc:
            raise self.fail(where, f"{where}: invalid regular expression: {exc}") from None

    def unless(self, raw: dict[str, Any], where: str) -> list[re.Pattern[str]]:
        """``unless:`` is a list of terms; a bare string would otherwise be read one character at a time."""
        terms = raw.get("unless", [])
        if not isinstance(terms, list):
            raise self.fail(where, f"{where}: 'unless' must be a list of terms, e.g. unless: ['zero', 'fsdp']")
        return [self.regex(u, where) for u in terms]

    def context(self, raw: dict[str, Any], where: str) -> int:
        value = raw.get("context", 0)
        if value not in (0, 1) or isinstance(value, bool):
            raise self.fail(
                where, f"{where}: 'context' must be 0 or 1 (1: the previous sentence may supply the subject)"
            )
        return int(value)

    def examples(self, raw: dict[str, Any], index: int, vid: str, where: str) -> tuple[list[str], list[str]]:
        """A veto's ``fire``/``keep`` sentences, each a string (an unquoted ``a: b`` would load as a mapping)."""
        examples = raw.get("examples") or {}
        if not isinstance(examples, dict) or set(examples) - {"fire", "keep"}:
            raise self.fail(where, f"veto {vid}: 'examples' must map 'fire' and 'keep' to lists of sentences")
        lists: list[list[str]] = []
        for kind in ("fire", "keep"):
            texts = examples.get(kind) or []
            if not isinstance(texts, list):
                raise self.fail(where, f"veto {vid}: examples '{kind}' must be a list of sentences")
            for n, text in enumerate(texts):
                if not isinstance(text, str) or not text.strip():
                    line = self.item_line(("vetoes", index, "examples", kind), n)
                    raise SourceError(
                        self.path,
                        line or self.line(where),
                        f"veto {vid}: {kind} example {n + 1} must be a sentence, got {text!r}; "
                        "put it in quotes (an unquoted ': ' makes YAML read a mapping)",
                    )
            lists.append(list(texts))
        return lists[0], lists[1]

    def pattern(self, raw: Any, where: str) -> Pattern:
        if not isinstance(raw, dict):
            raise self.fail(where, f"{where}: a pattern must be a mapping with 'head' (and 'with', 'polarity', 'span')")
        unknown = set(raw) - {
            "head",
            "with",
            "polarity",
            "span",
            "context",
            "clause",
            "unless",
            "at_least",
            "of",
            "claim",
        }
        if unknown:
            raise self.fail(where, f"{where}: unknown pattern key(s) {sorted(unknown)}")
        if "claim" in raw:
            return self.claim(raw, where)
        if "at_least" in raw:
            groups = raw.get("of")
            if (
                not isinstance(groups, list)
                or not isinstance(raw["at_least"], int)
                or not 0 < raw["at_least"] <= len(groups)
            ):
                raise self.fail(where, f"{where}: 'at_least: N' needs 'of:' with at least N groups")
            return Pattern(None, [self.regex(g, where) for g in groups], at_least=raw["at_least"])
        if "head" not in raw:
            raise self.fail(where, f"{where}: a pattern needs a 'head' (the predicate)")
        polarity = raw.get("polarity", "positive")
        if polarity not in ("positive", "negative"):
            raise self.fail(where, f"{where}: polarity must be positive or negative")
        groups = raw.get("with", [])
        if not isinstance(groups, list):
            raise self.fail(where, f"{where}: 'with' must be a list of groups")
        span = raw.get("span")
        if span is not None and (not isinstance(span, int) or span <= 0):
            raise self.fail(where, f"{where}: span must be a positive number of characters")
        return Pattern(
            self.regex(raw["head"], where),
            [self.regex(g, where) for g in groups],
            polarity,
            span,
            self.context(raw, where),
            bool(raw.get("clause", False)),
            self.unless(raw, where),
        )

    def claim(self, raw: dict[str, Any], where: str) -> Pattern:
        """``claim: {subject, predicate, object?, polarity?}``: the predicate said of the subject.

        The predicate is the head; the object must sit in the claim's clauses (see ``_match``).
        """
        claim = raw["claim"]
        if set(raw) - {"claim", "unless", "context"} or not isinstance(claim, dict):
            raise self.fail(
                where, f"{where}: a claim is 'claim: {{subject, predicate, object, polarity}}' (plus 'unless')"
            )
        unknown = set(claim) - {"subject", "predicate", "object", "polarity"}
        if unknown or "subject" not in claim or "predicate" not in claim:
            raise self.fail(
                where, f"{where}: a claim needs 'subject' and 'predicate' (and may have 'object', 'polarity')"
            )
        polarity = claim.get("polarity", "positive")
        if polarity not in ("positive", "negative"):
            raise self.fail(where, f"{where}: polarity must be positive or negative")
        objects = claim.get("object")
        groups = (
            []
            if objects is None
            else (objects if isinstance(objects, list) and all(isinstance(o, list) for o in objects) else [objects])
        )
        return Pattern(
            self.regex(claim["predicate"], where),
            [self.regex(g, where) for g in groups],
            polarity,
            context=self.context(raw, where),
            clause=True,
            unless=self.unless(raw, where),
            subject=self.regex(claim["subject"], where),
        )

    def patterns(self, raw: dict[str, Any], where: str) -> list[Pattern]:
        pats = raw.get("any")
        if not isinstance(pats, list) or not pats:
            raise self.fail(where, f"{where}: needs 'any:' with at least one pattern")
        return [self.pattern(p, where) for p in pats]


# A formula term is one with an operator or bracket in it; its neighbours may not continue the formula,
# so that (p-1)M is not found inside 2(p-1)M/p.
_FORMULA_TERM = re.compile(r"\\[()+*^]|[/·×=]")  # an escaped bracket or operator, or a literal one
_FORMULA_PRE = r"(?<![0-9a-z_)/*^·×.ψ+-])"
_FORMULA_POST = r"(?![0-9a-z_(/*^·×ψ+-])"


# A term that opens with a group, a class or an escape ((dp|ddp), [dt]p, \w+) has no first literal to
# read its kind from, so the boundary is chosen where it matches: a Latin letter there may not continue
# a word (dp is not in fsdp), a digit may not continue a number, anything else needs nothing. A term
# that opens with a lookaround of its own ((?<![a-z])mib) has chosen its boundary already.
_OPEN_CHARS = frozenset("([\\.")
_LOOKAROUND = re.compile(r"\(\?<?[=!]")
_ANY_PRE = r"(?:(?=[a-z_])(?<![a-z0-9_])|(?=[0-9])(?<![0-9.])|(?![a-z0-9_]))"


def _term_bounds(body: str) -> tuple[str, str]:
    """Lookarounds that make a term match whole words, numbers and formulas only.

    Latin words may not continue into letters or digits (dp is not in ddp). A number stands on its
    own against other digits but may touch letters and units, so 4n is found in 约4N and 16 in
    16Ψ, but 4 is not found in 24 or 4.5. A formula may not continue into more formula.
    """
    starts_alnum = bool(re.match(r"[A-Za-z0-9_]", body))
    ends_alnum = bool(re.search(r"[A-Za-z0-9_]$", body))
    if _FORMULA_TERM.search(body):
        pre = _FORMULA_PRE if starts_alnum or body.startswith("\\(") else ""
        return pre, _FORMULA_POST if ends_alnum or body.endswith("\\)") else ""
    pre = r"(?<![0-9.])" if body[:1].isdigit() else (r"(?<![a-z0-9_])" if starts_alnum else "")
    post = r"(?![0-9]|\.[0-9])" if body[-1:].isdigit() else (r"(?![a-z0-9_])" if ends_alnum else "")
    if body[:1] in _OPEN_CHARS and not _LOOKAROUND.match(body) and _may_start_alnum(body):
        pre = _ANY_PRE  # (dp|tp) 并行, [dt]p: the boundary follows what the match starts with
    return pre, post


def _may_start_alnum(body: str) -> bool:
    """May a match of ``body`` start with a Latin letter or a digit? Read off its first group's
    alternatives (or class, or escape). Terms that open with Chinese only ((显存|内存)) need no boundary,
    and a boundary there would cost a lookaround at every position of every sentence searched."""
    if body[:1] == "[":
        end = body.find("]", 2)
        return end < 0 or bool(re.search(r"[a-z0-9]|\\[wdsSWD]|^\^", body[1:end], re.IGNORECASE))
    if body[:1] in "\\.":
        return body[:2] not in ("\\(", "\\)", "\\u") or body[:1] == "."
    if body[:1] != "(":
        return bool(re.match(r"[A-Za-z0-9_]", body))
    depth, start, alternatives = 0, 3 if body.startswith("(?:") else 1, []
    for k, ch in enumerate(body):
        if ch == "\\":
            continue
        if ch == "(" and (k == 0 or body[k - 1] != "\\"):
            depth += 1
        elif ch == ")" and body[k - 1] != "\\":
            depth -= 1
            if depth == 0:
                alternatives.append(body[start:k])
                rest = body[k + 1 :]
                if rest[:1] in ("?", "*") or rest.startswith("{0"):
                    alternatives.append(rest.lstrip("?*").lstrip("{0,123456789}"))
                break
        elif ch == "|" and depth == 1:
            alternatives.append(body[start:k])
            start = k + 1
    else:
        return True  # unbalanced: let the boundary be chosen where it matches
    return any(not alt or _may_start_alnum(alt) for alt in alternatives)


_KEY_POINT_TEXT = {
    "says": "the key point in one sentence, shown to the student once the answers are released",
    "hint": "a Chinese hint shown before release that points the way without giving the answer",
    "explain": "the explanation shown to the student whose answer the veto fails",
}


def _required_text(raw: dict[str, Any], key: str, what: str, display: str, line: Callable[[], int | None]) -> str:
    """``raw[key]``, stripped; else an error at ``line()`` (looked up only then: see ``_Loader.positions``)."""
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SourceError(display, line(), f"{what}: needs '{key}:', {_KEY_POINT_TEXT[key]}")
    return value.strip()


def load_rubric(path: Path, display: str) -> Rubric:
    """Load and validate ``rubric.yml``; errors name the file and the line of the offending entry."""
    if not path.is_file():
        raise SourceError(display, None, "missing rubric.yml: the short-answer rubric of this lesson")
    return _parse_rubric(path.read_text(encoding="utf-8"), display)


@functools.lru_cache(maxsize=64)
def _parse_rubric(text: str, display: str) -> Rubric:
    """The rubric that ``text`` describes, remembered by its content.

    A grader, a build and a test run load the same rubrics again and again, and one costs about a
    second of YAML and regular expressions. Nothing changes a ``Rubric`` once it is loaded; an edited
    file is new content, and an invalid one raises each time (exceptions are not remembered).
    """
    data = load_yaml(text, display)
    ld = _Loader(display, text)
    if not isinstance(data, dict) or not isinstance(data.get("questions"), dict):
        raise SourceError(display, 1, "a rubric needs 'lexicon:', 'questions:' (q1–q3) and 'vetoes:'")
    lexicon = data.get("lexicon") or {}
    if not isinstance(lexicon, dict):
        raise ld.fail("lexicon:", "'lexicon' must map names to lists of terms")
    for name, terms in lexicon.items():
        if not isinstance(terms, list) or not all(isinstance(t, str) and t for t in terms):
            raise ld.fail(f"{name}:", f"lexicon entry {name!r} must be a list of non-empty strings")
        expanded: list[str] = []
        for term in terms:
            if term.startswith("@"):
                if term[1:] not in ld.lexicon:
                    raise ld.fail(f"{name}:", f"lexicon entry {name!r}: {term!r} must name an entry defined above it")
                expanded += ld.lexicon[term[1:]]
            else:
                expanded.append(term)
        ld.lexicon[str(name)] = expanded
    key_points: dict[str, list[KeyPoint]] = {}
    for qid in QUESTION_IDS:
        q = data["questions"].get(qid)
        if not isinstance(q, dict) or not isinstance(q.get("key_points"), list):
            raise ld.fail("questions:", f"question {qid} needs a 'key_points:' list")
        kps = []
        for n, raw in enumerate(q["key_points"]):
            kid = raw.get("id") if isinstance(raw, dict) else None
            if not isinstance(kid, str):
                raise SourceError(display, ld.key_point_line(qid, n, None), f"every key point of {qid} needs an 'id'")
            line = functools.partial(ld.key_point_line, qid, n, kid)
            pts = raw.get("points")
            if isinstance(pts, bool) or not isinstance(pts, (int, float)) or pts <= 0:
                raise SourceError(display, line(), f"key point {kid}: 'points' must be a positive number")
            says = _required_text(raw, "says", f"key point {kid}", display, line)
            hint = _required_text(raw, "hint", f"key point {kid}", display, line)
            kps.append(KeyPoint(kid, float(pts), says, hint, ld.patterns(raw, f"id: {kid}")))
        total = sum(k.points for k in kps)
        if abs(total - QUESTION_POINTS) > 1e-9:
            raise ld.fail(f"{qid}:", f"the key points of {qid} add up to {total:g}, not {QUESTION_POINTS}")
        key_points[qid] = kps
    vetoes = []
    for index, raw in enumerate(data.get("vetoes") or []):
        vid = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(vid, str):
            raise ld.fail("vetoes:", "every veto needs an 'id'")
        where = f"id: {vid}"
        questions = raw.get("questions", list(QUESTION_IDS))
        if not isinstance(questions, list) or not set(questions) <= set(QUESTION_IDS):
            raise ld.fail(where, f"veto {vid}: 'questions' must list some of q1, q2, q3")
        if not isinstance(raw.get("says"), str) or not raw["says"].strip():
            raise ld.fail(where, f"veto {vid}: needs 'says:', the misconception in one sentence (shown to the student)")
        explain = _required_text(raw, "explain", f"veto {vid}", display, functools.partial(ld.line, where))
        fire, keep = ld.examples(raw, index, vid, where)
        vetoes.append(
            Veto(
                vid,
                tuple(questions),
                raw["says"].strip(),
                explain,
                ld.patterns(raw, where),
                ld.unless(raw, where),
                fire,
                keep,
            )
        )
    for v in vetoes:
        for p in v.patterns:
            p.rivals = frozenset(id(rx) for rx in (*v.unless, *p.unless))
    for kps in key_points.values():
        for kp in kps:
            for p in kp.patterns:
                p.rivals = frozenset(id(rx) for rx in p.unless)
    exceptions = _prose_exceptions(data.get("prose_exceptions"), {v.id for v in vetoes}, ld)
    rubric = Rubric(display, key_points, vetoes, exceptions, _terms(ld, key_points, vetoes), _subjects(vetoes))
    rubric.subject_ids = _subject_ids(vetoes)
    rubric.literals = Index(_expressions(rubric))
    return rubric


def _expressions(rubric: Rubric) -> Iterator[re.Pattern[str]]:
    """Every compiled term of a rubric: heads, subjects, groups, ``unless`` terms, the term lists."""
    patterns = [p for kps in rubric.key_points.values() for kp in kps for p in kp.patterns]
    patterns += [p for v in rubric.vetoes for p in v.patterns]
    for p in patterns:
        yield from (rx for rx in (p.head, p.subject, *p.groups, *p.unless) if rx is not None)
    for v in rubric.vetoes:
        yield from v.unless
    yield from rubric.terms
    yield from rubric.subjects


def _subjects(vetoes: list[Veto]) -> tuple[re.Pattern[str], ...]:
    """What a clause may name as its own subject: every veto claim's subject and every ``unless`` term.

    A clause that opens with one of these that is a technique's name does not borrow the topic of an
    earlier clause (DP 的显存不变，ZeRO-3 把显存降到 1/N; see ``_names_own_subject``). Key points'
    subjects are left out: they name parts (每张卡, 副本) that stand inside a claim about the topic.
    """
    found = {rx for v in vetoes for p in v.patterns for rx in (p.subject, *p.unless) if rx is not None}
    found |= set(v for veto in vetoes for v in veto.unless)
    return tuple(sorted(found, key=lambda rx: rx.pattern))


def _subject_ids(vetoes: list[Veto]) -> frozenset[int]:
    """The ids of the veto claims' subjects: names that compete for any claim, whatever its veto.

    An ``unless`` term competes only for the claims of its own veto (see ``Pattern.rivals``): another
    veto's escape word (kernel, in a veto about something else) opening a clause is no rival subject.
    """
    return frozenset(id(p.subject) for v in vetoes for p in v.patterns if p.subject is not None)


def _terms(ld: _Loader, key_points: dict[str, list[KeyPoint]], vetoes: list[Veto]) -> tuple[re.Pattern[str], ...]:
    """Every distinct term of the rubric (lexicon entries, heads and groups), to recognise keyword lists."""
    patterns = [p for kps in key_points.values() for kp in kps for p in kp.patterns]
    patterns += [p for v in vetoes for p in v.patterns]
    found = {ld.regex(f"@{name}", "lexicon:") for name in ld.lexicon}
    found |= {rx for p in patterns for rx in (p.head, *p.groups) if rx is not None}
    return tuple(sorted((rx for rx in found if not _GAP.search(rx.pattern)), key=lambda rx: rx.pattern))


def _prose_exceptions(raw: Any, veto_ids: set[str], ld: _Loader) -> list[ProseException]:
    """Validate ``prose_exceptions:``: each entry names a known veto, a sentence fragment and a reason."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ld.fail("prose_exceptions:", "'prose_exceptions' must be a list of {veto, text, reason} entries")
    out = []
    for n, entry in enumerate(raw):
        line = ld.item_line(("prose_exceptions",), n) or ld.line("prose_exceptions:")
        if not isinstance(entry, dict):
            raise SourceError(ld.path, line, "a prose exception must be a mapping with 'veto', 'text' and 'reason'")
        unknown = set(entry) - {"veto", "text", "reason"}
        if unknown:
            raise SourceError(ld.path, line, f"prose exception: unknown key(s) {sorted(unknown)}")
        veto = entry.get("veto")
        if veto not in veto_ids:
            known = ", ".join(sorted(veto_ids)) or "none"
            raise SourceError(ld.path, line, f"prose exception: unknown veto {veto!r}; known vetoes: {known}")
        for key, what in (("text", "a fragment of the lesson's sentence"), ("reason", "why the veto may fire on it")):
            value = entry.get(key)
            if not isinstance(value, str) or not value.strip():
                raise SourceError(ld.path, line, f"prose exception for {veto}: needs '{key}:', {what}")
        out.append(ProseException(veto, entry["text"].strip(), entry["reason"].strip(), line))
    return out


# --- matching ----------------------------------------------------------------------------------
Span = tuple[int, int]
_Clause = tuple[int, int]  # (sentence index, start of the statement): one thing said


class _Answer:
    """An answer cut into sentences, with each term's matches per sentence found once.

    Patterns share lexicon terms and are tried sentence by sentence; caching the matches keeps
    every pass linear in the text, and ``MAX_HITS`` bounds what one sentence can hold.
    ``barred(i)`` says whether sentence i may earn no key point and why (a keyword list, copied
    from the question); it is decided only for sentences where a key point matches, and once.
    Vetoes read every sentence. ``skipped`` collects why matches were passed over.
    """

    def __init__(self, rubric: Rubric, sentences: list[Sentence], grams: frozenset[str] = frozenset()) -> None:
        self.sentences = sentences
        self._hits: dict[tuple[int, int], list[Span]] = {}
        self._need = rubric.literals.need
        self._located = rubric.literals.locate([folded(s.text) for s in sentences])  # term id → sentences
        self._live_terms: list[re.Pattern[str]] | None = None  # terms the answer may hold
        self._term_spans: dict[int, list[Span]] = {}
        self._name_starts: dict[int, dict[int, list[tuple[int, int]]]] = {}  # per sentence: name start → (end, term id)
        self._terms = rubric.terms
        self._grams = grams
        self.subjects = rubric.subjects
        self._subject_ids = rubric.subject_ids
        self._barred: dict[int, str | None] = {}
        self._bare: dict[int, int | None] = {}
        self.skipped: set[str] = set()
        self.vetoed: dict[int, list[Span]] = {}  # per sentence, the clauses of each fired veto's claim

    def in_vetoed_claim(self, i: int, pos: int) -> bool:
        """Does ``pos`` of sentence i belong to a claim that fired a veto? Those earn no key point.

        A sentence that states a misconception earns nothing; only in a long run-on sentence (at least
        ``RUN_ON_CLAUSES`` clauses) do the clauses outside the vetoed claim keep their key points.
        """
        claims = self.vetoed.get(i, ())
        if not claims:
            return False
        if sum(1 for _ in _CLAUSE_END.finditer(self.sentences[i].text)) + 1 < RUN_ON_CLAUSES:
            return True
        return any(lo <= pos < hi for lo, hi in claims)

    def barred(self, i: int) -> str | None:
        """Why sentence i earns no key point: "copied" (from the question), "list" (of terms), or None."""
        if i not in self._barred:
            text = self.sentences[i].text
            why = None
            if self._grams and _copied(text, self._grams):
                why = "copied"
            elif self._terms and self._listed(i):
                why = "list"
            self._barred[i] = why
        return self._barred[i]

    def _listed(self, i: int) -> bool:
        """Is sentence i an item of a keyword list: bare terms, two or more, or one next to another bare line?

        A lone bare term after a statement is a short answer (所以正确。8 倍。); one term per line,
        line after line, is a list written vertically.
        """
        terms = self.bare(i)
        if terms is None:
            return False
        return terms >= 2 or (
            terms == 1 and any((self.bare(j) or 0) >= 1 for j in (i - 1, i + 1) if 0 <= j < len(self.sentences))
        )

    def bare(self, i: int) -> int | None:
        """How many terms sentence i lists with nothing relating them, or None if it reads as a statement."""
        if i not in self._bare:
            spans = self.term_spans(i)
            self._bare[i] = _bare_terms(self.sentences[i].text, spans)
        return self._bare[i]

    def term_spans(self, i: int) -> list[Span]:
        """The matches in sentence i of every term of the rubric (those the answer may hold are tried)."""
        if i not in self._term_spans:
            if self._live_terms is None:
                self._live_terms = [rx for rx in self._terms if self.where(rx) is None or self.where(rx)]
            self._term_spans[i] = [
                sp for rx in self._live_terms if (w := self.where(rx)) is None or i in w for sp in self.hits(i, rx)
            ]
        return self._term_spans[i]

    def names_at(self, i: int, pos: int, end: int, rivals: frozenset[int] | None = None) -> list[Span]:
        """The matches in sentence i of the rubric's names (``subjects``) that start at ``pos`` and end by ``end``:
        with ``rivals`` (the ids of the claim's own ``unless`` terms), only those and the veto subjects.

        Asked once per clause a claim might borrow its topic into; the names of a sentence are read
        once, since a rubric has a hundred or more of them.
        """
        starts = self._name_starts.get(i)
        if starts is None:
            starts = self._name_starts[i] = {}
            for rx in self.subjects:
                for a, b in self.hits(i, rx):
                    starts.setdefault(a, []).append((b, id(rx)))
        return [
            (pos, b)
            for b, rid in starts.get(pos, ())
            if b <= end and (rivals is None or rid in rivals or rid in self._subject_ids)
        ]

    def unit(self, i: int, pos: int) -> int:
        """Where the statement holding ``pos`` in sentence i starts: its clause, cut again at connectives
        (所以, 而且...) for students who write without commas, unless the connective is (part of) one of the
        rubric's terms (同时 in 计算的同时发起通信 names overlap, it does not start a new statement)."""
        s = self.sentences[i]
        lo, _ = _clause(s.text, pos)
        cuts = [m for m in _CONNECTIVES.finditer(s.text, lo, pos) if _whole(m, s.text)]
        if cuts:
            inside = self.term_spans(i)
            for m in cuts:
                if not any(a <= m.start() and m.end() <= b for a, b in inside):
                    lo = m.start()
        return lo

    def item(self, i: int, unit: int, p: Pattern, head: int) -> int:
        """Where the 、-item of the statement at ``unit`` that a key point's match names starts.

        An enumeration (ZeRO-3 切分参数、梯度和优化器状态) states one fact per item, so each item is a
        statement of its own when key points are given statements: two claims named in one 、-list earn
        both. The item is the one holding the claim's first object (its first group), else the head's.
        Only claims (a subject bound to a predicate) are split so: a head pattern's words in a 、-list
        are as likely a bare list of terms (FSDP、ZeRO、省显存). Negation and clauses are untouched: a
        cue before the list still covers every item.
        """
        text = self.sentences[i].text
        end = _clause(text, head)[1]
        if p.subject is None or "、" not in text[unit:end]:
            return unit
        anchor = head
        if p.groups:
            anchor = next((a for a, _ in self.hits(i, p.groups[0]) if unit <= a < end), head)
        cut = text.rfind("、", unit, anchor)
        return unit if cut < 0 else cut + 1

    def passes(self, i: int, lists_allowed: bool = False) -> bool:
        """May sentence i earn a key point? If not, remember why (for the student's note)."""
        why = self.barred(i)
        if why is None or (lists_allowed and why == "list"):
            return True
        self.skipped.add(why)
        return False

    def hits(self, i: int, rx: re.Pattern[str]) -> list[Span]:
        """Non-overlapping matches of ``rx`` in sentence i, in order (so their ends ascend too).

        Keyed by the pattern's identity: the rubric keeps its patterns alive while an answer is
        scored, and hashing a compiled pattern would hash its whole code on every lookup. A sentence
        without any literal the pattern needs (``anchors``) is not searched.
        """
        where = self.where(rx)
        if where is not None and i not in where:
            return []
        key = (i, id(rx))
        found = self._hits.get(key)
        if found is None:
            found = self._hits[key] = [m.span() for m in islice(rx.finditer(self.sentences[i].text), MAX_HITS)]
        return found

    def where(self, rx: re.Pattern[str]) -> AbstractSet[int] | None:
        """The sentences that hold a literal ``rx`` needs, or None if every sentence must be searched."""
        rid = id(rx)
        found = self._located.get(rid)
        if found is not None:
            return found
        return None if self._need.get(rid) is None else _NOWHERE

    def sentences_for(self, rx: re.Pattern[str] | None) -> Iterable[int]:
        """The indices of the sentences where ``rx`` may match, in order (all of them for no term)."""
        where = None if rx is None else self.where(rx)
        return range(len(self.sentences)) if where is None else sorted(where)


_NOWHERE: frozenset[int] = frozenset()  # a term none of whose literals the answer holds


def _within(spans: list[Span], lo: int, hi: int) -> Span | None:
    """The first span inside [lo, hi), if any."""
    k = bisect_left(spans, lo, key=lambda sp: sp[0])
    return spans[k] if k < len(spans) and spans[k][1] <= hi else None


def _nearest(spans: list[Span], pos: int) -> Span | None:
    """The span whose start is nearest to ``pos`` (the earlier one on a tie)."""
    k = bisect_left(spans, pos, key=lambda sp: sp[0])
    near = [spans[j] for j in (k - 1, k) if 0 <= j < len(spans)]
    return min(near, key=lambda sp: abs(sp[0] - pos), default=None)


def _evidence(s: Sentence, start: int = 0, end: int = 0) -> Evidence:
    """Evidence for text[start:end] of a sentence, located in the student's own text of it."""
    if end <= start or not s.origin:
        return Evidence(s.original, 0, 0)
    lead = len(_safe(s.raw)) - len(_safe(s.raw).lstrip())
    a = len(_safe(s.raw[: s.origin[start]])) - lead
    b = len(_safe(s.raw[: s.origin[end - 1] + 1])) - lead
    return Evidence(s.original, max(0, min(a, len(s.original))), max(0, min(b, len(s.original))))


@dataclass(frozen=True)
class _Hit:
    """Where a pattern matched: the head, and the clauses [lo, hi) that hold the whole claim."""

    head: Span
    lo: int
    hi: int
    topic: bool = False  # the subject was taken from an earlier clause or sentence


def _match(
    p: Pattern,
    answer: _Answer,
    i: int,
    allowed: tuple[str, ...],
    exclude: frozenset[int] = frozenset(),
    after: int = -1,
) -> tuple[_Hit | None, str | None]:
    """Try a head-pattern on sentence i. Returns (hit, None) on a match, or (None, why-not).

    A claim (``subject`` set) binds the head to its subject: the subject must stand in the head's
    clause, or be the topic that an earlier clause of the sentence (or, with ``context``, the previous
    sentence) set up. Heads in a clause listed in ``exclude`` (by its start), and heads that start at
    or before ``after`` (a match already judged), are passed over. Only the first ``MAX_HEADS`` heads
    of the sentence are ever tried, whatever ``after`` is; each costs a bisection per group.
    """
    assert p.head is not None
    s = answer.sentences[i]
    heads = answer.hits(i, p.head)
    if not heads:
        return None, None
    groups = [answer.hits(i, g) for g in p.groups]
    elsewhere = [bool(p.context and i > 0 and answer.hits(i - 1, g)) for g in p.groups]
    if not p.clause and not all(own or far for own, far in zip(groups, elsewhere)):
        return None, None
    subjects = answer.hits(i, p.subject) if p.subject is not None else []
    subject_before = bool(p.subject is not None and p.context and i > 0 and answer.hits(i - 1, p.subject))
    if p.subject is not None and not subjects and not subject_before:
        return None, None
    masks = sorted((sp for spans in (*groups, subjects) for sp in spans), key=lambda sp: sp[1])
    mask_ends = [b for _, b in masks]
    why: str | None = None
    for h0, h1 in heads[bisect_right(heads, after, key=lambda sp: sp[0]) : MAX_HEADS]:
        if exclude and answer.unit(i, h0) in exclude:
            continue
        lo, hi = _clause(s.text, h0) if p.clause else (0, len(s.text))
        topic = False
        if p.subject is not None:
            if not _within(subjects, lo, hi):
                earlier = [sp for sp in subjects if sp[1] <= lo]
                if not earlier and not subject_before:
                    continue
                if _names_own_subject(p, answer, i, lo, h0, masks):
                    continue  # this clause is about someone else: it does not borrow the topic
                topic = True
                if earlier:
                    lo = _clause(s.text, earlier[-1][0])[0]
        olo = _topic_start(s.text, lo) if p.subject is not None else lo
        if p.subject is not None and _CLEFT.match(s.text, h1):
            olo = max(olo, _clause(s.text, h0)[0])  # 切的是 token: the cleft names its own object
        if p.clause and not all(far or _within(spans, olo, hi) for spans, far in zip(groups, elsewhere)):
            continue
        if (
            p.subject is not None
            and groups
            and not _objects_in_scope(s.text, groups, elsewhere, (olo, hi, h0), heads, subjects)
        ):
            continue
        if p.span is not None:
            near = [(h0, h1)] + [_nearest(spans, h0) or (h0, h1) for spans in groups]
            if max(e for _, e in near) - min(b for b, _ in near) > p.span:
                continue
        status = _status_at(s, h0)
        if status not in allowed:
            why = why or status
            continue
        window = masks[bisect_right(mask_ends, h0 - NEG_CHARS) : bisect_right(mask_ends, h0)]
        is_neg = _polarity_negative(s, h0, h1, tuple(window), p.head)
        if is_neg != (p.polarity == "negative"):
            why = why or ("negated" if is_neg else "affirmed")
            continue
        return _Hit((h0, h1), lo, hi, topic), None
    return None, why


# A cleft after the predicate (切的是 token, 降低的其实是激活) names the predicate's object in its own clause:
# it does not borrow an object from an earlier clause ("CP 不切权重，切的是 token" says nothing of 权重).
_CLEFT = re.compile(r"\s*(?:了)?的(?:其实|只|仅仅|仅|主要|都|就|反而|恰恰)?(?:是|为)")


# "对于 X，…" / "至于 X，…" names the topic of the clause that follows: the claim's subject or object may
# stand there (对于显存，DP 能降低它).
_TOPIC_FRAME = re.compile(r"\s*(?:但是|但|而|不过)?\s*(?:对于|至于|关于|说到|谈到)")


def _topic_start(text: str, lo: int) -> int:
    """The start of a topic-naming clause (对于 X，) right before the clause at ``lo``, else ``lo``."""
    if lo == 0:
        return lo
    start = _clause_before(text, lo)[0]
    return start if _TOPIC_FRAME.match(text, start, lo) else lo


OBJECT_WORDS = 3  # words that may stand between a predicate and the object it takes (降低了每张卡的显存)


def _objects_in_scope(
    text: str,
    groups: list[list[Span]],
    elsewhere: list[bool],
    span: tuple[int, int, int],
    heads: list[Span],
    subjects: list[Span],
) -> bool:
    """Can the predicate at ``h0`` take each of the claim's objects?

    An object that follows an earlier predicate of the same pattern in the predicate's own clause
    (V1 O … V2) is the object of that earlier predicate: in "不降低每卡显存、卡数很大时效率下降" 显存 goes with 降低, and
    下降 is said of 效率.
    """

    lo, hi, h0 = span
    clause_lo = _clause(text, h0)[0]

    def taken(a: int) -> bool:
        """Does a predicate end right before the object (a few words, no subject in between)?"""
        return a >= clause_lo and any(
            clause_lo <= e <= a
            and _words_between(text, e, a) <= OBJECT_WORDS
            and not any(e <= x and y <= a for x, y in subjects)
            for _, e in heads
        )

    return all(
        far or any(lo <= a and b <= hi and not (b <= h0 and taken(a)) for a, b in spans)
        for spans, far in zip(groups, elsewhere)
    )


# A clause names its own subject when it opens (after a connective) with the name of a technique and
# a verb or 的 follows: "ZeRO-3 把显存降到 1/N", "TP 的显存会降低", "张量并行会…". A name is a Latin
# word that the rubric lists as a veto subject or ``unless`` term, or a Chinese …并行. A clause that
# opens with a quantity or a modifier (每个 token 要做的计算就越多) keeps the topic of the sentence.
_OPENER = re.compile(r"\s*(?:(?:而且|而|但是|但|并且|不过|and|but|while|whereas)(?![a-z])\s*)?")
# The rest of a name the rubric term starts (zero → zero-3, zero-1/2).
_NAME_TAIL = re.compile(r"(?:[a-z0-9_.+-]|/(?=[0-9]))*")
_TECHNIQUE = re.compile(r"[a-z](?:[a-z0-9_.+-]|/(?=[0-9]))*|[\u4e00-\u9fff]{1,5}并行")
# Two techniques joined at a clause's start (ZeRO 和 FSDP 把…, ZeRO-1/2 和 DP 持平) are the clause's subject.
_AND = re.compile(r"\s*(?:和|与|跟|及|以及|、|/|&|and(?![a-z]))\s*")
_SUBJECT_MARKER = re.compile(
    r"\s*(?:把|被|将|会|能|可以|则|就|也|让|使|只|才|需要|要|的"
    r"|(?:is|are|can|will|does|do|reduces?|keeps?|needs?|cuts?|saves?)(?![a-z]))"
)


def _name_end(text: str, b: int, h0: int) -> int:
    """Where the name a rubric term starts at ends (the term zero names zero-3), before ``h0``."""
    m = _NAME_TAIL.match(text, b, h0)
    return m.end() if m else b


def _names_own_subject(p: Pattern, answer: _Answer, i: int, lo: int, h0: int, own: list[Span]) -> bool:
    """Does the clause text[lo:h0] open with a technique of its own, other than the claim's subject?

    Then it does not borrow the topic of an earlier clause (DP 的显存不变，ZeRO-3 把显存降到 1/N; … but
    ZeRO reduces memory, where the name stands right before the predicate). A name that is (part of)
    the claim's own subject or object (``own``) is no competitor. A single name competes only when it is a
    veto's subject or an ``unless`` term of the claim's own veto: another veto's escape word (kernel 的…)
    is no rival. Two names joined (ZeRO-1/2 和 FSDP) are a subject whichever vetoes list them.
    """
    text = answer.sentences[i].text
    at = _OPENER.match(text, lo, h0)
    pos = at.end() if at else lo
    rivals = {b for _, b in answer.names_at(i, pos, h0, p.rivals)}
    names = answer.names_at(i, pos, h0)
    if (m := _TECHNIQUE.match(text, pos, h0)) and m.group().endswith("并行"):
        names.append(m.span())
        rivals.add(m.end())
    return any(
        _TECHNIQUE.fullmatch(text, a, e)
        and (
            (b in rivals and (_SUBJECT_MARKER.match(text, e, h0) or not text[e:h0].strip())) or _pair(answer, i, e, h0)
        )
        and not any(x < e and a < y for x, y in own)
        and not (p.subject and p.subject.fullmatch(text, a, e))
        for a, b in names
        for e in (_name_end(text, b, h0),)
    )


def _pair(answer: _Answer, i: int, b: int, h0: int) -> bool:
    """Does a second technique (a rubric subject or ``unless`` name, or a …并行) follow the name that
    ends at ``b`` (ZeRO 和 FSDP, ZeRO-1/2 和 DP)?

    Two techniques joined at the start of a clause are what the clause is about (ZeRO 和 FSDP 把梯度
    切分到多张卡上; ZeRO-1/2 和 DP 持平), so it needs no verb right after them to name its own subject.
    """
    text = answer.sentences[i].text
    joint = _AND.match(text, b, h0)
    if not joint or joint.end() == b:
        return False
    pos = joint.end()
    if answer.names_at(i, pos, h0):
        return True
    m = _TECHNIQUE.match(text, pos, h0)
    return bool(m and m.group().endswith("并行"))


def _polarity_negative(
    s: Sentence, h0: int, h1: int, masks: tuple[Span, ...] = (), head: re.Pattern[str] | None = None
) -> bool:
    """Is the head at s.text[h0:h1] said in the negative? An answered question takes its answer's polarity.

    ``head`` is the term that matched there: a cue that its gap took in negates it too (see ``_gap_negations``).
    """
    if s.answered in ("positive", "negative"):
        return s.answered == "negative"
    # "agree": as worded (对，… to a negative question); "flip": the opposite of the wording.
    neg = negated(s.text, h0, h1, masks)
    if head is not None and _gap_negations(head, s.text, h0, h1) % 2:
        neg = not neg
    return not neg if s.answered == "flip" else neg


MAX_GAP_CUES = 4  # negation cues read inside one head match: bounds the re-matching


def _last_part(rx: re.Pattern[str], text: str, h0: int, h1: int) -> int:
    """Where the last part of the term's match text[h0:h1] starts: the latest group that ends the match
    (the verb of 字节[^，]{0,6}(变多|翻倍)), else the last word."""
    m = rx.match(text, h0)
    starts = [m.start(g) for g in range(1, (rx.groups or 0) + 1) if m and m.end(g) == h1 and m.start(g) > h0]
    if starts:
        return max(starts)
    bounds = _sorted_bounds(text)
    return bounds[max(0, bisect_left(bounds, h1) - 1)]


def _gap_negations(rx: re.Pattern[str], text: str, h0: int, h1: int) -> int:
    """How many negation cues inside the head match text[h0:h1] stand in a gap of the term, not in its words.

    A term with a gap (字节[^，]{0,6}变多) spans the words between its parts, and a cue there (字节数并没
    变多) negates the predicate as a cue before the head would. A cue the term itself names (解决不了)
    is part of the term: the test is whether the term still matches the same text with the cue taken
    out. The cue must stand right before the term's last part (its last group, else its last word; at
    most ``NEG_CHAIN`` words between): in 比不切分略低 the 不 negates 切分, a word inside the comparison,
    not 低. A cue after a complete
    match of the term (是 TP 而不是 PP, where 是 TP alone matches) negates a predicate of its own, not the
    claim. A–not–A forms (是不是) and false cues (不同) are no cues here.
    """
    span = text[h0:h1]
    if not _CUE_RE.search(span):
        return 0
    false_cues = _false_cues(text, h0)
    window = _mask(_A_NOT_A.sub(lambda m: "＿" * 3, _mask(span, false_cues)), false_cues)
    last = _last_part(rx, text, h0, h1)
    count = 0
    for m in islice(_CUE_RE.finditer(window), MAX_GAP_CUES):
        a, b = h0 + m.start(), h0 + m.end()
        if rx.match(text, h0, a):
            break  # the claim is complete before this cue: it and any later cue negate something else
        if (
            _negates(m, text, h0)
            and _words_between(text, b, last) <= NEG_CHAIN
            and rx.fullmatch(text[:a] + text[b:], h0, h1 - (b - a))
        ):
            count += 1
    return count


def _count(p: Pattern, answer: _Answer, allowed: tuple[str, ...]) -> tuple[Evidence | None, _Clause | None]:
    """Count the pattern's groups named anywhere in the answer (``at_least``); also the statement where
    the first of them is named, which the key point then occupies (see ``_assign``).

    Naming several things may be done in a list (- ZeRO - TP - PP), so a list sentence counts
    unless a group relates words (a gap between them, zero-1[^。]{0,30}优化器): that needs a statement.
    """
    relational = any(_GAP.search(g.pattern) for g in p.groups)
    hits: dict[int, tuple[Sentence, int]] = {}
    for gi, g in enumerate(p.groups):
        for s in answer.sentences:
            at = next(
                (
                    a
                    for a, b in answer.hits(s.index, g)[:MAX_HEADS]
                    if not _polarity_negative(s, a, b, head=g) and _status_at(s, a) in allowed
                ),
                None,
            )
            if at is not None and answer.passes(s.index, lists_allowed=not relational):
                hits[gi] = (s, at)
                break
    if len(hits) < p.at_least:
        return None, None
    used = sorted({s.index: s for s, _ in hits.values()}.values(), key=lambda s: s.index)
    s0, a0 = min(hits.values(), key=lambda h: (h[0].index, h[1]))
    return Evidence(" … ".join(s.original for s in used), 0, 0), (s0.index, answer.unit(s0.index, a0))


KEY_POINT_STATUSES = ("asserted", "hedged")
VETO_STATUSES = ("asserted",)


# Connectives that start a new statement inside a clause, for students who write without commas.
_CONNECTIVES = re.compile(r"所以|因为|因此|而且|并且|但是|但|然而|可是|然后|同时|否则|不然|这样|那么|于是|而")


def _candidates(
    patterns: list[Pattern], answer: _Answer, allowed: tuple[str, ...], limit: int = MAX_HEADS
) -> tuple[list[tuple[_Clause | None, Evidence]], str | None]:
    """Every clause where the patterns match (a count over the whole answer has no clause), up to ``limit``,
    and why the nearest miss failed. A sentence where a veto fired, or that may not earn key points, is skipped."""
    out: list[tuple[_Clause | None, Evidence]] = []
    units: list[_Clause] = []  # the statements matched so far: a key point takes one option per statement
    why: str | None = None
    for p in patterns:
        if p.at_least:
            ev, first = _count(p, answer, allowed)
            if ev:
                out.append((first, ev))
                units += [first] if first else []
            if len(out) >= limit:
                return out, None
            continue
        for k in answer.sentences_for(p.head):
            s = answer.sentences[k]
            taken: set[int] = {c for i, c in units if i == s.index}
            while len(out) < limit:
                hit, reason = _match(p, answer, s.index, allowed, frozenset(taken))
                if reason and why is None:
                    why = f"{reason}: {s.original}"
                if hit is None or not answer.passes(s.index):
                    break
                clause = answer.unit(s.index, hit.head[0])
                taken.add(clause)
                units.append((s.index, clause))
                if answer.in_vetoed_claim(s.index, hit.head[0]):
                    continue  # a clause that states a misconception earns nothing
                if p.unless and _unless(p.unless, p, answer, s.index, hit):
                    continue  # it is said of something else, as a veto's `unless` reads it
                item = answer.item(s.index, clause, p, hit.head[0])
                out.append(((s.index, item), _evidence(s, *hit.head)))
            if len(out) >= limit:
                return out, None
    return out, (None if out else why)


def _assign(options: list[list[tuple[_Clause | None, Evidence]]]) -> list[Evidence | None]:
    """Give each key point a clause of its own (a maximum bipartite matching, Kuhn's algorithm).

    One clause states one thing: a single sentence strung from the rubric's words cannot collect every
    key point at once, while an answer that states each point somewhere gets them all. A count over
    the whole answer (``at_least``) needs no clause of its own.
    """
    owner: dict[_Clause, int] = {}
    chosen: list[int | None] = [None] * len(options)

    def place(k: int, seen: set[_Clause]) -> bool:
        for n, (clause, _) in enumerate(options[k]):
            if clause is None:
                chosen[k] = n
                return True
            if clause in seen:
                continue
            seen.add(clause)
            if clause not in owner or place(owner[clause], seen):
                owner[clause] = k
                chosen[k] = n
                return True
        return False

    for k in range(len(options)):
        place(k, set())
    return [options[k][n][1] if n is not None else None for k, n in enumerate(chosen)]


def score_answer(rubric: Rubric, question: str, text: str, question_text: str | None = None) -> AnswerResult:
    """Score one answer: key points found (with evidence), missing ones, vetoes fired and suppressed.

    Any ``str`` is accepted. Text past ``MAX_ANSWER_CHARS`` is not read, and ``notes`` tells the
    student so; an answer without any Chinese gets a note that the rubric reads Chinese. Only
    statements earn key points: a sentence that merely lists terms does not, nor (when
    ``question_text`` is given) one copied from the question; a note says so when that cost a
    key point. Vetoes read every sentence.
    """
    notes: list[str] = []
    if len(text) > MAX_ANSWER_CHARS:
        text = text[:MAX_ANSWER_CHARS]
        notes.append(NOTE_TRUNCATED.format(limit=MAX_ANSWER_CHARS))
    grams = _grams(question_text) if question_text else frozenset()
    answer = _Answer(rubric, split_sentences(text), grams)
    if not any(_HAN.search(s.text) for s in answer.sentences):
        notes.append(NOTE_NO_CHINESE)
    fired: list[tuple[Veto, Evidence]] = []
    suppressed: list[tuple[Veto, Evidence, str]] = []
    for veto in rubric.vetoes_for(question):
        matches = list(_veto_matches(veto, answer))
        fires = [(i, ev, claim) for i, ev, why, claim in matches if why is None]
        if fires:
            fired.append((veto, fires[0][1]))
            for i, _, claim in fires:
                answer.vetoed.setdefault(i, []).append(claim)
        elif matches:
            suppressed.append((veto, matches[0][1], matches[0][2] or ""))
    found: list[tuple[KeyPoint, Evidence]] = []
    missing: list[KeyPoint] = []
    lost: set[str] = set()  # why a barred sentence cost a key point
    options: list[list[tuple[_Clause | None, Evidence]]] = []
    skipped: list[set[str]] = []
    for kp in rubric.key_points[question]:
        answer.skipped.clear()
        options.append(_candidates(kp.patterns, answer, KEY_POINT_STATUSES, limit=MAX_OPTIONS)[0])
        skipped.append(set(answer.skipped))
    for kp, kev, why in zip(rubric.key_points[question], _assign(options), skipped):
        if kev:
            found.append((kp, kev))
        else:
            missing.append(kp)
            lost |= why
    notes += [note for why, note in (("list", NOTE_LIST), ("copied", NOTE_COPIED)) if why in lost]
    points = min(QUESTION_POINTS, round(sum(k.points for k, _ in found), 2))
    return AnswerResult(question, points, float(QUESTION_POINTS), found, missing, fired, suppressed, notes)


def _letters(text: str) -> str:
    """Letters and digits only: copying is judged regardless of punctuation and spacing."""
    return "".join(ch for ch in text if unicodedata.category(ch)[0] in "LN")


def _grams(question_text: str) -> frozenset[str]:
    """Every run of ``COPY_RUN`` letters of the question (normalised as answers are)."""
    letters = _letters(normalise(question_text[: 4 * MAX_ANSWER_CHARS]))
    return frozenset(letters[i : i + COPY_RUN] for i in range(len(letters) - COPY_RUN + 1))


def _copied(text: str, grams: frozenset[str]) -> bool:
    """Are at least ``COPY_SHARE`` of the sentence's Chinese characters inside runs copied from the question?

    A run is any stretch of ``COPY_RUN`` or more letters/digits that also occurs in the question;
    every character of it is covered. The share is taken over Chinese characters only: technical
    terms (micro-batch, all-reduce, no_sync) are long, and an answer has to repeat them. Linear.
    """
    letters = _letters(text)
    han = [bool(_HAN.match(ch)) for ch in letters]
    if sum(han) < COPY_RUN:
        return False
    covered = bytearray(len(letters))
    for i in range(len(letters) - COPY_RUN + 1):
        if letters[i : i + COPY_RUN] in grams:
            covered[i : i + COPY_RUN] = b"\x01" * COPY_RUN
    return sum(c for c, h in zip(covered, han) if h) >= COPY_SHARE * sum(han)


def _separator(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch)[0] == "P" or ch in _LIST_SEPARATORS


# A terse English statement: words, an inflected verb of this course (reduces, needs, shards, kept),
# more words; no Chinese and no list punctuation. Its verb is often a rubric term, so without this
# rule "DP reduces memory." would read as a list of three terms. A bare verb (cut, split) is not
# enough: in a list it is as likely a noun.
_EN_VERB = (
    r"(?:(?:reduc|sav|requir|replicat|stor|mov|averag|hid|scal|increas|decreas|halv|doubl|remov|rais|chang|"
    r"us|tak|mak|giv|caus|wast|comput|communicat|synchroniz|trad|recomput|accumulat|divid|duplicat|balanc|"
    r"rout|combin|fus|mak|overlap|shrink|fill|drain|lower|stay|remain|depend|equal|match|gather|scatter|"
    r"need|shard|split|partition|keep|hold|send|sum|grow|fit|cost|add|drop|avoid|block|wait|stall|run|"
    r"sync|broadcast|spread|dispatch|mean|speed|slow|lead|allow|hurt|help|cut|shrank|cop)(?:es|s|ed|d|ies)"
    r"|kept|held|sent|grew|made|took|gave|ran|shrank|fits)"
)
_TERSE_ENGLISH = re.compile(rf"[a-z0-9][\w().'’+-]*(?: [\w().'’+-]+){{0,4}} {_EN_VERB} [a-z0-9][\w().'’+ -]*")
MAX_TERSE_WORDS = 12


def _terse_english(text: str) -> bool:
    """Is the sentence a short English statement (subject, an inflected verb, more words)?"""
    words = text.strip(" .!?;\n\t").strip()
    return (
        not _HAN.search(words) and len(words.split()) <= MAX_TERSE_WORDS and _TERSE_ENGLISH.fullmatch(words) is not None
    )


# 越 X 越 Y written as one phrase relates two quantities, even when each half is a rubric term (SRAM 越大
# 访问越少); halves split by 、 or a comma may be items of a list, as before.
_PAIRED_YUE = re.compile(r"越[^越。!?;、,:，：]{1,20}?越")


def _holds_negation(text: str, a: int, b: int) -> bool:
    """Does the term matched at text[a:b] open with a negation of its own (不切权重, 没有人等)? Right after
    another term, with only a space between, it denies something of that term (CP 不切权重): a
    statement, not two items of a list. A cue inside a fixed phrase (放不下, 大差不差) or an A-not-A
    (是不是) is not one."""
    window = _mask(_A_NOT_A.sub(lambda m: "＿" * 3, _mask(text[a:b], _FALSE_CUES)), _FALSE_CUES)
    m = _CUE_RE.match(window)
    return bool(m and m.end() < len(window) and _negates(m, text, a))


def _bare_terms(text: str, matches: list[Span]) -> int | None:
    """How many terms the sentence lists with nothing relating them; None if it reads as a statement.

    It reads as a statement if it has a relation sign, or a function/predicate character (or an
    English function word) outside the rubric's terms or as a whole term (是), or two terms joined
    with no separator between them (切优化器状态). A list of terms separated by spaces or
    punctuation has none of these, whatever their order. ``matches`` are the spans of the rubric's terms
    in the sentence (``MAX_HITS`` per term at most). A terse English statement (DP reduces memory)
    reads as one too: its verb may itself be one of the rubric's terms (see ``_terse_english``).
    """
    if _RELATION.search(text) or _terse_english(text) or _PAIRED_YUE.search(text):
        return None
    covered = bytearray(len(text))
    spans: list[Span] = []
    for a, b in matches:
        if not FUNCTION_CHARS.issuperset(text[a:b].replace(" ", "")):  # a copula term (是) is glue
            covered[a:b] = b"\x01" * (b - a)
            spans.append((a, b))
    residue = "".join(ch if not c else " " for ch, c in zip(text, covered))
    if any(ch in FUNCTION_CHARS for ch in residue) or _EN_FUNCTION.search(residue):
        return None
    end, kept = -1, 0
    for a, b in sorted(spans, key=lambda sp: (sp[0], -sp[1])):  # the longest term at each start
        if a < end:
            continue
        if a == end and not _separator(text[a - 1]) and not _separator(text[a]):
            return None  # two terms written as one phrase
        if end >= 0 and not text[end:a].strip() and _holds_negation(text, a, b):
            return None  # CP 不切权重: a term denied of the term before it, not two items
        end, kept = b, kept + 1
    return kept


def _unless(terms: list[re.Pattern[str]], p: Pattern, answer: _Answer, i: int, hit: _Hit) -> Span | None:
    """The first of ``terms`` (a veto's and its pattern's, or a key point pattern's 'unless') inside the
    clauses of the matched claim: it says the sentence is about something else (a neighbouring
    technique, another quantity). Elsewhere in the sentence it does not count."""
    s = answer.sentences[i]
    own = _status_at(s, hit.head[0])
    lo, hi = _head_scope(p, answer, i, hit) if p.subject is None and not p.clause else (hit.lo, hit.hi)
    lo = _frame_start(s.text, lo)
    subject = _nearest_before(answer.hits(i, p.subject), hit.head[0]) if p.subject is not None else None
    for u in terms:
        for a, b in answer.hits(i, u):
            # A term inside someone else's reported words says nothing about the student's own claim;
            # one in a condition before the claim (如果用了 ZeRO，…) sets the scope of its consequent.
            status = _status_at(s, a)
            if (subject is None or a >= subject[1]) and _UNLESS_CUT.search(s.text, b, max(b, hit.head[0])):
                # 重计算用时间换空间，但总计算量不变: what is said of the subject before the contrast does
                # not qualify what follows it. A term before the subject (FP16 的精度比 BF16 高) still frames it.
                continue
            if (lo <= a and b <= hi and status in (own, "hedged")) or (status == "hedged" and b <= hit.head[0]):
                return a, b  # in the claim's clauses, a framing clause, or a condition the claim depends on
    return None


def _head_scope(p: Pattern, answer: _Answer, i: int, hit: _Hit) -> Span:
    """The part of the sentence a head pattern's ``unless`` terms may stand in: the sentence, less what
    an English "but"/"however" divides from the match (the head and, per group, its nearest match).
    "All-reduce averages the gradients but we still divide by N" is about all-reduce whatever the
    student does after "but". A Chinese 但 often goes on about the same claim (激活只有 5.7GB，但这是按
    1 个 micro-batch 算的), and rubrics rely on the rest of the sentence framing a head pattern."""
    text = answer.sentences[i].text
    spans = [hit.head] + [sp for g in p.groups if (sp := _nearest(answer.hits(i, g), hit.head[0]))]
    x, y = min(a for a, _ in spans), max(b for _, b in spans)
    lo = max((m.end() for m in _BUT.finditer(text, 0, x)), default=0)
    cut = _BUT.search(text, y)
    return lo, cut.start() if cut else len(text)


def _nearest_before(spans: list[Span], pos: int) -> Span | None:
    """The last span that ends at or before ``pos``: the subject the predicate at ``pos`` is said of."""
    before = [sp for sp in spans if sp[1] <= pos]
    return before[-1] if before else None


# An 'unless' term does not reach past a contrast word that stands between it and the predicate.
_UNLESS_CUT = re.compile(r"但是|但|不过|其实|(?<![a-z])(?:however|but)(?![a-z])")
_BUT = re.compile(r"(?<![a-z])(?:but|however)(?![a-z])")


# Verbs whose complement 下 says "in, down" (能放下, 装得下, 放不下, 写下), not "under" a setting.
_VERB_DOWN = "[放装存塞留写记扛吃容降接拿压撑剩躺坐停得不]"
# A framing clause sets the scope of the claim after it: it ends in 时/的话/下/里/中/之后 (在 ZeRO-3
# 下，…; 带 BatchNorm 的网络里，…), opens with a condition (如果/要是/一旦/if/when/with/under) or with a
# short "…的话" (不同步的话有的 rank 跳过，…). A clause that opens with 在/用 but goes on to say
# something of its own (在 no_sync 里各卡的梯度不一致) is a statement, not a frame.
_FRAME_END = re.compile(
    rf"(?:时|时候|的话|情况下|前提下|场景下|条件下|(?<!{_VERB_DOWN})下|里|中|之后|以后|之前|后|来说|而言|为例)\s*[,:，：]\s*$"
)
_FRAME_OPEN = re.compile(
    r"\s*(?:但是|但|而|不过|可是|可)?\s*(?:如果|假如|假设|若|要是|倘若|只要|一旦|[^,:，：]{1,12}?的话|对于|至于|关于|说到|谈到"
    r"|(?:with|under|in|when|if|for|using|once)(?![a-z]))"
)
# A noun phrase set up as the topic, with no verb of its own after the demonstrative ("LAMB 这种按层的优化器，
# 分片以后要额外通信"), frames the claim after it as 对于 X does; a verb, 有 or a degree adverb after the
# demonstrative makes it a statement ("DP 这种做法会降低显存，", "ZeRO 这种方案很常见，").
_NP_FRAME = re.compile(
    r"\s*[^,:，：]{1,16}?(?:这种|这类|这样的|那种|那类|之类的?)[^,:，：是会能要把被就都也不没可需让使很太挺更最比有]{0,12}\s*[,:，：]\s*"
)
MAX_FRAMES = 3  # framing clauses one claim may reach back over: bounds the walk


def _frame_start(text: str, lo: int) -> int:
    """The start of the leading framing clauses right before the claim's clauses (which start at ``lo``).

    A veto's ``unless`` terms found there count for the claim: "在 ZeRO-3 下，DP 的显存降到 1/N" is
    about ZeRO-3, though the claim's own clause does not name it.
    """
    for _ in range(MAX_FRAMES):
        if lo == 0:
            break
        start = _clause_before(text, lo)[0]
        if not (
            _FRAME_END.search(text, start, lo)
            or _FRAME_OPEN.match(text, start, lo)
            or _NP_FRAME.fullmatch(text, start, lo)
        ):
            break
        lo = start
    return lo


# Words that soften a claim without withdrawing it: a fired veto near one of them is flagged for review.
_SOFTENERS = re.compile(
    r"可能|也许|或许|好像|似乎|几乎|基本上?|大致|大体|大概|一般来说|一般|通常|往往|某种程度上?|差不多|近似|应该"
    r"|maybe|might|probably|approximately|roughly|almost"
)


def _review(veto: Veto, answer: _Answer, i: int, hit: _Hit) -> tuple[str, ...]:
    """Signals that nearly suppressed a fired veto, for an instructor to look at (``needs_review``)."""
    s = answer.sentences[i]
    reasons = []
    if hit.topic:
        reasons.append("subject taken from an earlier clause")
    if m := next((m for m in _SOFTENERS.finditer(_mask(s.text, _HEDGE_FALSE), hit.lo, hit.hi)), None):
        reasons.append(f"softened: {m.group()}")
    if _far_negation(s.text, hit.head[0]):
        reasons.append("a negation earlier in the sentence")
    for u in veto.unless:
        if spans := answer.hits(i, u):
            reasons.append(f"competing term outside the claim: {s.text[spans[0][0] : spans[0][1]]}")
            break
    return tuple(reasons)


def _far_negation(text: str, start: int) -> bool:
    """Is there a negation cue before the head at ``start`` that its negation window does not reach?"""
    head_lo = _negation_start(text, start)
    window = _mask(text[:start], _false_cues(text, start))
    return any(
        _negates(m, text) and (m.start() < head_lo or _words_between(text, m.end(), start) > NEG_WORDS)
        for m in _CUE_RE.finditer(window)
    )


def _veto_matches(veto: Veto, answer: _Answer) -> Iterator[tuple[int, Evidence, str | None, Span]]:
    """Every match of a veto, pattern by pattern and sentence by sentence: (sentence, evidence, reason,
    the claim's clauses).

    ``reason`` is None when the veto fires, else why the match is suppressed (negated, a question,
    an 'unless' term, ...). The claim's clauses run from the subject's clause to the predicate's (a
    head pattern without a subject spans its sentence). A suppressed match does not hide the heads
    after it: "虽然 DP 配合 ZeRO 能降低显存，但 DP 本身也能降低显存" states the misconception in its
    second clause, so the search resumes after each suppressed head until one fires (see
    ``_independent`` for which later claims count). Bounded like ``_match``: the resumed searches
    together walk the sentence's first ``MAX_HEADS`` heads once.
    """
    for p in veto.patterns:
        for i in answer.sentences_for(p.head):
            s = answer.sentences[i]
            after, last = -1, None
            while True:
                hit, why = _match(p, answer, i, ("asserted", *STATUSES), after=after)
                if hit is None:
                    if why and last is None:
                        yield i, _evidence(s), why, (0, 0)
                    break
                after = hit.head[0]
                if last is not None and not _independent(s.text, *last, hit):
                    continue  # it re-reads the suppressed statement: judged already
                reason = _suppressed(veto, p, answer, i, hit)
                claim = (hit.lo, hit.hi)
                ev = _evidence(s, *hit.head)
                if reason is None:
                    yield i, Evidence(ev.sentence, ev.start, ev.end, _review(veto, answer, i, hit)), None, claim
                    break
                yield i, ev, reason, claim
                last = (hit, reason)


def _independent(text: str, last: _Hit, reason: str, hit: _Hit) -> bool:
    """Is ``hit`` a claim of its own, after the suppressed claim ``last``, rather than more of it?

    It must share no clause with ``last`` (a later predicate that takes its subject or its groups
    from the suppressed clauses restates that claim). And the sentence must turn to the student's
    own voice between them: a contrast (但, 其实, 实际上) after a question, report, refutation or
    condition, since what goes on without one (有人说 X，还说 Y) or explains a refutation (X 是错的，
    Y) continues that speech act. A claim cancelled by an ``unless`` term was the student's own all along.
    """
    if hit.lo < last.hi:
        return False
    return reason.startswith("unless:") or _CONTRAST.search(text, last.head[1], hit.head[0]) is not None


def _suppressed(veto: Veto, p: Pattern, answer: _Answer, i: int, hit: _Hit) -> str | None:
    """Why a matched claim fires no veto: an 'unless' term in its clauses, or a status other than
    asserted (a question, a report, a refutation, a condition). None when it fires."""
    s = answer.sentences[i]
    unless = _unless(veto.unless + p.unless, p, answer, i, hit)
    if unless is not None:
        return f"unless: {s.text[unless[0] : unless[1]]}"
    status = _status_at(s, hit.head[0])
    return None if status == "asserted" else status


def veto_firings(rubric: Rubric, question: str, text: str) -> list[tuple[Veto, int, Evidence]]:
    """Every (veto, sentence index, evidence) where a veto of ``question`` fires on ``text``.

    ``score_answer`` reports one match per veto, which is what a student needs; an author checking
    a whole paragraph of lesson prose needs all of them. Sentence indices are those of
    ``split_sentences(text)``. The text is read in full (author text, not a submission).
    """
    answer = _Answer(rubric, split_sentences(text))
    out: list[tuple[Veto, int, Evidence]] = []
    for veto in rubric.vetoes_for(question):
        seen: set[int] = set()
        for i, ev, why, _ in _veto_matches(veto, answer):
            if why is None and i not in seen:
                seen.add(i)
                out.append((veto, i, ev))
    return out


def hint_leaks(rubric: Rubric) -> list[str]:
    """Hints that give a key point away. A hint is shown before the answers are released, so it may hold
    no digit (numbers are answers), must be Chinese, and may not quote any key point or its numbers."""
    key_points = [kp for kps in rubric.key_points.values() for kp in kps]
    problems = []
    for kp in key_points:
        if re.search(r"\d", kp.hint):
            problems.append(f"{rubric.path}: hint of key point {kp.id} contains a digit: {kp.hint}")
        if not re.search(r"[\u4e00-\u9fff]", kp.hint):
            problems.append(f"{rubric.path}: hint of key point {kp.id} is not in Chinese: {kp.hint}")
        for other in key_points:
            numbers = [t for t in re.findall(r"[^\s，。；：、（）()\u4e00-\u9fff]+", other.says) if re.search(r"\d", t)]
            quoted = [t for t in numbers if t.lower() in kp.hint.lower()]
            if other.says in kp.hint:
                quoted.append(other.says)
            problems += [f"{rubric.path}: hint of key point {kp.id} gives away {other.id}: {t}" for t in quoted]
    return problems


def example_outcomes(rubric: Rubric) -> list[tuple[Veto, str, str, bool]]:
    """Run every veto example: (veto, "fire" or "keep", text, whether the veto fired)."""
    out = []
    for v in rubric.vetoes:
        for kind, texts in (("fire", v.fire), ("keep", v.keep)):
            for text in texts:
                fired = any(v.id in {x.id for x, _ in score_answer(rubric, q, text).vetoes} for q in v.questions)
                out.append((v, kind, text, fired))
    return out

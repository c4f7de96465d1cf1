"""Score short answers by key points, and veto answers that assert a known misconception.

Matching is on characters, not on segmented words (see docs/rubric.md for the reasons): the text
is normalised (NFKC, lower case) and cut into sentences and clauses; a pattern is a *head* (the
predicate) plus groups that must occur in the same sentence. Negation is read off the head alone,
by the parity of cue words in a short window before it (cut at clause boundaries and contrast
words) plus post-verbal negators (解决不了). A sentence that is a question, a reported belief, a
refuted claim or a hedge is not the student's own assertion: it earns no key point that needs an
assertion, and it never fires a veto. Every veto match that is suppressed is recorded with why.
Student text is only ever matched against regular expressions; it is never executed.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SourceError
from .lesson import QUESTION_IDS, QUESTION_POINTS
from .yamlio import load_yaml

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
]
_POST_NEG = re.compile(r"^(?:不了|不下|不到|不动|不成|不起|不开|不完)")
_A_NOT_A = re.compile(r"([\u4e00-\u9fff])[不没]\1")
_TERMINATORS = re.compile(r"但是|但|然而|而是|可是|却|所以|因此|否则|的时候|时候|时|but")
_QUESTION_END = re.compile(r"(?:吗|么|呢)\s*[?？]?\s*$|[?？]\s*$")
_QUESTION_CUES = re.compile(r"是否|难道|whether")
_REPORTED = re.compile(
    r"有人(?:认为|说|以为|觉得|主张|声称)|(?:很多|不少|许多|一些|常有)(?:人|博客|文章|资料)?(?:认为|以为|觉得|说|误以为|宣称|声称)|误以为|误认为|错误地认为|"
    r"以为|所谓|据说|听说|宣称|声称|号称|(?:有|一些|很多|不少)?(?:同学|朋友|老师|助教|网友)(?:说|认为|以为|觉得)|(?:直觉上|乍看|表面上|容易)(?:会)?(?:觉得|以为|认为)|会觉得|"
    r"(?:一种|常见的?|典型的?)(?:误解|错误观点|错误说法|说法|看法)(?:是|认为)?|some people (?:think|say|believe)"
)
_CONTRAST = re.compile(r"但是|但|然而|可是|实际上|其实|事实上|而是|however|actually")
_REFUTATION = re.compile(
    r"(?:这|此|该)(?:种|个|一|样)?(?:说法|观点|理解|看法|想法)?(?:是|属于|并|完全)*(?:一种|一个)?(?:错误|错|误解|误区|不对|不正确|不成立)"
    r"|(?:是|属于)(?:一种|一个)?(?:完全)?(?:错误的?|错的|误解|误区|不对的?|不正确的?)(?:说法|观点|理解|看法)?(?=[,:;。!?]|$)"
    r"|并非如此|其实不然|事实并非如此|that'?s wrong|is wrong"
)
_REFUTATION_START = re.compile(
    r"^(?:但|但是|然而|可是|其实)?(?:这|此|该|这种|这个|这一|这样的?)(?:说法|观点|理解|看法|想法)?(?:是|属于|并)?(?:一种|一个)?(?:完全)?(?:错误|错|误解|误区|不对|不正确|不成立)"
    r"|^(?:其实不然|并非如此|事实并非如此|不对|错)|^(?:但|但是|然而|可是)?(?:其实|实际上|事实上)(?:并)?(?:不会|不是|不对|不然|没有|不成立)"
)
_HEDGES = re.compile(r"可能|也许|或许|如果|假如|假设|若|要是|万一|倘若|好像|似乎|乍一看|if\b|maybe|might")
_HEDGE_FALSE = ["不可能", "尽可能", "若干"]
_SENTENCE_END = re.compile(r"[。!?;\n]+|\.(?=\s|$)")
_CLAUSE_END = re.compile(r"[,:，：]")
NEG_WINDOW = 16
STATUSES = ("question", "reported", "refuted", "hedged")


# --- text ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sentence:
    index: int
    start: int  # offsets into the normalised text
    text: str  # normalised, used for matching
    original: str  # as the student wrote it, for evidence
    status: str  # asserted | question | reported | refuted | hedged
    regions: tuple[tuple[int, int, str], ...]  # (start, end, status) sub-spans with their own status


def normalise(text: str) -> str:
    """NFKC and lower case, one output character per input character where possible."""
    out = []
    for ch in text:
        n = unicodedata.normalize("NFKC", ch).lower()
        low = ch.lower()
        out.append(n if len(n) == 1 else low if len(low) == 1 else ch)
    return "".join(out)


def _mask(text: str, words: list[str]) -> str:
    for w in words:
        text = text.replace(w, "＿" * len(w))
    return text


def split_sentences(original: str) -> list[Sentence]:
    norm = normalise(original)
    pieces: list[tuple[int, int]] = []
    pos = 0
    for m in _SENTENCE_END.finditer(norm):
        pieces.append((pos, m.end()))
        pos = m.end()
    if pos < len(norm):
        pieces.append((pos, len(norm)))
    raw = [(s, e) for s, e in pieces if norm[s:e].strip(" 。!?;\n\t-*•")]
    sentences: list[Sentence] = []
    for i, (s, e) in enumerate(raw):
        text = norm[s:e]
        nxt = norm[raw[i + 1][0] : raw[i + 1][1]].strip() if i + 1 < len(raw) else ""
        status, regions = _status(text, nxt)
        sentences.append(Sentence(i, s, text, original[s:e].strip(), status, regions))
    return sentences


def _status(text: str, next_text: str) -> tuple[str, tuple[tuple[int, int, str], ...]]:
    """Whole-sentence status, plus spans with a status of their own (reported or refuted parts)."""
    stripped = text.strip()
    if _QUESTION_END.search(stripped) or _QUESTION_CUES.search(text) or _A_NOT_A.search(_mask(text, _FALSE_CUES)):
        return "question", ()
    regions: list[tuple[int, int, str]] = []
    refutations = list(_REFUTATION.finditer(text))
    for m in _REPORTED.finditer(text):
        ends = [c.start() for c in _CONTRAST.finditer(text, m.end())] + [
            r.start() for r in refutations if r.start() >= m.end()
        ]
        regions.append((m.start(), min(ends, default=len(text)), "reported"))
    if _REFUTATION_START.search(next_text):
        return "refuted", ()
    for m in refutations:
        contrasts = list(_CONTRAST.finditer(text, 0, m.start()))
        regions.append((contrasts[-1].end() if contrasts else 0, m.start(), "refuted"))
    if _HEDGES.search(_mask(text, _HEDGE_FALSE)):
        return "hedged", tuple(regions)
    return "asserted", tuple(regions)


def _status_at(sentence: Sentence, pos: int) -> str:
    """The status that applies at a position: a reported/refuted region overrides the sentence's."""
    for start, end, status in sentence.regions:
        if start <= pos < end:
            return status
    return sentence.status


def _clause(text: str, pos: int) -> tuple[int, int]:
    start = 0
    for m in _CLAUSE_END.finditer(text, 0, pos):
        start = m.end()
    end_match = _CLAUSE_END.search(text, pos)
    return start, end_match.start() if end_match else len(text)


def negated(text: str, start: int, end: int, masks: tuple[tuple[int, int], ...] = ()) -> bool:
    """Is the word at text[start:end] negated? Parity of cues before it, within its clause.

    ``masks`` are spans of other terms of the same pattern: a cue inside a named term (the 没 of
    梯度还没算出) belongs to that term and does not negate the head.
    """
    for a, b in masks:
        if b <= start:
            text = text[:a] + "＿" * (b - a) + text[b:]
    clause_start, _ = _clause(text, start)
    window = text[max(clause_start, start - NEG_WINDOW) : start]
    terminators = list(_TERMINATORS.finditer(window))
    if terminators:
        window = window[terminators[-1].end() :]
    window = _mask(_A_NOT_A.sub(lambda m: "＿" * 3, _mask(window, _FALSE_CUES)), _FALSE_CUES)
    count = len(_CUE_RE.findall(window))
    if _POST_NEG.match(text[end : end + 3]):
        count += 1
    return count % 2 == 1


_CUE_RE = re.compile(
    "|".join(
        re.escape(c) if not c.isascii() else rf"(?<![a-z0-9_']){re.escape(c)}(?![a-z0-9_'])"
        for c in sorted(_NEG_CUES, key=len, reverse=True)
    )
)


# --- rubric model ----------------------------------------------------------------------------
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


@dataclass
class KeyPoint:
    id: str
    points: float
    says: str
    patterns: list[Pattern]


@dataclass
class Veto:
    id: str
    questions: tuple[str, ...]
    says: str
    explain: str
    patterns: list[Pattern]
    unless: list[re.Pattern[str]]  # anywhere in the sentence
    unless_clause: list[re.Pattern[str]] = field(default_factory=list)  # in the matched head's clause
    fire: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)


@dataclass
class Rubric:
    path: str
    key_points: dict[str, list[KeyPoint]]
    vetoes: list[Veto]

    def vetoes_for(self, question: str) -> list[Veto]:
        return [v for v in self.vetoes if question in v.questions]


@dataclass
class Evidence:
    sentence: str
    start: int
    end: int


@dataclass
class AnswerResult:
    question: str
    points: float
    max: float
    found: list[tuple[KeyPoint, Evidence]]
    missing: list[KeyPoint]
    vetoes: list[tuple[Veto, Evidence]]
    suppressed: list[tuple[Veto, Evidence, str]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "points": self.points,
            "max": self.max,
            "key_points": [
                {"id": k.id, "points": k.points, "evidence": e.sentence, "span": [e.start, e.end]}
                for k, e in self.found
            ],
            "missing": [k.id for k in self.missing],
            "vetoes": [{"id": v.id, "evidence": e.sentence, "span": [e.start, e.end]} for v, e in self.vetoes],
            "suppressed": [{"id": v.id, "evidence": e.sentence, "reason": r} for v, e, r in self.suppressed],
        }


# --- loading ---------------------------------------------------------------------------------
class _Loader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.lexicon: dict[str, list[str]] = {}

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
            pre = r"(?<![a-z0-9_])" if re.match(r"[A-Za-z0-9_]", body) else ""
            post = r"(?![a-z0-9_])" if re.search(r"[A-Za-z0-9_]$", body) else ""
            parts.append(f"{pre}(?:{body}){post}")
        try:
            return re.compile("|".join(parts), re.IGNORECASE)
        except re.error as exc:
            raise self.fail(where, f"{where}: invalid regular expression: {exc}") from None

    def pattern(self, raw: Any, where: str) -> Pattern:
        if not isinstance(raw, dict):
            raise self.fail(where, f"{where}: a pattern must be a mapping with 'head' (and 'with', 'polarity', 'span')")
        unknown = set(raw) - {"head", "with", "polarity", "span", "context", "clause", "unless", "at_least", "of"}
        if unknown:
            raise self.fail(where, f"{where}: unknown pattern key(s) {sorted(unknown)}")
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
            int(raw.get("context", 0)),
            bool(raw.get("clause", False)),
            [self.regex(u, where) for u in raw.get("unless", [])],
        )

    def patterns(self, raw: dict[str, Any], where: str) -> list[Pattern]:
        pats = raw.get("any")
        if not isinstance(pats, list) or not pats:
            raise self.fail(where, f"{where}: needs 'any:' with at least one pattern")
        return [self.pattern(p, where) for p in pats]


def load_rubric(path: Path, display: str) -> Rubric:
    """Load and validate ``rubric.yml``; errors name the file and the line of the offending entry."""
    if not path.is_file():
        raise SourceError(display, None, "missing rubric.yml: the short-answer rubric of this lesson")
    text = path.read_text(encoding="utf-8")
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
        ld.lexicon[str(name)] = terms
    key_points: dict[str, list[KeyPoint]] = {}
    for qid in QUESTION_IDS:
        q = data["questions"].get(qid)
        if not isinstance(q, dict) or not isinstance(q.get("key_points"), list):
            raise ld.fail("questions:", f"question {qid} needs a 'key_points:' list")
        kps = []
        for raw in q["key_points"]:
            kid = raw.get("id") if isinstance(raw, dict) else None
            if not isinstance(kid, str):
                raise ld.fail(f"{qid}:", f"every key point of {qid} needs an 'id'")
            pts = raw.get("points")
            if isinstance(pts, bool) or not isinstance(pts, (int, float)) or pts <= 0:
                raise ld.fail(f"id: {kid}", f"key point {kid}: 'points' must be a positive number")
            kps.append(KeyPoint(kid, float(pts), str(raw.get("says", kid)), ld.patterns(raw, f"id: {kid}")))
        total = sum(k.points for k in kps)
        if abs(total - QUESTION_POINTS) > 1e-9:
            raise ld.fail(f"{qid}:", f"the key points of {qid} add up to {total:g}, not {QUESTION_POINTS}")
        key_points[qid] = kps
    vetoes = []
    for raw in data.get("vetoes") or []:
        vid = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(vid, str):
            raise ld.fail("vetoes:", "every veto needs an 'id'")
        where = f"id: {vid}"
        questions = raw.get("questions", list(QUESTION_IDS))
        if not isinstance(questions, list) or not set(questions) <= set(QUESTION_IDS):
            raise ld.fail(where, f"veto {vid}: 'questions' must list some of q1, q2, q3")
        if not isinstance(raw.get("explain"), str):
            raise ld.fail(where, f"veto {vid}: needs 'explain:', the explanation shown to the student")
        examples = raw.get("examples") or {}
        vetoes.append(
            Veto(
                vid,
                tuple(questions),
                str(raw.get("says", vid)),
                raw["explain"],
                ld.patterns(raw, where),
                [ld.regex(u, where) for u in raw.get("unless", [])],
                [ld.regex(u, where) for u in raw.get("unless_clause", [])],
                list(examples.get("fire", [])),
                list(examples.get("keep", [])),
            )
        )
    return Rubric(display, key_points, vetoes)


# --- matching --------------------------------------------------------------------------------
def _match(
    p: Pattern, sentences: list[Sentence], i: int, allowed: tuple[str, ...]
) -> tuple[Evidence | None, str | None]:
    """Try a head-pattern on sentence i. Returns (evidence, None) on a match, or (None, why-not)."""
    s = sentences[i]
    assert p.head is not None
    why: str | None = None
    for h in p.head.finditer(s.text):
        lo, hi = _clause(s.text, h.start()) if p.clause else (0, len(s.text))
        own = [g.search(s.text, lo, hi) for g in p.groups]
        wider = s.text if not p.clause else ""
        if p.context and i > 0:
            wider += " " + sentences[i - 1].text
        if not all(m is not None or g.search(wider) for g, m in zip(p.groups, own)):
            continue
        masks = tuple(m.span() for g in p.groups for m in g.finditer(s.text))
        if p.span is not None:
            spans = [h.span()] + [
                min((m.span() for m in g.finditer(s.text)), key=lambda sp: abs(sp[0] - h.start()), default=h.span())
                for g in p.groups
            ]
            if max(e for _, e in spans) - min(b for b, _ in spans) > p.span:
                continue
        status = _status_at(s, h.start())
        if status not in allowed:
            why = why or status
            continue
        is_neg = negated(s.text, h.start(), h.end(), masks)
        if is_neg != (p.polarity == "negative"):
            why = why or ("negated" if is_neg else "affirmed")
            continue
        return Evidence(s.original, h.start(), h.end()), None
    return None, why


def _count(p: Pattern, sentences: list[Sentence], allowed: tuple[str, ...]) -> Evidence | None:
    hits: dict[int, Sentence] = {}
    for gi, g in enumerate(p.groups):
        for s in sentences:
            if any(
                not negated(s.text, m.start(), m.end()) and _status_at(s, m.start()) in allowed
                for m in g.finditer(s.text)
            ):
                hits[gi] = s
                break
    if len(hits) < p.at_least:
        return None
    used = sorted({s.index: s for s in hits.values()}.values(), key=lambda s: s.index)
    return Evidence(" … ".join(s.original for s in used), 0, 0)


KEY_POINT_STATUSES = ("asserted", "hedged")
VETO_STATUSES = ("asserted",)


def find(
    patterns: list[Pattern], sentences: list[Sentence], allowed: tuple[str, ...]
) -> tuple[Evidence | None, str | None]:
    why: str | None = None
    for p in patterns:
        if p.at_least:
            ev = _count(p, sentences, allowed)
            if ev:
                return ev, None
            continue
        for i in range(len(sentences)):
            ev, reason = _match(p, sentences, i, allowed)
            if ev:
                return ev, None
            if reason and why is None:
                why = f"{reason}: {sentences[i].original}"
    return None, why


def score_answer(rubric: Rubric, question: str, text: str) -> AnswerResult:
    """Score one answer: key points found (with evidence), missing ones, vetoes fired and suppressed."""
    sentences = split_sentences(text)
    found: list[tuple[KeyPoint, Evidence]] = []
    missing: list[KeyPoint] = []
    for kp in rubric.key_points[question]:
        ev, _ = find(kp.patterns, sentences, KEY_POINT_STATUSES)
        if ev:
            found.append((kp, ev))
        else:
            missing.append(kp)
    fired: list[tuple[Veto, Evidence]] = []
    suppressed: list[tuple[Veto, Evidence, str]] = []
    for veto in rubric.vetoes_for(question):
        hit = _veto(veto, sentences)
        if hit is None:
            continue
        ev, reason = hit
        if reason is None:
            fired.append((veto, ev))
        else:
            suppressed.append((veto, ev, reason))
    points = min(QUESTION_POINTS, round(sum(k.points for k, _ in found), 2))
    return AnswerResult(question, points, float(QUESTION_POINTS), found, missing, fired, suppressed)


def _veto(veto: Veto, sentences: list[Sentence]) -> tuple[Evidence, str | None] | None:
    """A fired match (reason None), else the first suppressed match with its reason, else None."""
    suppressed: tuple[Evidence, str] | None = None
    for p in veto.patterns:
        for i, s in enumerate(sentences):
            ev, why = _match(p, sentences, i, ("asserted", *STATUSES))
            if ev is None:
                if why and suppressed is None:
                    suppressed = (Evidence(s.original, 0, 0), why)
                continue
            lo, hi = _clause(s.text, ev.start)
            unless = next((m for u in veto.unless + p.unless if (m := u.search(s.text))), None) or next(
                (m for u in veto.unless_clause if (m := u.search(s.text, lo, hi))), None
            )
            status = _status_at(s, ev.start)
            if unless is not None:
                suppressed = suppressed or (ev, f"unless: {unless.group(0)}")
            elif status != "asserted":
                suppressed = suppressed or (ev, status)
            else:
                return ev, None
    return suppressed


def example_outcomes(rubric: Rubric) -> list[tuple[Veto, str, str, bool]]:
    """Run every veto example: (veto, "fire" or "keep", text, whether the veto fired)."""
    out = []
    for v in rubric.vetoes:
        for kind, texts in (("fire", v.fire), ("keep", v.keep)):
            for text in texts:
                fired = any(v.id in {x.id for x, _ in score_answer(rubric, q, text).vetoes} for q in v.questions)
                out.append((v, kind, text, fired))
    return out

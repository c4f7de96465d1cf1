"""The prefilter: literal strings that any match of a term must contain.

Most terms match in few sentences of an answer, and a regular expression that fails still tries
every position. Each term is therefore read once for the literals that any match of it must contain
(one per alternative), and a sentence that holds none of them is skipped without running the term.
Both sides are compared lower-cased, with the only two characters that re.IGNORECASE matches to an
ASCII letter besides its own cases folded in (ı ~ i, ſ ~ s); a literal keeps only ASCII characters
and characters without case (Han, digits, punctuation), so that the test never skips a real match.
A term the reader cannot follow is always run.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from typing import Any

_FOLD = str.maketrans({"ı": "i", "ſ": "s"})
_QUANTIFIER = re.compile(r"(?:[*?+]|\{(\d*)(?:,\d*)?\})[?+]?")
_ZERO_WIDTH_ESCAPES = frozenset("bBAZ")
_CLASS_ESCAPES = frozenset("dDwWsS")


class _NoAnchor(Exception):
    """A construct the literal reader does not follow: the term is always run."""


def folded(text: str) -> str:
    """Text as the prefilter compares it: lower-cased, ı and ſ folded to i and s."""
    return text.lower().translate(_FOLD)


def anchors(rx: re.Pattern[str]) -> tuple[str, ...] | None:
    """Folded literals of which every match of ``rx`` contains at least one; None if not known.

    ``Index`` reads them once per term when a rubric is loaded.
    """
    if rx.flags & re.VERBOSE:
        return None
    try:
        need, end = _alternation(rx.pattern, 0)
    except (_NoAnchor, IndexError):
        return None
    return need if end == len(rx.pattern) else None


def _alternation(p: str, i: int) -> tuple[tuple[str, ...] | None, int]:
    """Read branches up to a closing parenthesis or the end: every branch must name a literal."""
    need, i = _sequence(p, i)
    options = list(need or ())
    known = need is not None
    while i < len(p) and p[i] == "|":
        need, i = _sequence(p, i + 1)
        known = known and need is not None
        options += need or ()
    return (tuple(dict.fromkeys(options)) if known else None), i


def _sequence(p: str, i: int) -> tuple[tuple[str, ...] | None, int]:
    """Read one branch: the longest run of required literal characters, or a required group's literals."""
    choices: list[tuple[str, ...]] = []
    run: list[str] = []

    def close() -> None:
        if run:
            choices.append(("".join(run),))
            run.clear()

    while i < len(p) and p[i] not in "|)":
        kind, value, i = _atom(p, i)
        q = _QUANTIFIER.match(p, i)
        least = 1
        if q:
            i = q.end()
            least = 0 if q.group()[0] in "*?" else int(q.group(1) or 0) if q.group()[0] == "{" else 1
        if kind == "literal" and least and _plain(value):
            run.append(value.lower())
            if q:
                close()  # a repeated character ends the run it belongs to
            continue
        close()
        if kind == "group" and least and value:
            choices.append(tuple(value))
    close()
    if not choices:
        return None, i
    return max(choices, key=lambda c: min(len(s) for s in c)), i


def _plain(ch: str) -> bool:
    """May this character stand in a literal? ASCII, or a character without case (Han, digits)."""
    return ch.isascii() or ch.lower() == ch == ch.upper()


def _atom(p: str, i: int) -> tuple[str, Any, int]:
    """One atom at p[i]: ("literal", ch), ("group", literals or None), ("other", None) or ("zero", None)."""
    ch = p[i]
    if ch == "\\":
        nxt = p[i + 1]
        if nxt.isascii() and nxt.isalnum():
            if nxt in _ZERO_WIDTH_ESCAPES:
                return "zero", None, i + 2
            if nxt in _CLASS_ESCAPES:
                return "other", None, i + 2
            raise _NoAnchor(nxt)  # \u4e00, \x41, \1, \n...: not followed
        return "literal", nxt, i + 2
    if ch == "[":
        j = i + 1 + (p[i + 1] == "^")
        j += p[j] == "]"  # a ] right after [ or [^ is a member
        while p[j] != "]":
            j += 2 if p[j] == "\\" else 1
        return "other", None, j + 1
    if ch == "(":
        return _group(p, i)
    if ch == ".":
        return "other", None, i + 1
    if ch in "^$":
        return "zero", None, i + 1
    if ch in "*+?{":
        raise _NoAnchor(ch)
    return "literal", ch, i + 1


def _group(p: str, i: int) -> tuple[str, Any, int]:
    """A group at p[i] == "(": its literals, or a zero-width assertion."""
    if p.startswith("(?#", i):
        return "zero", None, p.index(")", i) + 1
    if p.startswith("(?P=", i):
        return "other", None, p.index(")", i) + 1
    for opener, what in (("(?:", "group"), ("(?=", "zero"), ("(?!", "zero"), ("(?<=", "zero"), ("(?<!", "zero")):
        if p.startswith(opener, i):
            kind, start = what, i + len(opener)
            break
    else:
        if p.startswith("(?P<", i):
            kind, start = "group", p.index(">", i) + 1
        elif p.startswith("(?", i):
            raise _NoAnchor("(?")  # inline flags, conditionals: not followed
        else:
            kind, start = "group", i + 1
    need, j = _alternation(p, start)
    if p[j] != ")":
        raise _NoAnchor(")")
    return kind, (need if kind == "group" else None), j + 1


class Index:
    """The literals of a rubric's terms, found in an answer with one scan.

    A rubric has some 800 distinct literals over 250 terms; testing each term's literals against an
    answer one by one cost more than the matching it saved. The literals are compiled into one
    expression shaped like a trie that finds, at every position of the text, the longest literal
    starting there; every literal that starts at that position is a prefix of it, so the scan sees them
    all, and each literal found names the terms that need it.
    """

    def __init__(self, terms: Iterable[re.Pattern[str]]) -> None:
        # id of each term → its literals, or None (always searched). Keyed by identity: the rubric keeps
        # its terms alive, and hashing a compiled pattern hashes its whole code.
        self.need: dict[int, tuple[str, ...] | None] = {id(rx): anchors(rx) for rx in terms}
        literals = sorted({a for need in self.need.values() if need for a in need})
        known = set(literals)
        self.prefixes = {a: tuple(a[:k] for k in range(1, len(a) + 1) if a[:k] in known) for a in literals}
        self.scan = re.compile(f"(?=({_trie(literals)}))", re.DOTALL) if literals else None
        self.users: dict[str, list[int]] = {}  # literal → ids of the terms that need it
        for tid, need in self.need.items():
            for a in need or ():
                self.users.setdefault(a, []).append(tid)

    def locate(self, sentences: list[str]) -> dict[int, set[int]]:
        """Id of each term with a literal in the folded ``sentences`` → the indices of those sentences.

        A term that is not listed may match nowhere, unless its ``need`` is None (it is always searched).
        """
        found: dict[str, set[int]] = {}
        if self.scan is None:
            return {}
        starts, at = [], 0
        for text in sentences:
            starts.append(at)
            at += len(text) + 1
        for m in self.scan.finditer("\n".join(sentences)):
            k = bisect_right(starts, m.start()) - 1
            for a in self.prefixes[m.group(1)]:
                found.setdefault(a, set()).add(k)
        located: dict[int, set[int]] = {}
        for a, ks in found.items():
            for tid in self.users[a]:
                located.setdefault(tid, set()).update(ks)
        return located


def _trie(literals: list[str]) -> str:
    """An expression that matches the longest of ``literals`` at a position (they are non-empty)."""
    root: dict[str, Any] = {}
    for a in literals:
        node = root
        for ch in a:
            node = node.setdefault(ch, {})
        node[""] = {}

    def branch(node: dict[str, Any]) -> str:
        arms = [re.escape(ch) + branch(child) for ch, child in sorted(node.items()) if ch]
        if not arms:
            return ""
        body = arms[0] if len(arms) == 1 else f"(?:{'|'.join(arms)})"
        return f"(?:{body})?" if "" in node else body

    return branch(root)

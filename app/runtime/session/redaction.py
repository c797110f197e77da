"""Secret redaction: the one filter every persisted string passes through (it also replaces
NUL characters, which PostgreSQL cannot store in text or JSONB).

Strings that look like credentials (provider API keys, bearer tokens, cloud keys, private
keys, our own API keys, `key=value` secrets) are replaced by a marker before an event or a
snapshot is written, and before a delta frame is sent. Redaction is per string and
idempotent, so folding redacted events gives the redacted fold.

It is on every write's hot path (every string of every payload, keys included), and almost
no string holds a secret, so `Redactor.text` first asks a cheap question — can any pattern
match this string at all? — and runs the per-pattern substitutions only when the answer is
yes. The pre-check may say yes wrongly (that only costs time) but must never say no when a
pattern matches: then every substitution is the identity, which is what makes skipping them
give exactly today's output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

MARKER = "[REDACTED]"

DEFAULT_PATTERNS: tuple[str, ...] = (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{12,}",
    r"\bgh[pousr]_[A-Za-z0-9]{16,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bAKIA[0-9A-Z]{12,}",
    r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
    r"\bAIza[0-9A-Za-z_\-]{30,}",
    r"\basr_[0-9a-f]{12}_[A-Za-z0-9_\-]{16,}",
    r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{8,}=*",
    r"(?i)(?<![A-Za-z0-9])((?:api[_-]?key|secret|password|passwd|access[_-]?token|auth[_-]?token)"
    r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]{4,}",
)

# The pre-check for DEFAULT_PATTERNS. Searching the plain alternation of the patterns costs
# as much as the substitutions themselves (~70 µs on 440 characters of prose: the leading
# `\b` and the `(?i)` keep the regex engine from skipping ahead, so it tries every branch at
# every position). Instead, `_DEFAULT_HINT` lists, for each default pattern, a fragment every
# match of that pattern contains, written in lower case and searched case-sensitively in the
# string passed through `_fold`, which maps each letter to the ASCII lower-case letter it
# matches under `re.IGNORECASE` (the engine compares one character at a time, so the case-
# insensitive literal `bearer` can only match where the folded string reads `bearer`). Folding
# only ever turns letters into letters, so case-sensitive fragments still appear after it, and
# the non-letter parts (`\s`, `[:=]`, ...) are unaffected. Keep it in step with
# DEFAULT_PATTERNS: tests/runtime/test_redaction.py checks every default pattern's matches
# against it.
_ASSIGN = r"[\"']?\s*[:=]"
_DEFAULT_HINT = re.compile(
    # Every alternative starts with a literal, so the engine can skip ahead on one set of
    # first characters; a shared group around the keywords would stop it (10 µs vs 5 µs).
    r"-----begin |sk-|gh[pousr]_|github_pat_|akia|xox[abprs]-|aiza|asr_|bearer\s"
    rf"|api[_-]?key{_ASSIGN}|secret{_ASSIGN}|passwd{_ASSIGN}|password{_ASSIGN}"
    rf"|access[_-]?token{_ASSIGN}|auth[_-]?token{_ASSIGN}"
)

# The same question asked once of a whole JSON document (`Redactor.json_may_change`): each
# alternative is a leading literal of one of `_DEFAULT_HINT`'s, so wherever a string of the
# document passes `_DEFAULT_HINT`, the document's text contains the fragment. The encoder
# (`json.dumps`, `ensure_ascii=False`) writes every character of these fragments as itself;
# it escapes only quotes, backslashes and control characters, which is why what follows a
# keyword in `_DEFAULT_HINT` (whitespace, quotes, `:` or `=`) is left out here.
_DEFAULT_JSON_HINT = re.compile(
    r"-----begin |sk-|gh[pousr]_|github_pat_|akia|xox[abprs]-|aiza|asr_|bearer"
    r"|api[_-]?key|secret|passw|access[_-]?token|auth[_-]?token"
)
# How the encoder writes NUL inside a string (`Redactor.text` replaces it).
_JSON_NUL = "\\u0000"


def _fold(value: str) -> str:
    """The string with each letter that matches an ASCII letter under re.IGNORECASE replaced
    by that letter in lower case; no other character that can appear in a hint changes.

    Besides A-Z, exactly four characters match an ASCII letter case-insensitively (Python 3.11;
    the test checks every code point): U+0130 and U+0131 (dotted capital and dotless i) match
    i, U+017F (long s) matches s, U+212A (Kelvin sign) matches k. lower() maps the Kelvin sign
    but leaves U+0131 and U+017F alone and turns U+0130 into two characters, hence the replaces
    (str.translate with a table would do it all but is ten times slower).
    """
    if value.isascii():
        return value.lower()
    return value.replace("\u0130", "i").replace("\u0131", "i").replace("\u017f", "s").lower()


_LEADING_FLAGS = re.compile(r"\(\?([aiLmsux]+)\)")
# A numbered backreference or conditional changes meaning when the pattern is one alternative
# among others (its group numbers shift). Over-matching (an escaped backslash before a digit,
# an octal escape) only costs the combined pre-check.
_NUMBERED_GROUP_REF = re.compile(r"\\[1-9]|\(\?\(\d")


def _scoped(pattern: str) -> str:
    """The pattern as a non-capturing group that can stand among other alternatives.

    Python 3.11 rejects global inline flags such as `(?i)` anywhere but at the very start of
    the whole expression, so leading ones become the group's scoped flags: `(?i)x` becomes
    `(?i:x)`. Under `x` (verbose) a trailing `# comment` would swallow the closing
    parenthesis, hence the newline.
    """
    flags, pos = "", 0
    while match := _LEADING_FLAGS.match(pattern, pos):
        flags, pos = flags + match.group(1), match.end()
    body = pattern[pos:] + ("\n" if "x" in flags else "")
    return f"(?{flags}:{body})"


def _any_match_checks(extra: list[re.Pattern[str]]) -> tuple[re.Pattern[str], ...]:
    """Regexes such that some extra pattern matches a string iff one of these does: their
    alternation when it is safe to build, else the patterns themselves."""
    if not extra:
        return ()
    sources = [p.pattern for p in extra]
    if not any(_NUMBERED_GROUP_REF.search(s) for s in sources):
        try:
            return (re.compile("|".join(_scoped(s) for s in sources)),)
        except re.error:  # e.g. a repeated group name, or flags the rewrite cannot scope
            pass
    return tuple(extra)


class Redactor:
    def __init__(self, extra_patterns: Iterable[str] = ()) -> None:
        patterns = [re.compile(p) for p in (*DEFAULT_PATTERNS, *extra_patterns)]
        self._patterns = patterns
        # Built once rather than per call; same replacement as ever: a pattern with groups
        # keeps group 1 (the `api_key=` prefix) and redacts the rest of the match.
        self._subs: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
            (p, _keep_group_1 if p.groups else MARKER) for p in patterns
        ]
        self._extra_checks = _any_match_checks(patterns[len(DEFAULT_PATTERNS) :])

    def _may_match(self, value: str) -> bool:
        """False only if no pattern matches `value` (see the module docstring)."""
        if _DEFAULT_HINT.search(_fold(value)) is not None:
            return True
        for check in self._extra_checks:
            if check.search(value) is not None:
                return True
        return False

    def json_may_change(self, text: str) -> bool:
        """False only if `value(v)` is `v` for the value `v` whose JSON text (`json.dumps`,
        `ensure_ascii=False`) is `text`: no string of it, key or value, holds NUL or passes
        the pre-check. One regex search over the document instead of a walk that copies it;
        with extra patterns it cannot tell (they are written for strings, not their JSON
        text) and always says True."""
        if self._extra_checks:
            return True
        return _JSON_NUL in text or _DEFAULT_JSON_HINT.search(_fold(text)) is not None

    def text(self, value: str) -> str:
        # NUL cannot be stored in PostgreSQL text or JSONB; it never carries meaning here.
        value = value.replace("\x00", "\ufffd")
        if not self._may_match(value):
            return value
        for pattern, replacement in self._subs:
            value = pattern.sub(replacement, value)
        return value

    def value(self, value: Any) -> Any:
        """Redact every string inside a JSON value (keys included), returning a new value.

        Iterative, with an explicit stack: the values come from clients, and a recursive walk
        would let one nested deeply enough end the request in a RecursionError (a 500).
        """
        if isinstance(value, str):
            return self.text(value)
        if not isinstance(value, dict | list):
            return value
        text = self.text
        root: dict[str, Any] | list[Any] = {} if isinstance(value, dict) else []
        stack: list[tuple[Any, Any]] = [(value, root)]
        while stack:
            source, target = stack.pop()
            # A dict's keys are str (JSON), a list's int.
            pairs: Iterable[tuple[Any, Any]] = (
                source.items() if isinstance(source, dict) else enumerate(source)
            )
            for key, item in pairs:
                if isinstance(item, str):
                    copy: Any = text(item)
                elif isinstance(item, dict):
                    copy = {}
                    stack.append((item, copy))
                elif isinstance(item, list):
                    copy = []
                    stack.append((item, copy))
                else:
                    copy = item
                # Children are filled in later, in place, so key order stays the source's.
                if isinstance(target, dict):
                    target[text(key)] = copy
                else:
                    target.append(copy)
        return root


def _keep_group_1(match: re.Match[str]) -> str:
    return match.group(1) + MARKER

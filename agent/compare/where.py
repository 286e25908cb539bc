"""`--where` of compare and top --fleet: one condition, checked here before anything is sent.

The filter is pasted into every statement the reports build, so a value that ends the statement
(`;`), closes the parenthesis it is put in, or comments out the rest would run as the user's own
statement with the reader's credentials (issue 46: `host = 'x'; DROP DATABASE victim`). A scan
that knows the languages' literals (InfluxQL's 'strings', "identifiers" and /regexes/; PromQL's
"", '' and `` strings) refuses, in one line and outside literals: `;`, a parenthesis that does
not balance, a quote left open, a comment, a line break and, in InfluxQL, a word that starts a
clause or a statement (a tag named like one must be "quoted" in InfluxQL anyway). PromQL's
matchers have no parentheses or braces at all. What is left is for the server to parse (compare's
check_where points into the user's text when it refuses).
"""

from __future__ import annotations

import re

from gpuagent.errors import AgentError

# Words that begin a clause or a statement, never part of one InfluxQL condition.
_STATEMENT_WORDS = frozenset(
    "ALTER CREATE DELETE DROP EXPLAIN FILL FROM GRANT GROUP INTO KILL LIMIT OFFSET ORDER REVOKE "
    "SELECT SET SHOW SLIMIT SOFFSET TZ WHERE WITH".split()
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _refuse(where: str, at: int, what: str) -> AgentError:
    return AgentError(f"--where {where!r}: {what} at character {at + 1}: --where is one condition")


def _literal_end(where: str, start: int, quote: str, escapes: bool = True) -> int:
    """The index just past the literal opened at `start`, or -1 when it is not closed."""
    i = start + 1
    while i < len(where):
        c = where[i]
        if c == "\\" and escapes:
            i += 2
            continue
        if c == quote:
            return i + 1
        if c in "\r\n":
            return -1
        i += 1
    return -1


def influxql(where: str | None) -> str:
    """The filter, stripped ("" for none), or AgentError in one line: not one InfluxQL condition."""
    where = (where or "").strip()
    depth: list[int] = []
    i, last = 0, ""  # last: the previous token outside literals (a '/' after =~ or !~ opens a regex)
    while i < len(where):
        c = where[i]
        if c.isspace():
            if c in "\r\n":
                raise _refuse(where, i, "a line break")
            i += 1
            continue
        two = where[i : i + 2]
        if c in "'\"" or (c == "/" and last in ("=~", "!~")):
            end = _literal_end(where, i, c)
            if end < 0:
                kind = {"'": "a string", '"': "a quoted name", "/": "a regex"}[c]
                raise _refuse(where, i, f"{kind} opened with {c} is not closed")
            i, last = end, "literal"
            continue
        if c == ";":
            raise _refuse(where, i, "';' (it ends a statement)")
        if two in ("--", "/*"):
            raise _refuse(where, i, f"{two!r} (a comment)")
        if c == "(":
            depth.append(i)
        elif c == ")":
            if not depth:
                raise _refuse(where, i, "a ')' that closes no '('")
            depth.pop()
        elif two in ("=~", "!~"):
            i, last = i + 2, two
            continue
        word = _WORD.match(where, i)
        if word:
            if word[0].upper() in _STATEMENT_WORDS:
                raise _refuse(where, i, f"{word[0]!r} (a clause or statement, not a condition)")
            i, last = word.end(), "word"
            continue
        i, last = i + 1, c
    if depth:
        raise _refuse(where, depth[-1], "a '(' that is not closed")
    return where


def promql(where: str | None) -> str:
    """The label matchers, stripped, or AgentError in one line: not a list of PromQL matchers."""
    where = (where or "").strip()
    i = 0
    while i < len(where):
        c = where[i]
        if c in "\r\n":
            raise _refuse(where, i, "a line break")
        if c in "'\"`":
            end = _literal_end(where, i, c, escapes=c != "`")
            if end < 0:
                raise _refuse(where, i, f"a string opened with {c} is not closed")
            i = end
            continue
        if c in "{}()[];#":
            what = "a comment" if c == "#" else "';' (it ends a statement)" if c == ";" else f"{c!r}"
            raise _refuse(where, i, f"{what} outside a string (label matchers only)")
        i += 1
    return where

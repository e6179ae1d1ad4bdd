"""The guard for Cypher that came from outside (LLM plans, users).

Regex stripping in sequence (strings, then comments) was bypassed: a quote inside a comment hid
the rest of the query from the check, which then passed `LOAD CSV FROM 'https://...'` to the
engine. So the query is read once, left to right, into tokens (strings, comments, backticked
names, words, numbers, parameters, symbols), every check runs on those tokens, and what goes to
the engine is written back from them: comments dropped, strings and backticked names in one
canonical spelling. Whatever this module believed the query to be is exactly what the engine
receives, so a lexing difference between this module and the engine cannot hide a clause.

Pygments' Cypher lexer (no block comments, no backtick escapes) and py2neo's (archived) could not
be trusted with that; the ANTLR-based `pycypher` gives a parse tree but no faithful re-emitter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sagegraph.errors import ReadOnlyViolation

# Words that start a clause which writes, administers, loads files or opens connections, or that
# runs a query (PROFILE) or switches database (USE). A word right after `.` is a property key.
FORBIDDEN_WORDS = {
    "CREATE",
    "MERGE",
    "SET",
    "DELETE",
    "DETACH",
    "REMOVE",
    "DROP",
    "FOREACH",
    "LOAD",
    "GRANT",
    "REVOKE",
    "DENY",
    "ALTER",
    "RENAME",
    "START",
    "STOP",
    "TERMINATE",
    "USE",
    "SHOW",
    "PROFILE",
    "EXPLAIN",
    "PERIODIC",
    "COMMIT",
    "TRANSACTIONS",
    "IMPORT",
}
ALLOWED_PROCEDURES = {
    "db.labels",
    "db.relationshiptypes",
    "db.propertykeys",
    "db.idx.vector.querynodes",
    "db.index.vector.querynodes",
    "db.idx.fulltext.querynodes",
    "db.index.fulltext.querynodes",
}
# Namespaced functions a read may call (built-ins without a namespace are always allowed): the
# temporal, spatial and vector ones. Anything else namespaced (apoc.*, gds.*, dbms.*, a plugin's)
# may reach the file system or the network and is refused.
ALLOWED_FUNCTION_NAMESPACES = {
    "date",
    "datetime",
    "localdatetime",
    "time",
    "localtime",
    "duration",
    "point",
    "vector",
    "vec",
}

# Bounds on what reaches the engine, checked on the text and its tokens before it is sent.
# FalkorDB parses nested brackets in time exponential in their depth, before any time limit
# applies (depth 18 0.6 s, 21 5.2 s); a model's real queries nest a handful deep. A pattern's
# work grows with its relationships, and past a few the engine overruns its time limit (11
# undirected hops ran 16.5 s on a 2 s limit; 8 stopped at 1.9 s on a 1 s one, 6 at 1.0 s, on a
# 2,000-node graph of 16,000 relationships), so the relationships a query walks, each
# variable-length one at its upper bound, are capped; the committed replies' queries walk at most
# 6 but one. An unbounded `*` could walk the whole graph and is refused.
MAX_QUERY_CHARS = 20_000
MAX_NESTING = 12
MAX_HOPS = 6

_WS = " \t\n\r"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"\d+")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


@dataclass(frozen=True)
class Token:
    kind: str  # ws, string, quoted, name, number, param, sym
    text: str  # as written back to the engine
    value: str = ""  # a string's or a backticked name's content; a word as written

    @property
    def word(self) -> str:
        return self.value.upper() if self.kind == "name" else ""


def _string(query: str, i: int) -> tuple[Token, int]:
    quote, j = query[i], i + 1
    out: list[str] = []
    while j < len(query):
        c = query[j]
        if c == quote:
            value = "".join(out)
            return Token("string", _spell_string(value), value), j + 1
        if c == "\\":
            nxt = query[j + 1 : j + 2]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                j += 2
                continue
            if nxt in ("u", "U"):
                width = 4 if nxt == "u" else 8
                digits = query[j + 2 : j + 2 + width]
                if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise ReadOnlyViolation(f"bad unicode escape in a string at offset {j}")
                out.append(chr(int(digits, 16)))
                j += 2 + width
                continue
            raise ReadOnlyViolation(f"unknown escape \\{nxt} in a string at offset {j}")
        out.append(c)
        j += 1
    raise ReadOnlyViolation(f"unterminated string starting at offset {i}")


def _spell_string(value: str) -> str:
    if "\x00" in value:
        raise ReadOnlyViolation("a NUL character in a string")
    body = (
        value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )
    return f"'{body}'"


def _quoted(query: str, i: int) -> tuple[Token, int]:
    end = query.find("`", i + 1)
    if end < 0:
        raise ReadOnlyViolation(f"unterminated backticked name starting at offset {i}")
    if query[end + 1 : end + 2] == "`":
        raise ReadOnlyViolation("a backtick inside a backticked name")
    name = query[i + 1 : end]
    if not name or any(ord(c) < 32 for c in name):
        raise ReadOnlyViolation("an empty backticked name, or one holding control characters")
    return Token("quoted", f"`{name}`", name), end + 1


def tokenize(query: str) -> list[Token]:
    """The query as tokens; comments become one space. Anything this reader cannot be sure how
    the engine reads (an unterminated string or comment, a character outside ASCII outside a
    string or backticked name, an unknown escape) is refused rather than guessed."""
    tokens: list[Token] = []
    i, n = 0, len(query)
    while i < n:
        c = query[i]
        if c in _WS:
            j = i
            while j < n and query[j] in _WS:
                j += 1
            tokens.append(Token("ws", query[i:j]))
            i = j
        elif query.startswith("//", i):
            j = query.find("\n", i)
            i = n if j < 0 else j
            tokens.append(Token("ws", " "))
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            if j < 0:
                raise ReadOnlyViolation(f"unterminated comment starting at offset {i}")
            tokens.append(Token("ws", " "))
            i = j + 2
        elif c in "'\"":
            tok, i = _string(query, i)
            tokens.append(tok)
        elif c == "`":
            tok, i = _quoted(query, i)
            tokens.append(tok)
        elif c == "$":
            m = _NAME.match(query, i + 1) or _DIGITS.match(query, i + 1)
            if not m:
                raise ReadOnlyViolation(f"a '$' without a parameter name at offset {i}")
            tokens.append(Token("param", "$" + m.group(0), m.group(0)))
            i = m.end()
        elif (m := _NUMBER.match(query, i)) is not None:
            tokens.append(Token("number", m.group(0), m.group(0)))
            i = m.end()
        elif (m := _NAME.match(query, i)) is not None:
            tokens.append(Token("name", m.group(0), m.group(0)))
            i = m.end()
        elif 33 <= ord(c) < 127:
            tokens.append(Token("sym", c, c))
            i += 1
        else:
            raise ReadOnlyViolation(
                f"character U+{ord(c):04X} outside a string at offset {i} (only ASCII is read there)"
            )
    return tokens


def _code(tokens: list[Token]) -> list[tuple[int, Token]]:
    """(position in tokens, token) of everything but whitespace."""
    return [(i, t) for i, t in enumerate(tokens) if t.kind != "ws"]


def _dotted_name(code: list[tuple[int, Token]], k: int) -> tuple[str, int]:
    """The name `a.b.c` (words or backticked parts) starting at code[k], and the index after it."""
    parts = []
    while k < len(code) and code[k][1].kind in ("name", "quoted"):
        parts.append(code[k][1].value)
        if k + 2 < len(code) and code[k + 1][1].text == "." and code[k + 2][1].kind in ("name", "quoted"):
            k += 2
            continue
        k += 1
        break
    return ".".join(parts), k


def _is_member(tokens: list[Token], i: int) -> bool:
    """tokens[i] is a property key or the later part of a dotted name: right after a `.` that
    right follows a name, a parameter or a closing bracket. Whitespace or a number before the dot
    does not count: `1. LOAD CSV` may read as the float `1.` and a clause."""
    return (
        i >= 2
        and tokens[i - 1].text == "."
        and (tokens[i - 2].kind in ("name", "quoted", "param") or tokens[i - 2].text in ")]")
    )


def check(tokens: list[Token]) -> None:
    """Raise ReadOnlyViolation for a clause that writes, loads, administers or leaves the engine."""
    code = _code(tokens)
    if not code:
        raise ReadOnlyViolation("empty query")
    for k, (i, t) in enumerate(code):
        if t.text == ";":
            if any(rest.text != ";" for _, rest in code[k + 1 :]):
                raise ReadOnlyViolation("multiple statements are not allowed")
            continue
        member = _is_member(tokens, i)
        if t.kind == "name" and not member:
            if t.word in FORBIDDEN_WORDS:
                raise ReadOnlyViolation(f"clause {t.word!r} is not allowed in a read-only query")
            if t.word == "CALL":
                if k + 1 >= len(code) or code[k + 1][1].text in ("{", "("):
                    raise ReadOnlyViolation("CALL subqueries are not allowed")
                name, _ = _dotted_name(code, k + 1)
                if name.lower() not in ALLOWED_PROCEDURES:
                    raise ReadOnlyViolation(f"procedure {name!r} is not on the read-only allow-list")
                continue
        if t.kind in ("name", "quoted") and not member and (k == 0 or code[k - 1][1].word != "CALL"):
            name, after = _dotted_name(code, k)
            if after < len(code) and code[after][1].text == "(":
                if "." in name and name.split(".", 1)[0].lower() not in ALLOWED_FUNCTION_NAMESPACES:
                    raise ReadOnlyViolation(f"function {name!r} is not on the read-only allow-list")
                if t.kind == "quoted":
                    raise ReadOnlyViolation(f"a backticked function name ({name!r}) is not allowed")


def check_bounds(tokens: list[Token]) -> None:
    """Raise ReadOnlyViolation for a query nested deeper than MAX_NESTING brackets or walking more
    than MAX_HOPS relationships (`bounded_hops`)."""
    code = _code(tokens)
    if max((depth + 1 for depth, (_, t) in zip(_depths(code), code) if t.text in "([{"), default=0) > MAX_NESTING:
        raise ReadOnlyViolation(f"brackets nested deeper than {MAX_NESTING}: refused before the engine parses them")
    if (hops := bounded_hops([t for _, t in code])) > MAX_HOPS:
        raise ReadOnlyViolation(
            f"the query walks {hops} relationships (variable-length ones at their upper bound); at most {MAX_HOPS}"
        )


def bounded_hops(code: list[Token]) -> int:
    """The relationships the query's patterns walk: one per `-[...]-` or `--`, a variable-length
    one counted at its upper bound. An unbounded one (`*`, `*2..`) raises ReadOnlyViolation."""
    hops = 0
    k = 0
    while k < len(code):
        t = code[k]
        nxt = code[k + 1].text if k + 1 < len(code) else ""
        if t.text == "-" and nxt == "-":  # `--`, `-->`, `<--`: one relationship, no details
            hops += 1
            k += 2
            continue
        if t.text == "-" and nxt == "[":
            end, depth = k + 1, 0
            while end < len(code):
                depth += {"[": 1, "]": -1}.get(code[end].text, 0)
                if depth == 0:
                    break
                end += 1
            hops += _relationship_length(code[k + 2 : end])
            k = end + 1
            continue
        k += 1
    return hops


def _relationship_length(inside: list[Token]) -> int:
    """How many hops one relationship's details (the tokens between its brackets) allow at most."""
    star = next((i for i, t in enumerate(inside) if t.text == "*"), None)
    if star is None:
        return 1
    rest = [t.text for t in inside[star + 1 :]]
    lower = int(rest[0]) if rest and rest[0].isdigit() else None
    after = rest[1:] if lower is not None else rest
    if after[:2] == [".", "."]:
        if len(after) > 2 and after[2].isdigit():
            return int(after[2])  # `*..3`, `*1..3`
    elif lower is not None:
        return lower  # `*3`: exactly three
    raise ReadOnlyViolation(
        "a variable-length relationship without an upper bound (`*`, `*2..`) may walk the whole graph; write `*1..3`"
    )


def _depths(code: list[tuple[int, Token]]) -> list[int]:
    depth, out = 0, []
    for _, t in code:
        if t.text in ")]}":
            depth -= 1
        out.append(depth)
        if t.text in "([{":
            depth += 1
    return out


def cap_rows(tokens: list[Token], limit: int) -> list[Token]:
    """The query with at most `limit` rows from each final RETURN, enforced by the engine: a LIMIT
    added where there is none, lowered where it is larger. A LIMIT that is not a number literal
    cannot be checked and is refused. Parts joined by UNION are capped each."""
    code = _code(tokens)
    depth = _depths(code)
    parts: list[tuple[int, int]] = []  # [start, end) in `code`, split at top-level UNION
    start = 0
    for k, (_, t) in enumerate(code):
        if t.word == "UNION" and depth[k] == 0:
            parts.append((start, k))
            start = k + 1
    parts.append((start, len(code)))
    replace: dict[int, Token] = {}
    insert_after: list[int] = []
    for a, b in parts:
        while b > a and code[b - 1][1].text == ";":
            b -= 1
        returns = [k for k in range(a, b) if code[k][1].word == "RETURN" and depth[k] == 0]
        if not returns:
            if any(
                code[k][1].word == "CALL" and depth[k] == 0 for k in range(a, b)
            ):  # a standalone CALL yields every row
                raise ReadOnlyViolation("a procedure call without a final RETURN cannot be held to the row cap")
            continue
        limits = [k for k in range(returns[-1], b) if code[k][1].word == "LIMIT" and depth[k] == 0]
        if not limits:
            insert_after.append(code[b - 1][0])
            continue
        k = limits[-1]
        value = code[k + 1][1] if k + 1 < b else None
        if value is None or value.kind != "number" or not value.text.isdigit() or k + 2 != b:
            raise ReadOnlyViolation("a LIMIT that is not a plain number cannot be checked against the row cap")
        if int(value.text) > limit:
            replace[code[k + 1][0]] = Token("number", str(limit), str(limit))
    out: list[Token] = []
    for i, t in enumerate(tokens):
        out.append(replace.get(i, t))
        if i in insert_after:
            out.extend(
                [
                    Token("ws", " "),
                    Token("name", "LIMIT", "LIMIT"),
                    Token("ws", " "),
                    Token("number", str(limit), str(limit)),
                ]
            )
    return out


def render(tokens: list[Token]) -> str:
    return "".join(t.text for t in tokens).strip()


def guard_untrusted(query: str, max_rows: int) -> str:
    """The text to run for a query a model or a user wrote: checked, comments dropped, strings in
    one spelling, and at most `max_rows` rows per RETURN enforced by the engine's own LIMIT.
    Raises ReadOnlyViolation for anything refused."""
    if not query or not query.strip():
        raise ReadOnlyViolation("empty query")
    if len(query) > MAX_QUERY_CHARS:
        raise ReadOnlyViolation(f"a query of {len(query):,} characters; at most {MAX_QUERY_CHARS:,}")
    tokens = tokenize(query)
    check(tokens)
    check_bounds(tokens)
    return render(cap_rows(tokens, max_rows))


def assert_read_only(query: str) -> str:
    """The query as the engine must receive it (comments dropped, strings respelled), or
    ReadOnlyViolation naming the offending clause; for sagegraph's own reads, which bound their
    rows themselves (some with a `LIMIT $limit` parameter)."""
    if not query or not query.strip():
        raise ReadOnlyViolation("empty query")
    tokens = tokenize(query)
    check(tokens)
    return render(tokens)

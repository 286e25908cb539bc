"""An independent line-protocol parser for tests. It follows InfluxDB's own
parser (models/points.go), not our serialiser's code, so a round trip can
fail: in names only \\, \\= and "\\ " are unescaped; in string fields \\" and \\\\."""

from __future__ import annotations


def _split(text: str, seps: str, stop: str = "") -> tuple[str, str, str]:
    """Read up to the first unescaped char in seps; return (raw token, sep, rest)."""
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            i += 2
            continue
        if c in seps:
            return text[:i], c, text[i + 1 :]
        i += 1
    return text, "", ""


_UNESCAPE = {",": ",", "=": "=", " ": " "}


def unescape(token: str) -> str:
    out, i = [], 0
    while i < len(token):
        c = token[i]
        if c == "\\" and i + 1 < len(token) and token[i + 1] in _UNESCAPE:
            out.append(_UNESCAPE[token[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_line(line: str):
    """Return (measurement, tags, fields, timestamp) of one line."""
    assert "\n" not in line, "a point must not contain a raw newline"
    head, sep, rest = _split(line, " ")
    assert sep == " ", f"no field set in {line!r}"
    parts = []
    while True:
        tok, s, head = _split(head, ",")
        parts.append(tok)
        if not s:
            break
    measurement = unescape(parts[0])
    tags = {}
    for part in parts[1:]:
        k, s, v = _split(part, "=")
        assert s == "=", f"bad tag {part!r}"
        tags[unescape(k)] = unescape(v)
    fields = {}
    text = rest
    while True:
        k, s, text = _split(text, "=")
        assert s == "=", f"bad field in {line!r}"
        key = unescape(k)
        if text.startswith('"'):
            i, buf = 1, []
            while True:
                c = text[i]
                if c == "\\" and text[i + 1] in '"\\':
                    buf.append(text[i + 1])
                    i += 2
                    continue
                if c == '"':
                    break
                buf.append(c)
                i += 1
            fields[key] = "".join(buf)
            text = text[i + 1 :]
            sep = text[:1]
            text = text[1:]
        else:
            raw, sep, text = _split(text, ", ")
            fields[key] = _scalar(raw)
        if sep == ",":
            continue
        assert sep == " ", f"no timestamp in {line!r}"
        break
    return measurement, tags, fields, int(text)


def _scalar(raw: str):
    if raw in ("true", "t", "T", "True", "TRUE"):
        return True
    if raw in ("false", "f", "F", "False", "FALSE"):
        return False
    if raw.endswith("i"):
        return int(raw[:-1])
    return float(raw)


def parse(text: str):
    return [parse_line(line) for line in text.splitlines() if line.strip()]

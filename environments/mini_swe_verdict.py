"""Reading a mini-SWE sandbox run's records on the host, and the hidden cases' verdict.

The runner (mini_swe_runner) writes one record per line to a results file the host created and
passed as an open fd. Task code shares the runner's process, so it can write records too, or patch
the runner: no record is trusted to say that a hidden case passed. A hidden case passes when
exactly one well-formed record for it carries a value that `strict_equal`s (mini_swe_inprocess:
equal values of equal types, recursively) the expected value, which stays on the host and is never
sent to the run. Forging a pass therefore means producing the expected values, which is what fixing
the code means. A missing, malformed or duplicated record, or any malformed line at all, fails.

Decoding (`read_records`): at most `max_bytes` are read; each line is parsed by the standard
library's JSON parser (no eval) and then checked against the runner's record shapes; values are
rebuilt by `decode_value` with the encoder's bounds (depth, nodes, characters, int size), as
exact built-in types.
"""

from __future__ import annotations

import dataclasses
import json

from environments.mini_swe_inprocess import strict_equal
from environments.mini_swe_runner import MAX_CHARS, MAX_DEPTH, MAX_INT_BITS, MAX_NODES

MAX_LINE = 2 * MAX_CHARS


class Malformed(ValueError):
    """A record or value that is not what the runner writes."""


@dataclasses.dataclass(frozen=True)
class Records:
    """What a run's records say (module docstring: only `cases` are checked on the host)."""

    tests: tuple[tuple[str, bool], ...]          # (test function, passed) as the run reports it
    cases: tuple[tuple[int, bool, object], ...]  # (index, returned a value, value or error name)
    hits: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    ended: bool = False                          # the runner's final record was read
    malformed: bool = False


def _text(node) -> str:
    if type(node) is not str or len(node) > 2 * MAX_CHARS:
        raise Malformed("expected a hex string")
    try:
        return bytes.fromhex(node).decode("utf-8", "surrogatepass")
    except ValueError:
        raise Malformed("expected hex of UTF-8") from None


def decode_value(node, _depth: int = 0, _budget: list | None = None):
    """The plain value an encoded node stands for (mini_swe_runner.encode); Malformed otherwise."""
    budget = [MAX_NODES] if _budget is None else _budget
    budget[0] -= 1
    if budget[0] < 0 or _depth > MAX_DEPTH:
        raise Malformed("value too large or too deep")
    if type(node) is not list or not node or type(node[0]) is not str:
        raise Malformed("expected [tag, payload]")
    tag, rest = node[0], node[1:]
    if tag == "n" and not rest:
        return None
    if len(rest) != 1:
        raise Malformed(f"tag {tag!r}: expected one payload")
    payload = rest[0]
    if tag == "B" and type(payload) is bool:
        return payload
    if tag == "i" and type(payload) is str and 0 < len(payload) <= MAX_INT_BITS // 3 + 2:
        digits = payload[1:] if payload.startswith("-") else payload
        if digits.isascii() and digits.isdigit() and (digits == "0" or digits[0] != "0"):
            return int(payload)
    if tag == "f" and type(payload) is str and len(payload) <= 32:
        try:
            return float.fromhex(payload)
        except ValueError:
            raise Malformed("bad float") from None
    if tag == "s":
        return _text(payload)
    if tag == "y" and type(payload) is str and len(payload) <= 2 * MAX_CHARS:
        try:
            return bytes.fromhex(payload)
        except ValueError:
            raise Malformed("bad bytes") from None
    if tag in ("l", "t") and type(payload) is list:
        items = [decode_value(item, _depth + 1, budget) for item in payload]
        return items if tag == "l" else tuple(items)
    if tag == "d" and type(payload) is list:
        out = {}
        for pair in payload:
            if type(pair) is not list or len(pair) != 2:
                raise Malformed("expected [key, value] pairs")
            key = decode_value(pair[0], _depth + 1, budget)
            try:
                if key in out:
                    raise Malformed("repeated dict key")
                out[key] = decode_value(pair[1], _depth + 1, budget)
            except TypeError:
                raise Malformed("unhashable dict key") from None
        return out
    raise Malformed(f"unknown tag {tag!r} or bad payload")


def _record(line: bytes):
    if len(line) > MAX_LINE:
        raise Malformed("line too long")
    try:
        record = json.loads(line.decode("ascii"))
    except (ValueError, RecursionError):
        raise Malformed("not a JSON line") from None
    if type(record) is not dict or type(record.get("t")) is not str:
        raise Malformed("not a record")
    return record


def read_records(data: bytes, truncated: bool = False) -> Records:
    """The records of a run's results file (`data`, `truncated`: the file was longer than what
    was read, which makes it malformed)."""
    tests, cases, hits, layers, ended = [], [], (), (), False
    malformed = truncated
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            record = _record(line)
            kind, keys = record["t"], set(record)
            if kind == "test" and keys == {"t", "n", "ok"} and type(record["ok"]) is bool:
                tests.append((_text(record["n"]), record["ok"]))
            elif kind == "case" and type(record.get("i")) is int and keys in ({"t", "i", "v"},
                                                                              {"t", "i", "e"}):
                if "v" in record:
                    cases.append((record["i"], True, decode_value(record["v"])))
                else:
                    cases.append((record["i"], False, _text(record["e"])))
            elif kind == "end" and keys == {"t", "hits", "layers"} and not ended:
                hits = tuple(h for h in _text(record["hits"]).split(",") if h)
                layers = tuple(x for x in _text(record["layers"]).split(",") if x)
                ended = True
            else:
                raise Malformed(f"unexpected record {sorted(keys)}")
        except (Malformed, RecursionError):
            malformed = True
    return Records(tuple(tests), tuple(cases), hits, layers, ended, malformed)


def case_verdicts(records: Records, expected) -> tuple[bool, ...]:
    """For each expected value (hidden case i), whether exactly one record of case i returned
    a value strictly equal to it; all False when any line was malformed or a record names a case
    that does not exist."""
    n = len(expected)
    if records.malformed or any(not 0 <= index < n for index, _, _ in records.cases):
        return (False,) * n
    seen: dict[int, list] = {}
    for index, returned, value in records.cases:
        seen.setdefault(index, []).append((returned, value))
    verdicts = []
    for index, want in enumerate(expected):
        got = seen.get(index, [])
        verdicts.append(len(got) == 1 and got[0][0] and strict_equal(got[0][1], want))
    return tuple(verdicts)

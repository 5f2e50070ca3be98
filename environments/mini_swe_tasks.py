"""The mini-SWE task bank: small Python modules with unit tests, and seeded single-bug mutations.

Modules. Every module below was written for this project: a docstring, two to four small
utilities (strings, lists, arithmetic, parsing), a visible test file `test_<name>.py` of plain
assert-style test functions, and hidden extra cases `(function, args, expected)` that only
`submit` runs (with the visible test functions). Sources are ASCII and never use the words that
PATR's phase rules read as verification (`pass`, `test`, `fail`, ...), so that an edit that
restores a source line is classified as editing (`jaxtree.scorers.judge.phase_of`).

Two-file tasks pair a main module with a helper it imports (`from helper import ...`); the tests
exercise only the main module and the bug is planted in the helper, so a failing assertion's frame
never shows the buggy line.

Split (fixed, by module): `TEST_SINGLE` and `TEST_PAIRS` are held out (`split="test"`); every other
module trains (`split="train"`). See `SPLITS`.

Mutation operators (`OPERATORS`), each one textual change at an AST-located site of the module
(never in a docstring or an f-string):
  off_by_one          an int constant +-1, or `+ 1` / `- 1` appended to a range() stop or a
                      slice bound that is not a constant;
  flipped_comparison  a comparison operator negated or made (non-)strict (`<` -> `>=` or `<=`,
                      `==` -> `!=`, `in` -> `not in`, ...);
  wrong_operator      an arithmetic or boolean operator replaced (`+` <-> `-`, `*` -> `+`,
                      `//` -> `/` or `%`, `and` <-> `or`, `+=` -> `-=`, ...);
  swapped_arguments   the first two positional arguments of a call, or parameters of a def;
  wrong_constant      a constant replaced by a different one (not +-1: 0, v + 2, 2v; a string
                      shortened or changed; True <-> False);
  dropped_branch      an `if` statement, an `elif` clause, an `else` clause or one branch of a
                      conditional expression removed;
  wrong_return        a return value replaced (another local name, the negated condition, the
                      first parameter).
A candidate is kept when it compiles, differs from the original AST, and makes at least one
visible test fail within a step budget (mutants that loop are dropped, so every run ends fast);
`valid_mutations(task)` lists the kept ones, computed once per module in process (no sandbox).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import json
import os
import sys
import threading
import types

# ---------------------------------------------------------------------- the bank


@dataclasses.dataclass(frozen=True)
class Task:
    """One module to repair: `files` maps file names to sources (helper first for two-file tasks;
    the test file last); the bug goes into `target`; tests exercise `main`."""

    name: str
    files: tuple[tuple[str, str], ...]
    main: str             # module name the tests import
    target: str           # file name mutations are drawn from
    test_file: str
    hidden: tuple         # ((function, args, expected), ...) on the main module
    two_file: bool

    @property
    def sources(self) -> dict[str, str]:
        return dict(self.files)

    @property
    def source_files(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.files if name != self.test_file)


def _dedent(text: str) -> str:
    return text.strip("\n") + "\n"


def _single(name, source, tests, hidden) -> Task:
    test_file = f"test_{name}.py"
    return Task(name, ((f"{name}.py", _dedent(source)), (test_file, _dedent(tests))), name,
                f"{name}.py", test_file, tuple(hidden), False)


def _pair(name, helper, helper_source, source, tests, hidden) -> Task:
    test_file = f"test_{name}.py"
    return Task(name, ((f"{helper}.py", _dedent(helper_source)), (f"{name}.py", _dedent(source)),
                       (test_file, _dedent(tests))), name, f"{helper}.py", test_file,
                tuple(hidden), True)


SINGLE: dict[str, Task] = {}
PAIRS: dict[str, Task] = {}


def _add(task: Task) -> None:
    (PAIRS if task.two_file else SINGLE)[task.name] = task


_add(_single("wordwrap", '''
"""Greedy word wrapping of plain text."""


def wrap(text, width):
    """Splits text into lines of at most width characters, breaking at spaces."""
    words = text.split()
    lines = []
    current = ""
    for word in words:
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = current + " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width):
    """The wrapped lines joined by newlines."""
    return "\\n".join(wrap(text, width))
''', '''
"""Tests for wordwrap."""
from wordwrap import fill, wrap


def test_wrap_breaks_at_width():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_exact_fit():
    assert wrap("ab cd", 5) == ["ab cd"]
    assert wrap("ab cd", 4) == ["ab", "cd"]


def test_wrap_long_word_and_empty():
    assert wrap("extraordinary is long", 5) == ["extraordinary", "is", "long"]
    assert wrap("", 3) == []


def test_fill():
    assert fill("a b c d", 3) == "a b\\nc d"
''', [("wrap", ("one two three four", 9), ["one two", "three", "four"]),
      ("wrap", ("  spaced   out  ", 20), ["spaced out"]),
      ("fill", ("x y z", 1), "x\ny\nz")]))

_add(_single("romans", '''
"""Roman numerals."""

_VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
           (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(number):
    """The Roman numeral of a positive integer."""
    parts = []
    for value, symbol in _VALUES:
        while number >= value:
            parts.append(symbol)
            number -= value
    return "".join(parts)


def from_roman(numeral):
    """The integer value of a Roman numeral."""
    singles = {symbol: value for value, symbol in _VALUES if len(symbol) == 1}
    total = 0
    for i, char in enumerate(numeral):
        value = singles[char]
        if i + 1 < len(numeral) and singles[numeral[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
''', '''
"""Tests for romans."""
from romans import from_roman, to_roman


def test_to_roman_small():
    assert to_roman(3) == "III"
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"


def test_to_roman_large():
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(2024) == "MMXXIV"
    assert to_roman(3888) == "MMMDCCCLXXXVIII"


def test_from_roman():
    assert from_roman("XLII") == 42
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("I") == 1


def test_round_trip():
    assert all(from_roman(to_roman(n)) == n for n in range(1, 400, 7))
''', [("to_roman", (49,), "XLIX"), ("to_roman", (444,), "CDXLIV"),
      ("from_roman", ("CDXLIV",), 444), ("from_roman", ("MMMCMXCIX",), 3999)]))

_add(_single("runlength", '''
"""Run-length encoding of strings."""


def encode(text):
    """'aaab' -> 'a3b1': each run as its character and length."""
    if not text:
        return ""
    out = []
    run_char = text[0]
    run_length = 1
    for char in text[1:]:
        if char == run_char:
            run_length += 1
        else:
            out.append(run_char + str(run_length))
            run_char = char
            run_length = 1
    out.append(run_char + str(run_length))
    return "".join(out)


def decode(encoded):
    """The inverse of encode (run lengths may have several digits)."""
    out = []
    i = 0
    while i < len(encoded):
        char = encoded[i]
        j = i + 1
        while j < len(encoded) and encoded[j].isdigit():
            j += 1
        out.append(char * int(encoded[i + 1:j]))
        i = j
    return "".join(out)
''', '''
"""Tests for runlength."""
from runlength import decode, encode


def test_encode():
    assert encode("aaab") == "a3b1"
    assert encode("abc") == "a1b1c1"
    assert encode("zzzzzzzzzzzz") == "z12"
    assert encode("") == ""


def test_decode():
    assert decode("a3b1") == "aaab"
    assert decode("x12") == "x" * 12
    assert decode("") == ""


def test_round_trip():
    for text in ["hello", "aabbbcccc", "q"]:
        assert decode(encode(text)) == text
''', [("encode", ("aabbbc",), "a2b3c1"), ("decode", ("a1b2c3",), "abbccc"),
      ("encode", ("a",), "a1")]))

_add(_single("caesar", '''
"""Caesar cipher over ASCII letters."""


def shift_char(char, k):
    """Shifts a letter by k places, wrapping around; other characters are unchanged."""
    if "a" <= char <= "z":
        return chr((ord(char) - ord("a") + k) % 26 + ord("a"))
    if "A" <= char <= "Z":
        return chr((ord(char) - ord("A") + k) % 26 + ord("A"))
    return char


def encrypt(text, k):
    return "".join(shift_char(c, k) for c in text)


def decrypt(text, k):
    return encrypt(text, -k)
''', '''
"""Tests for caesar."""
from caesar import decrypt, encrypt, shift_char


def test_encrypt():
    assert encrypt("abc", 1) == "bcd"
    assert encrypt("xyz", 3) == "abc"
    assert encrypt("Hello, World!", 13) == "Uryyb, Jbeyq!"


def test_decrypt_round_trip():
    assert decrypt(encrypt("Attack at dawn", 7), 7) == "Attack at dawn"


def test_shift_char():
    assert shift_char("Z", 1) == "A"
    assert shift_char("a", 25) == "z"
    assert shift_char("5", 4) == "5"
''', [("encrypt", ("Zebra-9", 27), "Afcsb-9"), ("decrypt", ("bcd", 1), "abc"),
      ("shift_char", ("m", -13), "z")]))

_add(_single("palindromes", '''
"""Palindrome checks on text."""


def normalize(text):
    """Lowercase letters and digits of text, in order."""
    return "".join(c.lower() for c in text if c.isalnum())


def is_palindrome(text):
    cleaned = normalize(text)
    return cleaned == cleaned[::-1]


def longest_palindrome(text):
    """The longest palindromic substring (the first one on ties)."""
    best = ""
    for i in range(len(text)):
        for j in range(i + len(best) + 1, len(text) + 1):
            piece = text[i:j]
            if piece == piece[::-1]:
                best = piece
    return best
''', '''
"""Tests for palindromes."""
from palindromes import is_palindrome, longest_palindrome, normalize


def test_normalize():
    assert normalize("Hi there!") == "hithere"


def test_is_palindrome():
    assert is_palindrome("A man, a plan, a canal: Panama")
    assert not is_palindrome("abc")


def test_longest_palindrome():
    assert longest_palindrome("babad") == "bab"
    assert longest_palindrome("cbbd") == "bb"
    assert longest_palindrome("") == ""
''', [("longest_palindrome", ("forgeeksskeegfor",), "geeksskeeg"),
      ("is_palindrome", ("No 'x' in Nixon",), True), ("longest_palindrome", ("a",), "a")]))

_add(_single("chunking", '''
"""Splitting, flattening and interleaving lists."""


def chunk(items, size):
    """Consecutive pieces of `size` items; the last may be shorter."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def flatten(nested):
    """One level of nesting removed."""
    out = []
    for part in nested:
        out.extend(part)
    return out


def interleave(first, second):
    """Alternates items of both lists, then the rest of the longer one."""
    out = []
    for i in range(max(len(first), len(second))):
        if i < len(first):
            out.append(first[i])
        if i < len(second):
            out.append(second[i])
    return out
''', '''
"""Tests for chunking."""
from chunking import chunk, flatten, interleave


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunk([], 3) == []


def test_flatten():
    assert flatten([[1], [2, 3], []]) == [1, 2, 3]


def test_interleave():
    assert interleave([1, 2, 3], ["a"]) == [1, "a", 2, 3]
    assert interleave([], [4, 5]) == [4, 5]
''', [("chunk", ([0, 1, 2, 3, 4, 5, 6], 3), [[0, 1, 2], [3, 4, 5], [6]]),
      ("interleave", ([1], [2, 3, 4]), [1, 2, 3, 4]), ("flatten", ([[], [[1]]],), [[1]])]))

_add(_single("numstats", '''
"""Descriptive statistics of number lists."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def mode(values):
    """The most frequent value; the smallest one on ties."""
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    best = None
    for value in sorted(counts):
        if best is None or counts[value] > counts[best]:
            best = value
    return best


def value_range(values):
    return max(values) - min(values)
''', '''
"""Tests for numstats."""
from numstats import mean, median, mode, value_range


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5


def test_mode():
    assert mode([1, 2, 2, 3, 3]) == 2
    assert mode([5]) == 5


def test_value_range():
    assert value_range([3, 9, 4]) == 6
''', [("median", ([10, 2, 38, 23, 38, 23, 21],), 23), ("mode", ([4, 4, 1, 1, 2],), 1),
      ("mean", ([2],), 2.0)]))

_add(_single("sieve", '''
"""Prime numbers."""


def is_prime(n):
    if n < 2:
        return False
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1
    return True


def primes_below(limit):
    """All primes p < limit, by the sieve of Eratosthenes."""
    if limit < 3:
        return []
    marks = [True] * limit
    marks[0] = marks[1] = False
    for p in range(2, int(limit ** 0.5) + 1):
        if marks[p]:
            for multiple in range(p * p, limit, p):
                marks[multiple] = False
    return [n for n, prime in enumerate(marks) if prime]
''', '''
"""Tests for sieve."""
from sieve import is_prime, primes_below


def test_is_prime():
    assert is_prime(2)
    assert is_prime(17)
    assert not is_prime(1)
    assert not is_prime(21)
    assert not is_prime(25)


def test_primes_below():
    assert primes_below(20) == [2, 3, 5, 7, 11, 13, 17, 19]
    assert primes_below(2) == []
    assert primes_below(3) == [2]
''', [("primes_below", (30,), [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]), ("is_prime", (97,), True),
      ("is_prime", (49,), False), ("primes_below", (10,), [2, 3, 5, 7])]))

_add(_single("fizzbuzz", '''
"""FizzBuzz."""


def fizzbuzz_word(n):
    if n % 15 == 0:
        return "FizzBuzz"
    if n % 3 == 0:
        return "Fizz"
    if n % 5 == 0:
        return "Buzz"
    return str(n)


def fizzbuzz(count):
    """The words for 1..count."""
    return [fizzbuzz_word(n) for n in range(1, count + 1)]
''', '''
"""Tests for fizzbuzz."""
from fizzbuzz import fizzbuzz, fizzbuzz_word


def test_words():
    assert fizzbuzz_word(30) == "FizzBuzz"
    assert fizzbuzz_word(9) == "Fizz"
    assert fizzbuzz_word(10) == "Buzz"
    assert fizzbuzz_word(7) == "7"


def test_sequence():
    assert fizzbuzz(5) == ["1", "2", "Fizz", "4", "Buzz"]
    assert len(fizzbuzz(15)) == 15
    assert fizzbuzz(0) == []
''', [("fizzbuzz", (15,), ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz",
                           "11", "Fizz", "13", "14", "FizzBuzz"]),
      ("fizzbuzz_word", (45,), "FizzBuzz")]))

_add(_single("binsearch", '''
"""Binary search in sorted lists."""


def bisect_left(items, target):
    """The first index whose item is >= target (len(items) if none)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def contains(items, target):
    index = bisect_left(items, target)
    return index < len(items) and items[index] == target


def count_in_range(items, low, high):
    """How many items x satisfy low <= x < high."""
    return bisect_left(items, high) - bisect_left(items, low)
''', '''
"""Tests for binsearch."""
from binsearch import bisect_left, contains, count_in_range


def test_bisect_left():
    assert bisect_left([1, 3, 5, 7], 5) == 2
    assert bisect_left([1, 3, 5, 7], 0) == 0
    assert bisect_left([1, 3, 5, 7], 8) == 4
    assert bisect_left([1, 2, 2, 2, 3], 2) == 1


def test_contains():
    assert contains([1, 3, 5], 3)
    assert not contains([1, 3, 5], 4)
    assert not contains([], 1)


def test_count_in_range():
    assert count_in_range([1, 2, 3, 4, 5, 6], 2, 5) == 3
''', [("bisect_left", ([2, 4, 6, 8, 10], 7), 3), ("count_in_range", ([1, 1, 2, 3], 1, 2), 2),
      ("contains", ([5], 5), True)]))

_add(_single("divisors", '''
"""Greatest common divisors, multiples and divisors."""


def gcd(a, b):
    while b:
        a, b = b, a % b
    return abs(a)


def lcm(a, b):
    if a == 0 or b == 0:
        return 0
    return abs(a * b) // gcd(a, b)


def divisors(n):
    """The positive divisors of n >= 1, ascending."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
        d += 1
    return small + large[::-1]
''', '''
"""Tests for divisors."""
from divisors import divisors, gcd, lcm


def test_gcd():
    assert gcd(12, 18) == 6
    assert gcd(7, 0) == 7
    assert gcd(-4, 6) == 2


def test_lcm():
    assert lcm(4, 6) == 12
    assert lcm(0, 5) == 0


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(16) == [1, 2, 4, 8, 16]
    assert divisors(1) == [1]
''', [("divisors", (36,), [1, 2, 3, 4, 6, 9, 12, 18, 36]), ("lcm", (21, 6), 42),
      ("gcd", (270, 192), 6)]))

_add(_single("csvparse", '''
"""Parsing and formatting one line of comma-separated values."""


def parse_line(line, sep=","):
    """Fields of a CSV line; double quotes group separators, and "" inside quotes is a quote."""
    fields = []
    field = ""
    quoted = False
    i = 0
    while i < len(line):
        char = line[i]
        if quoted:
            if char == '"' and i + 1 < len(line) and line[i + 1] == '"':
                field += '"'
                i += 1
            elif char == '"':
                quoted = False
            else:
                field += char
        elif char == '"':
            quoted = True
        elif char == sep:
            fields.append(field)
            field = ""
        else:
            field += char
        i += 1
    fields.append(field)
    return fields


def format_line(fields, sep=","):
    """The inverse of parse_line: quotes the fields holding separators or quotes."""
    out = []
    for field in fields:
        if sep in field or '"' in field:
            field = '"' + field.replace('"', '""') + '"'
        out.append(field)
    return sep.join(out)
''', '''
"""Tests for csvparse."""
from csvparse import format_line, parse_line


def test_parse_plain():
    assert parse_line("a,b,c") == ["a", "b", "c"]
    assert parse_line("") == [""]
    assert parse_line("1;2", sep=";") == ["1", "2"]


def test_parse_quoted():
    assert parse_line('"x,y",z') == ["x,y", "z"]
    assert parse_line('a,"say ""hi""",b') == ["a", 'say "hi"', "b"]


def test_format_line():
    assert format_line(["a", "b,c"]) == 'a,"b,c"'
    assert format_line(['q"']) == '"q"""'
''', [("parse_line", (",,",), ["", "", ""]), ("parse_line", ('x,"y,""z"""',), ["x", 'y,"z"']),
      ("format_line", (["plain", "with space"],), "plain,with space")]))

_add(_single("keyvals", '''
"""Parsing and formatting 'key=value' settings strings."""


def parse_settings(text):
    """'a=1; b = two' -> {'a': '1', 'b': 'two'}; empty items are skipped."""
    settings = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        key, _, value = item.partition("=")
        settings[key.strip()] = value.strip()
    return settings


def format_settings(settings):
    """Keys sorted, each as 'key=value', joined by '; '."""
    return "; ".join(key + "=" + settings[key] for key in sorted(settings))


def get_int(settings, key, default=0):
    value = settings.get(key)
    if value is None or not value.lstrip("-").isdigit():
        return default
    return int(value)
''', '''
"""Tests for keyvals."""
from keyvals import format_settings, get_int, parse_settings


def test_parse_settings():
    assert parse_settings("a=1; b = two") == {"a": "1", "b": "two"}
    assert parse_settings(";;x=;") == {"x": ""}


def test_format_settings():
    assert format_settings({"b": "2", "a": "1"}) == "a=1; b=2"


def test_get_int():
    assert get_int({"n": "-3"}, "n") == -3
    assert get_int({"n": "x"}, "n", 7) == 7
    assert get_int({}, "m") == 0
''', [("parse_settings", ("k=v=w",), {"k": "v=w"}), ("format_settings", ({},), ""),
      ("get_int", ({"n": "12"}, "n"), 12)]))

_add(_single("slugs", '''
"""URL slugs from titles."""


def slugify(title, max_length=40):
    """Lowercase words of letters and digits joined by '-', at most max_length characters."""
    words = []
    word = ""
    for char in title.lower():
        if char.isalnum():
            word += char
        elif word:
            words.append(word)
            word = ""
    if word:
        words.append(word)
    slug = "-".join(words)
    if len(slug) > max_length:
        slug = slug[:max_length].rstrip("-")
    return slug
''', '''
"""Tests for slugs."""
from slugs import slugify


def test_slugify_words():
    assert slugify("Hello, World!") == "hello-world"
    assert slugify("  Many   spaces ") == "many-spaces"
    assert slugify("Python 3.11 release") == "python-3-11-release"


def test_slugify_length():
    assert slugify("abc def", max_length=4) == "abc"
    assert slugify("x" * 45) == "x" * 40
    assert slugify("") == ""
''', [("slugify", ("A-B_C", 10), "a-b-c"), ("slugify", ("y" * 50,), "y" * 40),
      ("slugify", ("ab cd ef", 5), "ab-cd")]))

_add(_single("intervals", '''
"""Merging integer intervals."""


def merge(intervals):
    """Overlapping or touching [start, end] intervals merged, sorted by start."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def total_length(intervals):
    return sum(end - start for start, end in merge(intervals))


def overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1]
''', '''
"""Tests for intervals."""
from intervals import merge, overlaps, total_length


def test_merge():
    assert merge([[1, 3], [2, 6], [8, 10], [15, 18]]) == [[1, 6], [8, 10], [15, 18]]
    assert merge([[1, 4], [4, 5]]) == [[1, 5]]
    assert merge([[5, 6], [1, 2]]) == [[1, 2], [5, 6]]
    assert merge([]) == []


def test_total_length():
    assert total_length([[1, 3], [2, 4]]) == 3


def test_overlaps():
    assert overlaps([1, 3], [2, 4])
    assert not overlaps([1, 2], [2, 3])
''', [("merge", ([[1, 10], [2, 3], [4, 5]],), [[1, 10]]),
      ("total_length", ([[0, 1], [5, 8]],), 4), ("overlaps", ([0, 5], [1, 2]), True)]))

_add(_single("matrix2d", '''
"""Small dense matrices as lists of rows."""


def identity(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def transpose(matrix):
    if not matrix:
        return []
    return [[row[j] for row in matrix] for j in range(len(matrix[0]))]


def matmul(a, b):
    """The product a @ b (a is n x k, b is k x m)."""
    columns = transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in columns] for row in a]


def trace(matrix):
    return sum(matrix[i][i] for i in range(len(matrix)))
''', '''
"""Tests for matrix2d."""
from matrix2d import identity, matmul, trace, transpose


def test_identity():
    assert identity(2) == [[1, 0], [0, 1]]


def test_transpose():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]
    assert transpose([]) == []


def test_matmul():
    assert matmul([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]
    assert matmul([[1, 0, 2]], [[1], [2], [3]]) == [[7]]


def test_trace():
    assert trace([[1, 2], [3, 4]]) == 5
''', [("matmul", ([[1, 0, 0], [0, 1, 0], [0, 0, 1]], [[2, 3, 4], [5, 6, 7], [8, 9, 1]]),
       [[2, 3, 4], [5, 6, 7], [8, 9, 1]]),
      ("trace", ([[5]],), 5), ("identity", (0,), [])]))

_add(_single("digitsum", '''
"""Digits of integers."""


def digits(n):
    """The decimal digits of abs(n), most significant first."""
    n = abs(n)
    if n == 0:
        return [0]
    out = []
    while n > 0:
        out.append(n % 10)
        n //= 10
    return out[::-1]


def digit_sum(n):
    return sum(digits(n))


def digital_root(n):
    while n >= 10:
        n = digit_sum(n)
    return n


def reverse_number(n):
    sign = -1 if n < 0 else 1
    return sign * int("".join(str(d) for d in digits(n))[::-1])
''', '''
"""Tests for digitsum."""
from digitsum import digit_sum, digital_root, digits, reverse_number


def test_digits():
    assert digits(1203) == [1, 2, 0, 3]
    assert digits(0) == [0]
    assert digits(-45) == [4, 5]


def test_sums():
    assert digit_sum(999) == 27
    assert digital_root(9875) == 2
    assert digital_root(7) == 7


def test_reverse_number():
    assert reverse_number(120) == 21
    assert reverse_number(-34) == -43
''', [("digital_root", (38,), 2), ("reverse_number", (5,), 5), ("digit_sum", (-101,), 2)]))

_add(_single("anagrams", '''
"""Anagram detection and grouping."""


def letters_key(word):
    return "".join(sorted(word.lower()))


def is_anagram(a, b):
    """Whether a and b use the same letters (case-insensitive, spaces ignored)."""
    return letters_key(a.replace(" ", "")) == letters_key(b.replace(" ", ""))


def group_anagrams(words):
    """Groups of at least two words sharing their letters, in order of first appearance."""
    groups = {}
    for word in words:
        groups.setdefault(letters_key(word), []).append(word)
    return [group for group in groups.values() if len(group) > 1]
''', '''
"""Tests for anagrams."""
from anagrams import group_anagrams, is_anagram


def test_is_anagram():
    assert is_anagram("listen", "silent")
    assert is_anagram("Dormitory", "dirty room")
    assert not is_anagram("abc", "abd")


def test_group_anagrams():
    words = ["eat", "tea", "tan", "ate", "nat", "bat"]
    assert group_anagrams(words) == [["eat", "tea", "ate"], ["tan", "nat"]]
    assert group_anagrams(["x"]) == []
''', [("group_anagrams", (["ab", "ba", "ab"],), [["ab", "ba", "ab"]]),
      ("is_anagram", ("a", "A"), True), ("is_anagram", ("ab", "abb"), False)]))

_add(_single("textcount", '''
"""Counting characters and words."""

VOWELS = "aeiou"


def count_vowels(text):
    return sum(1 for char in text.lower() if char in VOWELS)


def count_words(text):
    return len(text.split())


def char_histogram(text):
    """(letter, count) pairs, most frequent first, then alphabetical."""
    counts = {}
    for char in text.lower():
        if char.isalpha():
            counts[char] = counts.get(char, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
''', '''
"""Tests for textcount."""
from textcount import char_histogram, count_vowels, count_words


def test_count_vowels():
    assert count_vowels("Hello World") == 3
    assert count_vowels("rhythm") == 0
    assert count_vowels("queue") == 4


def test_count_words():
    assert count_words("  a  b c ") == 3
    assert count_words("") == 0


def test_char_histogram():
    assert char_histogram("Banana!") == [("a", 3), ("n", 2), ("b", 1)]
''', [("char_histogram", ("abcab",), [("a", 2), ("b", 2), ("c", 1)]),
      ("count_vowels", ("AEIOUxyz",), 5)]))

_add(_single("rotation", '''
"""Rotating lists."""


def rotate_left(items, k):
    if not items:
        return []
    k = k % len(items)
    return items[k:] + items[:k]


def rotate_right(items, k):
    if not items:
        return []
    return rotate_left(items, len(items) - k % len(items))


def is_rotation(a, b):
    """Whether list b is a rotation of list a."""
    if len(a) != len(b):
        return False
    return not a or any(rotate_left(a, k) == b for k in range(len(a)))
''', '''
"""Tests for rotation."""
from rotation import is_rotation, rotate_left, rotate_right


def test_rotate_left():
    assert rotate_left([1, 2, 3, 4], 1) == [2, 3, 4, 1]
    assert rotate_left([1, 2, 3], 4) == [2, 3, 1]


def test_rotate_right():
    assert rotate_right([1, 2, 3, 4], 1) == [4, 1, 2, 3]
    assert rotate_right([], 3) == []


def test_is_rotation():
    assert is_rotation([1, 2, 3], [3, 1, 2])
    assert not is_rotation([1, 2, 3], [1, 3, 2])
    assert is_rotation([], [])
''', [("rotate_right", ([1, 2, 3], 3), [1, 2, 3]), ("rotate_left", (["a", "b"], 0), ["a", "b"]),
      ("is_rotation", ([1, 2], [1, 2, 3]), False)]))

_add(_single("pascal", '''
"""Pascal's triangle and binomial coefficients."""


def pascal_row(n):
    """Row n (counted from 0) of Pascal's triangle."""
    row = [1]
    for _ in range(n):
        row = [1] + [row[i] + row[i + 1] for i in range(len(row) - 1)] + [1]
    return row


def binomial(n, k):
    if k < 0 or k > n:
        return 0
    return pascal_row(n)[k]


def triangle(rows):
    return [pascal_row(n) for n in range(rows)]
''', '''
"""Tests for pascal."""
from pascal import binomial, pascal_row, triangle


def test_pascal_row():
    assert pascal_row(0) == [1]
    assert pascal_row(4) == [1, 4, 6, 4, 1]


def test_binomial():
    assert binomial(5, 2) == 10
    assert binomial(5, 6) == 0
    assert binomial(3, -1) == 0


def test_triangle():
    assert triangle(3) == [[1], [1, 1], [1, 2, 1]]
''', [("binomial", (10, 3), 120), ("pascal_row", (1,), [1, 1]), ("triangle", (0,), [])]))

_add(_single("baseconv", '''
"""Integer conversion between bases 2 to 36."""

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def to_base(number, base):
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    number = abs(number)
    out = []
    while number:
        number, remainder = divmod(number, base)
        out.append(DIGITS[remainder])
    return sign + "".join(reversed(out))


def from_base(text, base):
    text = text.strip().lower()
    sign = -1 if text.startswith("-") else 1
    value = 0
    for char in text.lstrip("-"):
        value = value * base + DIGITS.index(char)
    return sign * value
''', '''
"""Tests for baseconv."""
from baseconv import from_base, to_base


def test_to_base():
    assert to_base(255, 16) == "ff"
    assert to_base(5, 2) == "101"
    assert to_base(0, 7) == "0"
    assert to_base(-10, 3) == "-101"
    assert to_base(35, 36) == "z"


def test_from_base():
    assert from_base("ff", 16) == 255
    assert from_base(" -101 ", 2) == -5


def test_round_trip():
    assert from_base(to_base(123456, 36), 36) == 123456
''', [("to_base", (1295, 36), "zz"), ("from_base", ("Zz", 36), 1295), ("to_base", (8, 8), "10")]))

_add(_single("uniques", '''
"""Removing duplicates while keeping order."""


def unique_in_order(items):
    """Consecutive duplicates collapsed: 'aaabcca' -> ['a', 'b', 'c', 'a']."""
    out = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def dedupe(items):
    """Later duplicates dropped, first occurrences kept in order."""
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def duplicates(items):
    """Items occurring more than once, in order of their second occurrence."""
    seen, out = set(), []
    for item in items:
        if item in seen and item not in out:
            out.append(item)
        seen.add(item)
    return out
''', '''
"""Tests for uniques."""
from uniques import dedupe, duplicates, unique_in_order


def test_unique_in_order():
    assert unique_in_order("aaabcca") == ["a", "b", "c", "a"]
    assert unique_in_order([]) == []


def test_dedupe():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_duplicates():
    assert duplicates([1, 2, 1, 3, 2, 1]) == [1, 2]
    assert duplicates([1, 2, 3]) == []
''', [("unique_in_order", ([1, 1, 2, 2, 1],), [1, 2, 1]), ("dedupe", ("banana",), ["b", "a", "n"]),
      ("duplicates", ("abcabc",), ["a", "b", "c"])]))

_add(_single("scaling", '''
"""Clamping and rescaling numbers."""


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def rescale(value, old_low, old_high, new_low, new_high):
    """Maps value linearly from [old_low, old_high] to [new_low, new_high]."""
    fraction = (value - old_low) / (old_high - old_low)
    return new_low + fraction * (new_high - new_low)


def percent(part, whole, digits=1):
    if whole == 0:
        return 0.0
    return round(100 * part / whole, digits)
''', '''
"""Tests for scaling."""
from scaling import clamp, percent, rescale


def test_clamp():
    assert clamp(5, 0, 10) == 5
    assert clamp(-1, 0, 10) == 0
    assert clamp(11, 0, 10) == 10


def test_rescale():
    assert rescale(5, 0, 10, 0, 100) == 50.0
    assert rescale(0, 0, 10, -1, 1) == -1.0
    assert rescale(4, 2, 6, 10, 30) == 20.0


def test_percent():
    assert percent(1, 3) == 33.3
    assert percent(2, 0) == 0.0
    assert percent(1, 8, 2) == 12.5
''', [("clamp", (10, 0, 10), 10), ("rescale", (15, 10, 20, 0, 1), 0.5),
      ("percent", (1, 4, 0), 25.0)]))

_add(_single("sliding", '''
"""Sliding-window sums."""


def window_sums(values, k):
    """Sums of every k consecutive values."""
    if k <= 0 or k > len(values):
        return []
    total = sum(values[:k])
    sums = [total]
    for i in range(k, len(values)):
        total += values[i] - values[i - k]
        sums.append(total)
    return sums


def best_window(values, k):
    """The start of the first window of k values with the largest sum (-1 if none)."""
    sums = window_sums(values, k)
    if not sums:
        return -1
    best = 0
    for i in range(1, len(sums)):
        if sums[i] > sums[best]:
            best = i
    return best
''', '''
"""Tests for sliding."""
from sliding import best_window, window_sums


def test_window_sums():
    assert window_sums([1, 2, 3, 4], 2) == [3, 5, 7]
    assert window_sums([5], 1) == [5]
    assert window_sums([1, 2], 3) == []
    assert window_sums([1, 2], 0) == []


def test_best_window():
    assert best_window([1, 3, 2, 5, 1], 2) == 2
    assert best_window([4, 4, 1], 1) == 0
    assert best_window([], 2) == -1
''', [("window_sums", ([2, -1, 3, 0, 4], 3), [4, 2, 7]),
      ("best_window", ([1, 2, 3, 3, 2, 1], 2), 2)]))

_add(_single("tally", '''
"""Counting occurrences."""


def counts(items):
    """item -> number of occurrences, in order of first appearance."""
    out = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def most_common(items, n=1):
    """The n most frequent items, ties broken by first appearance."""
    tally = counts(items)
    order = list(tally)
    ranked = sorted(order, key=lambda item: (-tally[item], order.index(item)))
    return ranked[:n]


def frequency(items, item):
    if not items:
        return 0.0
    return counts(items).get(item, 0) / len(items)
''', '''
"""Tests for tally."""
from tally import counts, frequency, most_common


def test_counts():
    assert counts("abca") == {"a": 2, "b": 1, "c": 1}


def test_most_common():
    assert most_common([3, 1, 3, 2, 1, 3]) == [3]
    assert most_common("aabbc", 2) == ["a", "b"]
    assert most_common("xyz", 2) == ["x", "y"]


def test_frequency():
    assert frequency([1, 2, 2, 3], 2) == 0.5
    assert frequency([], 1) == 0.0
''', [("most_common", ([5, 6, 6, 5, 7], 3), [5, 6, 7]), ("counts", ([],), {}),
      ("frequency", ("aaa", "b"), 0.0)]))

_add(_single("twosum", '''
"""Pairs of numbers with a given sum."""


def two_sum(numbers, target):
    """Indices (i, j), i < j, of the first pair summing to target (smallest j); None if none."""
    seen = {}
    for j, value in enumerate(numbers):
        if target - value in seen:
            return (seen[target - value], j)
        if value not in seen:
            seen[value] = j
    return None


def count_pairs(numbers, target):
    """Number of index pairs i < j with numbers[i] + numbers[j] == target."""
    count = 0
    for i in range(len(numbers)):
        for j in range(i + 1, len(numbers)):
            if numbers[i] + numbers[j] == target:
                count += 1
    return count
''', '''
"""Tests for twosum."""
from twosum import count_pairs, two_sum


def test_two_sum():
    assert two_sum([2, 7, 11, 15], 9) == (0, 1)
    assert two_sum([3, 2, 4], 6) == (1, 2)
    assert two_sum([3, 3], 6) == (0, 1)
    assert two_sum([1, 2], 7) is None


def test_count_pairs():
    assert count_pairs([1, 2, 3, 4, 5], 6) == 2
    assert count_pairs([2, 2, 2], 4) == 3
''', [("two_sum", ([5, 1, 5, 1], 6), (0, 1)), ("two_sum", ([], 0), None),
      ("count_pairs", ([0, 0], 0), 1)]))

_add(_single("casing", '''
"""Converting between snake_case, camelCase and title case."""


def snake_to_camel(name):
    parts = name.split("_")
    return parts[0] + "".join(part.capitalize() for part in parts[1:])


def camel_to_snake(name):
    out = []
    for i, char in enumerate(name):
        if char.isupper() and i > 0:
            out.append("_")
        out.append(char.lower())
    return "".join(out)


def title_case(text):
    """Each word capitalised; 'a', 'of' and 'the' stay lowercase unless first."""
    small = ("a", "of", "the")
    words = text.lower().split()
    return " ".join(w if i > 0 and w in small else w.capitalize() for i, w in enumerate(words))
''', '''
"""Tests for casing."""
from casing import camel_to_snake, snake_to_camel, title_case


def test_snake_to_camel():
    assert snake_to_camel("hello_big_world") == "helloBigWorld"
    assert snake_to_camel("x") == "x"


def test_camel_to_snake():
    assert camel_to_snake("helloBigWorld") == "hello_big_world"
    assert camel_to_snake("Already") == "already"


def test_title_case():
    assert title_case("the lord of the rings") == "The Lord of the Rings"
    assert title_case("a tale") == "A Tale"
''', [("camel_to_snake", ("getHTTP",), "get_h_t_t_p"),
      ("snake_to_camel", ("to_json_string",), "toJsonString"),
      ("title_case", ("war AND peace",), "War And Peace")]))

# ------------------------------------------------------------ held-out single modules

_add(_single("durations", '''
"""Formatting and parsing durations such as '1h02m03s'."""


def format_duration(seconds):
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return "%dh%02dm%02ds" % (hours, minutes, secs)
    if minutes:
        return "%dm%02ds" % (minutes, secs)
    return "%ds" % secs


def parse_duration(text):
    """The number of seconds in a text like '1h2m3s', '5m' or '42s'."""
    total = 0
    number = ""
    units = {"h": 3600, "m": 60, "s": 1}
    for char in text:
        if char.isdigit():
            number += char
        else:
            total += int(number) * units[char]
            number = ""
    return total
''', '''
"""Tests for durations."""
from durations import format_duration, parse_duration


def test_format_duration():
    assert format_duration(3723) == "1h02m03s"
    assert format_duration(125) == "2m05s"
    assert format_duration(7) == "7s"
    assert format_duration(3600) == "1h00m00s"


def test_parse_duration():
    assert parse_duration("1h2m3s") == 3723
    assert parse_duration("5m") == 300
    assert parse_duration("42s") == 42
''', [("format_duration", (0,), "0s"), ("parse_duration", ("2h",), 7200),
      ("format_duration", (59,), "59s"), ("format_duration", (60,), "1m00s")]))

_add(_single("brackets", '''
"""Balanced brackets."""

PAIRS = {")": "(", "]": "[", "}": "{"}


def is_balanced(text):
    stack = []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in PAIRS:
            if not stack or stack.pop() != PAIRS[char]:
                return False
    return not stack


def max_depth(text):
    """The deepest nesting of brackets in text (assumed balanced)."""
    depth = best = 0
    for char in text:
        if char in "([{":
            depth += 1
            best = max(best, depth)
        elif char in PAIRS:
            depth -= 1
    return best
''', '''
"""Tests for brackets."""
from brackets import is_balanced, max_depth


def test_balanced():
    assert is_balanced("([]{})")
    assert is_balanced("a(b)c")
    assert is_balanced("")


def test_unbalanced():
    assert not is_balanced("(]")
    assert not is_balanced("((")
    assert not is_balanced("())")


def test_max_depth():
    assert max_depth("(a[b{c}])") == 3
    assert max_depth("()()") == 1
    assert max_depth("x") == 0
''', [("is_balanced", ("{[()()]}",), True), ("is_balanced", ("]",), False),
      ("max_depth", ("(()(()))",), 3)]))

_add(_single("semver", '''
"""Comparing and bumping version strings like '1.10.2'."""


def parse_version(text):
    return tuple(int(part) for part in text.split("."))


def compare_versions(a, b):
    """-1, 0 or 1 as version a is lower, equal or higher than b (missing parts count as 0)."""
    pa, pb = parse_version(a), parse_version(b)
    length = max(len(pa), len(pb))
    pa = pa + (0,) * (length - len(pa))
    pb = pb + (0,) * (length - len(pb))
    if pa < pb:
        return -1
    if pa > pb:
        return 1
    return 0


def bump(version, part="micro"):
    major, minor, micro = parse_version(version)
    if part == "major":
        return "%d.0.0" % (major + 1)
    if part == "minor":
        return "%d.%d.0" % (major, minor + 1)
    return "%d.%d.%d" % (major, minor, micro + 1)
''', '''
"""Tests for semver."""
from semver import bump, compare_versions, parse_version


def test_parse_version():
    assert parse_version("10.0.3") == (10, 0, 3)


def test_compare_versions():
    assert compare_versions("1.2.10", "1.2.9") == 1
    assert compare_versions("1.0", "1.0.0") == 0
    assert compare_versions("0.9", "1.0") == -1
    assert compare_versions("2.0.1", "2.0.1") == 0


def test_bump():
    assert bump("1.2.3") == "1.2.4"
    assert bump("1.2.3", "minor") == "1.3.0"
    assert bump("1.2.3", "major") == "2.0.0"
''', [("compare_versions", ("1.10", "1.9.9"), 1), ("compare_versions", ("3", "3.0.1"), -1),
      ("bump", ("0.0.9",), "0.0.10")]))

_add(_single("numranges", '''
"""Compressing integer lists into range strings like '1-3,5'."""


def compress(numbers):
    numbers = sorted(set(numbers))
    parts = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        if j > i:
            parts.append(str(numbers[i]) + "-" + str(numbers[j]))
        else:
            parts.append(str(numbers[i]))
        i = j + 1
    return ",".join(parts)


def expand(text):
    numbers = []
    for part in text.split(","):
        if not part:
            continue
        if "-" in part[1:]:
            cut = part.index("-", 1)
            numbers.extend(range(int(part[:cut]), int(part[cut + 1:]) + 1))
        else:
            numbers.append(int(part))
    return numbers
''', '''
"""Tests for numranges."""
from numranges import compress, expand


def test_compress():
    assert compress([1, 2, 3, 5]) == "1-3,5"
    assert compress([5, 4, 3]) == "3-5"
    assert compress([1, 3, 5]) == "1,3,5"
    assert compress([]) == ""


def test_expand():
    assert expand("1-3,5") == [1, 2, 3, 5]
    assert expand("7") == [7]
    assert expand("") == []
    assert expand("-2-0") == [-2, -1, 0]
''', [("compress", ([10, 11, 13, 14, 15, 20],), "10-11,13-15,20"),
      ("expand", ("2-4,8-9",), [2, 3, 4, 8, 9]), ("compress", ([1, 1, 2],), "1-2")]))

_add(_single("luhn", '''
"""The Luhn checksum of identification numbers."""


def luhn_sum(digits):
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = int(char)
        if position % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total


def is_valid(number):
    digits = number.replace(" ", "")
    if len(digits) < 2 or not digits.isdigit():
        return False
    return luhn_sum(digits) % 10 == 0


def check_digit(partial):
    """The digit that makes partial + digit valid."""
    return (10 - luhn_sum(partial + "0") % 10) % 10
''', '''
"""Tests for luhn."""
from luhn import check_digit, is_valid, luhn_sum


def test_luhn_sum():
    assert luhn_sum("18") == 10


def test_is_valid():
    assert is_valid("4539 3195 0343 6467")
    assert not is_valid("8273 1232 7352 0569")
    assert not is_valid("0")
    assert is_valid("059")
    assert not is_valid("05a9")


def test_check_digit():
    assert check_digit("7992739871") == 3
''', [("is_valid", ("79927398713",), True), ("is_valid", ("79927398710",), False),
      ("check_digit", ("0",), 0)]))

_add(_single("ordinals", '''
"""English ordinal suffixes."""


def suffix(n):
    if 10 <= n % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def ordinal(n):
    return str(n) + suffix(n)


def ordinals(start, stop):
    return [ordinal(n) for n in range(start, stop)]
''', '''
"""Tests for ordinals."""
from ordinals import ordinal, ordinals


def test_first_ordinals():
    assert ordinal(1) == "1st"
    assert ordinal(2) == "2nd"
    assert ordinal(3) == "3rd"
    assert ordinal(4) == "4th"


def test_teens_and_beyond():
    assert ordinal(11) == "11th"
    assert ordinal(12) == "12th"
    assert ordinal(13) == "13th"
    assert ordinal(21) == "21st"
    assert ordinal(102) == "102nd"
    assert ordinal(111) == "111th"


def test_ordinals():
    assert ordinals(1, 4) == ["1st", "2nd", "3rd"]
''', [("ordinal", (0,), "0th"), ("ordinal", (1013,), "1013th"), ("ordinal", (22,), "22nd"),
      ("ordinals", (20, 24), ["20th", "21st", "22nd", "23rd"])]))

_add(_single("triangles", '''
"""Classifying triangles by their side lengths."""


def is_triangle(a, b, c):
    sides = sorted([a, b, c])
    return sides[0] > 0 and sides[0] + sides[1] > sides[2]


def classify(a, b, c):
    if not is_triangle(a, b, c):
        return "invalid"
    if a == b == c:
        return "equilateral"
    if a == b or b == c or a == c:
        return "isosceles"
    return "scalene"


def perimeter(a, b, c):
    return a + b + c if is_triangle(a, b, c) else 0
''', '''
"""Tests for triangles."""
from triangles import classify, perimeter


def test_valid_triangles():
    assert classify(2, 2, 2) == "equilateral"
    assert classify(3, 4, 4) == "isosceles"
    assert classify(4, 3, 4) == "isosceles"
    assert classify(4, 4, 3) == "isosceles"
    assert classify(3, 4, 5) == "scalene"


def test_invalid_triangles():
    assert classify(1, 1, 3) == "invalid"
    assert classify(0, 0, 0) == "invalid"
    assert classify(1, 2, 3) == "invalid"


def test_perimeter():
    assert perimeter(3, 4, 5) == 12
    assert perimeter(1, 1, 5) == 0
''', [("classify", (5, 5, 8), "isosceles"), ("classify", (7, 10, 5), "scalene"),
      ("classify", (-1, 2, 2), "invalid"), ("perimeter", (2, 2, 2), 6)]))

_add(_single("leapyears", '''
"""Leap years and month lengths in the Gregorian calendar."""

MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if month == 2 and is_leap(year):
        return 29
    return MONTH_DAYS[month - 1]


def days_in_year(year):
    return 366 if is_leap(year) else 365
''', '''
"""Tests for leapyears."""
from leapyears import days_in_month, days_in_year, is_leap


def test_is_leap():
    assert is_leap(2024)
    assert not is_leap(2023)
    assert not is_leap(1900)
    assert is_leap(2000)


def test_days_in_month():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2023, 12) == 31
    assert [days_in_month(2023, m) for m in range(1, 13)].count(31) == 7


def test_days_in_year():
    assert days_in_year(1996) == 366
    assert days_in_year(2100) == 365
    assert sum(days_in_month(2023, m) for m in range(1, 13)) == 365
''', [("days_in_month", (2000, 2), 29), ("days_in_month", (1900, 2), 28),
      ("days_in_month", (2023, 9), 30), ("days_in_year", (2000,), 366)]))

# ------------------------------------------------------------ two-file tasks

_add(_pair("wordfreq", "tokens", '''
"""Splitting text into lowercase word tokens."""

PUNCTUATION = ".,;:!?\\"'()"


def tokenize(text):
    """Words of text, lowercased, surrounding punctuation stripped; empty ones dropped."""
    words = []
    for raw in text.split():
        word = raw.strip(PUNCTUATION).lower()
        if word:
            words.append(word)
    return words


def is_stopword(word):
    return word in ("a", "an", "the", "and", "of", "to")
''', '''
"""Word frequencies of a text."""

from tokens import is_stopword, tokenize


def word_counts(text):
    counts = {}
    for word in tokenize(text):
        if not is_stopword(word):
            counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text, n):
    """The n most frequent words that are not stopwords, by count then alphabetically."""
    counts = word_counts(text)
    return sorted(counts, key=lambda word: (-counts[word], word))[:n]
''', '''
"""Tests for wordfreq."""
from wordfreq import top_words, word_counts


def test_word_counts():
    assert word_counts("The cat and the hat.") == {"cat": 1, "hat": 1}
    assert word_counts("(one) two") == {"one": 1, "two": 1}
    assert word_counts("") == {}


def test_top_words():
    assert top_words("b x b c c b", 2) == ["b", "c"]
    assert top_words("Hello, hello! World?", 5) == ["hello", "world"]
    assert top_words("to be or not to be", 1) == ["be"]
''', [("top_words", ('"Quoted" words, quoted!', 1), ["quoted"]),
      ("word_counts", ("An apple of the day",), {"apple": 1, "day": 1})]))

_add(_pair("geometry", "vecmath", '''
"""Vectors as tuples of numbers."""


def add(u, v):
    return tuple(a + b for a, b in zip(u, v))


def sub(u, v):
    return tuple(a - b for a, b in zip(u, v))


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def norm_sq(u):
    return dot(u, u)


def scale(u, k):
    return tuple(k * a for a in u)
''', '''
"""Points in the plane: distances, nearest points, centroids."""

from vecmath import add, norm_sq, scale, sub


def distance_sq(p, q):
    return norm_sq(sub(p, q))


def closest(points, target):
    """The point nearest to target (the first one on ties)."""
    best = None
    for point in points:
        if best is None or distance_sq(point, target) < distance_sq(best, target):
            best = point
    return best


def centroid(points):
    total = (0, 0)
    for point in points:
        total = add(total, point)
    return scale(total, 1 / len(points))
''', '''
"""Tests for geometry."""
from geometry import centroid, closest, distance_sq


def test_distance_sq():
    assert distance_sq((1, 2), (4, 6)) == 25
    assert distance_sq((0, 0), (0, 0)) == 0


def test_closest():
    assert closest([(0, 0), (5, 5), (1, 1)], (2, 2)) == (1, 1)
    assert closest([], (0, 0)) is None


def test_centroid():
    assert centroid([(0, 0), (2, 0), (2, 2), (0, 2)]) == (1.0, 1.0)
    assert centroid([(3, 6)]) == (3.0, 6.0)
''', [("closest", ([(1, 0), (0, 1)], (0, 0)), (1, 0)),
      ("centroid", ([(1, 1), (3, 3)],), (2.0, 2.0)), ("distance_sq", ((-1, -1), (2, 3)), 25)]))

_add(_pair("dayofyear", "dateparts", '''
"""Parsing ISO dates and calendar facts."""


def parse_date(text):
    """'2024-03-01' -> (2024, 3, 1)."""
    year, month, day = text.split("-")
    return int(year), int(month), int(day)


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def month_lengths(year):
    february = 29 if is_leap(year) else 28
    return [31, february, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
''', '''
"""Ordinal day numbers of ISO dates."""

from dateparts import month_lengths, parse_date


def day_of_year(text):
    year, month, day = parse_date(text)
    return sum(month_lengths(year)[:month - 1]) + day


def days_between(first, second):
    """Days from first to second, two dates of the same year."""
    return day_of_year(second) - day_of_year(first)
''', '''
"""Tests for dayofyear."""
from dayofyear import day_of_year, days_between


def test_day_of_year():
    assert day_of_year("2023-01-01") == 1
    assert day_of_year("2023-03-01") == 60
    assert day_of_year("2024-03-01") == 61
    assert day_of_year("1900-03-01") == 60
    assert day_of_year("2023-12-31") == 365
    assert day_of_year("2000-12-31") == 366


def test_days_between():
    assert days_between("2023-02-01", "2023-03-01") == 28
''', [("day_of_year", ("2024-12-31",), 366), ("days_between", ("2024-01-15", "2024-03-15"), 60),
      ("day_of_year", ("2023-07-04",), 185)]))

_add(_pair("syllables", "charclass", '''
"""Classifying letters (y counts as a vowel)."""

VOWELS = "aeiouy"


def is_vowel(char):
    return char.lower() in VOWELS


def is_consonant(char):
    return char.isalpha() and not is_vowel(char)
''', '''
"""Rough syllable counts and pig latin."""

from charclass import is_consonant, is_vowel


def count_syllables(word):
    """Groups of consecutive vowels, at least 1; a final silent 'e' does not count."""
    word = word.lower()
    groups = 0
    previous = False
    for char in word:
        current = is_vowel(char)
        if current and not previous:
            groups += 1
        previous = current
    if word.endswith("e") and groups > 1:
        groups -= 1
    return max(groups, 1)


def pig_latin(word):
    """Leading consonants moved to the end, followed by 'ay'."""
    i = 0
    while i < len(word) and is_consonant(word[i]):
        i += 1
    return word[i:] + word[:i] + "ay"
''', '''
"""Tests for syllables."""
from syllables import count_syllables, pig_latin


def test_count_syllables():
    assert count_syllables("banana") == 3
    assert count_syllables("make") == 1
    assert count_syllables("queue") == 1
    assert count_syllables("beautiful") == 3


def test_pig_latin():
    assert pig_latin("string") == "ingstray"
    assert pig_latin("apple") == "appleay"
    assert pig_latin("Chair") == "airChay"
    assert pig_latin("rhythm") == "ythmrhay"
''', [("count_syllables", ("education",), 4), ("pig_latin", ("glove",), "oveglay"),
      ("count_syllables", ("the",), 1)]))

_add(_pair("life", "gridutil", '''
"""Neighbourhoods in rectangular grids."""


def in_bounds(row, col, height, width):
    return 0 <= row < height and 0 <= col < width


def neighbours(row, col, height, width):
    """The up to 8 cells around (row, col) inside the grid, row by row."""
    cells = []
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            if (dr or dc) and in_bounds(row + dr, col + dc, height, width):
                cells.append((row + dr, col + dc))
    return cells
''', '''
"""Conway's Game of Life on a bounded grid of 0/1 cells."""

from gridutil import neighbours


def live_neighbours(grid, row, col):
    height, width = len(grid), len(grid[0])
    return sum(grid[r][c] for r, c in neighbours(row, col, height, width))


def step(grid):
    new = []
    for row in range(len(grid)):
        new_row = []
        for col in range(len(grid[0])):
            n = live_neighbours(grid, row, col)
            alive = n == 3 or (grid[row][col] == 1 and n == 2)
            new_row.append(1 if alive else 0)
        new.append(new_row)
    return new
''', '''
"""Tests for life."""
from life import live_neighbours, step


def test_live_neighbours():
    assert live_neighbours([[1, 1], [1, 0]], 1, 1) == 3
    assert live_neighbours([[1, 1], [1, 1]], 0, 0) == 3
    assert live_neighbours([[0, 1, 0], [1, 0, 1], [0, 1, 0]], 1, 1) == 4


def test_step():
    assert step([[0, 1, 0], [0, 1, 0], [0, 1, 0]]) == [[0, 0, 0], [1, 1, 1], [0, 0, 0]]
    assert step([[1, 1], [1, 1]]) == [[1, 1], [1, 1]]
    assert step([[1]]) == [[0]]
''', [("step", ([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],),
       [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]),
      ("live_neighbours", ([[1, 0, 1], [0, 0, 0], [1, 0, 1]], 1, 1), 4),
      ("live_neighbours", ([[1, 1, 1], [1, 1, 1], [1, 1, 1]], 0, 2), 3)]))

_add(_pair("selsort", "listutil", '''
"""Small list helpers."""


def argmin(values, start=0):
    """Index of the smallest value in values[start:] (the first one on ties)."""
    best = start
    for i in range(start + 1, len(values)):
        if values[i] < values[best]:
            best = i
    return best


def swap(values, i, j):
    values[i], values[j] = values[j], values[i]
''', '''
"""Selection sort and order statistics."""

from listutil import argmin, swap


def selection_sort(values):
    """A sorted copy of values."""
    out = list(values)
    for i in range(len(out)):
        swap(out, i, argmin(out, i))
    return out


def kth_smallest(values, k):
    """The k-th smallest value, k counted from 1."""
    return selection_sort(values)[k - 1]
''', '''
"""Tests for selsort."""
from selsort import kth_smallest, selection_sort


def test_selection_sort():
    assert selection_sort([3, 1, 2]) == [1, 2, 3]
    assert selection_sort([]) == []
    assert selection_sort([5, -1, 5, 0]) == [-1, 0, 5, 5]


def test_kth_smallest():
    assert kth_smallest([7, 3, 9, 1], 2) == 3
    assert kth_smallest([4], 1) == 4
''', [("selection_sort", ([9, 8, 7, 6, 5, 4, 3, 2, 1],), [1, 2, 3, 4, 5, 6, 7, 8, 9]),
      ("kth_smallest", ([2, 2, 1], 3), 2)]))

# held-out pairs

_add(_pair("invoice", "moneyfmt", '''
"""Formatting amounts of money."""


def group_thousands(digits):
    """'1234567' -> '1,234,567'."""
    groups = []
    while len(digits) > 3:
        groups.append(digits[-3:])
        digits = digits[:-3]
    groups.append(digits)
    return ",".join(reversed(groups))


def format_cents(cents, symbol="$"):
    sign = "-" if cents < 0 else ""
    whole, fraction = divmod(abs(cents), 100)
    return sign + symbol + group_thousands(str(whole)) + "." + "%02d" % fraction
''', '''
"""Invoice lines and totals."""

from moneyfmt import format_cents


def line_total(quantity, unit_cents):
    return quantity * unit_cents


def invoice_total(lines):
    """Sum of quantity times unit price over (name, quantity, unit_cents) lines."""
    return sum(line_total(quantity, cents) for _, quantity, cents in lines)


def render(lines):
    rows = [name + ": " + format_cents(line_total(q, c)) for name, q, c in lines]
    rows.append("total: " + format_cents(invoice_total(lines)))
    return "\\n".join(rows)
''', '''
"""Tests for invoice."""
from invoice import invoice_total, render


def test_invoice_total():
    assert invoice_total([("pen", 3, 150), ("book", 1, 1299)]) == 1749


def test_render():
    assert render([("pen", 3, 150)]) == "pen: $4.50\\ntotal: $4.50"
    assert render([("tv", 1, 99900)]) == "tv: $999.00\\ntotal: $999.00"
    assert render([("car", 1, 2500000)]) == "car: $25,000.00\\ntotal: $25,000.00"
    assert render([]) == "total: $0.00"
    assert render([("refund", 1, -5)]) == "refund: -$0.05\\ntotal: -$0.05"
''', [("render", ([("x", 1, 123456789)],), "x: $1,234,567.89\ntotal: $1,234,567.89"),
      ("render", ([("a", 2, 50), ("b", 1, 1)],), "a: $1.00\nb: $0.01\ntotal: $1.01")]))

_add(_pair("rpn", "stackops", '''
"""Binary operators of a stack calculator."""


def apply(operator, left, right):
    if operator == "+":
        return left + right
    if operator == "-":
        return left - right
    if operator == "*":
        return left * right
    if operator == "/":
        return left // right
    raise ValueError("unknown operator " + operator)


def is_operator(token):
    return token in ("+", "-", "*", "/")
''', '''
"""Evaluating integer expressions in reverse Polish notation."""

from stackops import apply, is_operator


def evaluate(expression):
    """'3 4 + 2 *' -> 14; '/' is floor division."""
    stack = []
    for token in expression.split():
        if is_operator(token):
            right = stack.pop()
            left = stack.pop()
            stack.append(apply(token, left, right))
        else:
            stack.append(int(token))
    return stack[-1]


def evaluate_all(expressions):
    return [evaluate(e) for e in expressions]
''', '''
"""Tests for rpn."""
from rpn import evaluate, evaluate_all


def test_evaluate():
    assert evaluate("3 4 +") == 7
    assert evaluate("3 4 + 2 *") == 14
    assert evaluate("10 3 -") == 7
    assert evaluate("7 2 /") == 3
    assert evaluate("5") == 5
    assert evaluate("2 3 4 * +") == 14


def test_evaluate_all():
    assert evaluate_all(["1 1 +", "6 3 /"]) == [2, 2]
''', [("evaluate", ("15 7 1 1 + - / 3 * 2 1 1 + + -",), 5), ("evaluate", ("-3 2 *",), -6),
      ("evaluate", ("9 2 -",), 7)]))

#: The held-out modules (split="test"); all others train.
TEST_SINGLE = ("durations", "brackets", "semver", "numranges", "luhn", "ordinals", "triangles",
               "leapyears")
TEST_PAIRS = ("invoice", "rpn")
SPLITS = {
    "train": (tuple(n for n in SINGLE if n not in TEST_SINGLE),
              tuple(n for n in PAIRS if n not in TEST_PAIRS)),
    "test": (TEST_SINGLE, TEST_PAIRS),
}
TASKS: dict[str, Task] = {**SINGLE, **PAIRS}

# ---------------------------------------------------------------------- tasks from a directory

#: Optional per-task settings in a task directory (load_task_directory).
TASK_FILE = "task.json"


def _task_error(path: str, message: str) -> ValueError:
    return ValueError(f"mini-SWE task directory {path}: {message}")


def load_task(path: str) -> tuple[Task, str]:
    """One task from a directory of your own code: its `*.py` files (flat, no packages), exactly
    one visible test file `test_*.py` of assert-style test functions, and optionally `task.json`:

        {"main": "<module the tests import>", "target": "<file the bug goes into>",
         "hidden": [["<function of main>", [args...], expected], ...], "split": "train"}

    With one source file it is both main and target; hidden cases default to none (then `submit`
    runs the visible tests only) and the split to "train". Hidden values must be literals (JSON
    values). The unmodified code must pass its visible tests and hidden cases (checked in this
    process, as for the bank's modules). Returns (task, split); ValueError naming the directory
    and the problem otherwise."""
    path = os.path.abspath(path)
    name = os.path.basename(path.rstrip(os.sep))
    if not os.path.isdir(path):
        raise _task_error(path, "not a directory")
    if name in TASKS:
        raise _task_error(path, f"the name {name!r} is a built-in module's; rename the directory")
    settings = {}
    settings_path = os.path.join(path, TASK_FILE)
    if os.path.exists(settings_path):
        try:
            with open(settings_path, encoding="utf-8") as f:
                settings = json.load(f)
        except (OSError, ValueError) as e:
            raise _task_error(path, f"{TASK_FILE} does not parse: {e}") from None
        if not isinstance(settings, dict):
            raise _task_error(path, f"{TASK_FILE} must hold a JSON object")
        unknown = sorted(set(settings) - {"main", "target", "hidden", "split"})
        if unknown:
            raise _task_error(path, f"{TASK_FILE} has unknown fields {unknown}")
    names = sorted(n for n in os.listdir(path)
                   if n.endswith(".py") and os.path.isfile(os.path.join(path, n)))
    test_files = [n for n in names if n.startswith("test_")]
    sources = [n for n in names if not n.startswith("test_")]
    if len(test_files) != 1:
        raise _task_error(path, f"expected exactly one test_*.py file, found {test_files}")
    if not sources:
        raise _task_error(path, "no source file (*.py other than the test file)")
    files = {}
    for n in names:
        try:
            with open(os.path.join(path, n), encoding="utf-8") as f:
                files[n] = _dedent(f.read())
            ast.parse(files[n], n)
        except (OSError, UnicodeDecodeError, SyntaxError) as e:
            raise _task_error(path, f"{n}: {e}") from None
    default = sources[0][:-3] if len(sources) == 1 else None
    main = settings.get("main", default)
    if main is None or f"{main}.py" not in sources:
        raise _task_error(path, f"main={main!r}: name the module the tests import, one of "
                                f"{[n[:-3] for n in sources]} (in {TASK_FILE})")
    target = settings.get("target", f"{main}.py")
    if target not in sources:
        raise _task_error(path, f"target={target!r}: expected one of {sources}")
    split = settings.get("split", "train")
    if split not in ("train", "test"):
        raise _task_error(path, f"split={split!r}: expected 'train' or 'test'")
    hidden = []
    for case in settings.get("hidden", []):
        if not (isinstance(case, list) and len(case) == 3 and isinstance(case[0], str)
                and isinstance(case[1], list)):
            raise _task_error(path, f"hidden case {case!r}: expected [function, [args...], "
                                    "expected]")
        hidden.append((case[0], tuple(case[1]), case[2]))
    ordered = tuple((n, files[n]) for n in _import_order(path, {n: files[n] for n in sources}))
    ordered += ((test_files[0], files[test_files[0]]),)
    task = Task(name, ordered, main, target, test_files[0], tuple(hidden), len(sources) > 1)
    outcome = run_in_process(task, task.sources, hidden=True)
    if outcome.looped or outcome.failed or outcome.hidden_failed:
        raise _task_error(path, "the unmodified code must pass its tests: "
                                f"failed {list(outcome.failed)}, {outcome.hidden_failed} hidden "
                                f"case(s) failed{', ran too long' if outcome.looped else ''}")
    return task, split


def _import_order(path: str, sources: dict[str, str]) -> list[str]:
    """The source files ordered so that each comes after the sibling modules it imports (tests
    load them in this order); ValueError on an import cycle."""
    stems = {n[:-3] for n in sources}
    needs = {}
    for n, text in sources.items():
        imported = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
        needs[n] = {f"{m}.py" for m in imported & stems} - {n}
    order: list[str] = []
    while len(order) < len(sources):
        ready = [n for n in sorted(sources) if n not in order and needs[n] <= set(order)]
        if not ready:
            cycle = sorted(n for n in sources if n not in order)
            raise _task_error(path, f"import cycle among {cycle}")
        order.extend(ready)
    return order


def load_task_directory(path: str) -> dict[str, tuple[Task, ...]]:
    """Every task under `path` (one subdirectory each, `load_task`), by split:
    {"train": (...), "test": (...)}. ValueError when there is none or one is malformed."""
    if not os.path.isdir(path):
        raise ValueError(f"mini-SWE task directory {path}: not a directory")
    out: dict[str, list[Task]] = {"train": [], "test": []}
    for entry in sorted(os.listdir(path)):
        if os.path.isdir(os.path.join(path, entry)) and not entry.startswith((".", "_")):
            task, split = load_task(os.path.join(path, entry))
            out[split].append(task)
    if not out["train"] and not out["test"]:
        raise ValueError(f"mini-SWE task directory {path}: no task subdirectory")
    return {k: tuple(v) for k, v in out.items()}

# ---------------------------------------------------------------------- mutations

OPERATORS = ("off_by_one", "flipped_comparison", "wrong_operator", "swapped_arguments",
             "wrong_constant", "dropped_branch", "wrong_return")


@dataclasses.dataclass(frozen=True)
class Mutation:
    """Lines start..end (1-based, inclusive) of `path` replaced by `new_lines`."""

    operator: str
    path: str
    start: int
    end: int
    old_lines: tuple[str, ...]
    new_lines: tuple[str, ...]
    description: str

    def apply(self, source: str) -> str:
        lines = source.split("\n")
        return "\n".join(lines[:self.start - 1] + list(self.new_lines) + lines[self.end:])


_COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
                 ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
                 ast.IsNot: "is not"}
_FLIPS = {"<": ("<=", ">="), "<=": ("<", ">"), ">": (">=", "<="), ">=": (">", "<"),
          "==": ("!=",), "!=": ("==",), "in": ("not in",), "not in": ("in",),
          "is": ("is not",), "is not": ("is",)}
_BINOP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
               ast.Mod: "%", ast.Pow: "**"}
_OPERATOR_SWAPS = {"+": ("-",), "-": ("+",), "*": ("+",), "/": ("//", "*"), "//": ("/", "%"),
                   "%": ("//",), "**": ("*",), "and": ("or",), "or": ("and",)}


def _middle_token(line: str, c0: int, c1: int, token: str) -> tuple[int, int] | None:
    """Columns of `token` (an operator, as a whole word for keywords) in line[c0:c1]: the text
    between two operands, which holds only the operator, spaces and parentheses."""
    middle = line[c0:c1]
    if middle.replace("(", "").replace(")", "").split() != token.split():
        return None
    # the operator is the middle with its parentheses and spaces stripped
    stripped = middle.strip(" ()")
    offset = middle.index(stripped)
    return c0 + offset, c0 + offset + len(stripped)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                out.add(id(body[0].value))
    return out


def _inside_fstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.update(id(n) for n in ast.walk(node))
    return out


def _wrong_constants(value) -> list:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return sorted({0, value + 2, 2 * value} - {value - 1, value, value + 1})
    if isinstance(value, float):
        return sorted({0.0, 2 * value} - {value})
    if isinstance(value, str):
        if not value:
            return [" "]
        if len(value) > 1:
            return [value[:-1]]
        swaps = {" ": "_", ",": ";", "-": "_", "_": "-", ".": ",", ";": ",", "=": ":", "$": "#"}
        if value in swaps:
            return [swaps[value]]
        if value.isalpha():
            return [value.swapcase()]
        if value.isdigit():
            return [str((int(value) + 5) % 10)]
        return ["?"]
    return []


def _candidates(path: str, source: str) -> list[Mutation]:
    """Every candidate single-site mutation of `source` (not yet checked against the tests)."""
    tree = ast.parse(source)
    lines = source.split("\n")
    skip = _docstring_nodes(tree) | _inside_fstrings(tree)
    parents = {}
    functions = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for sub in ast.walk(node):
                functions.setdefault(id(sub), node)
    out: list[Mutation] = []

    def text(node) -> str:
        return lines[node.lineno - 1][node.col_offset:node.end_col_offset]

    def one_line(node) -> bool:
        return node.lineno == node.end_lineno

    def replace(operator, line_no, c0, c1, new, what):
        line = lines[line_no - 1]
        new_line = line[:c0] + new + line[c1:]
        if new_line != line:
            out.append(Mutation(operator, path, line_no, line_no, (line,), (new_line,),
                                f"{what} on line {line_no}"))

    def drop(operator, first, last, what):
        out.append(Mutation(operator, path, first, last, tuple(lines[first - 1:last]), (),
                            f"{what} (lines {first}-{last})"))

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and one_line(node):
            value = node.value
            if isinstance(value, int) and not isinstance(value, bool):
                for new in (value + 1, value - 1):
                    replace("off_by_one", node.lineno, node.col_offset, node.end_col_offset,
                            repr(new), f"{value} -> {new}")
            for new in _wrong_constants(value):
                literal = repr(new)
                if isinstance(new, str) and text(node).startswith('"'):
                    literal = json.dumps(new)  # keep the module's quote style
                replace("wrong_constant", node.lineno, node.col_offset, node.end_col_offset,
                        literal, f"constant {value!r} -> {new!r}")
        bounds = []
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "range" and node.args):
            bounds.append(node.args[1] if len(node.args) > 1 else node.args[0])
        if isinstance(node, ast.Slice):
            bounds += [b for b in (node.lower, node.upper) if b is not None]
        for bound in bounds:
            if isinstance(bound, ast.Constant) or not one_line(bound) or id(bound) in skip:
                continue
            atomic = isinstance(bound, (ast.Name, ast.Call, ast.Attribute, ast.Subscript))
            body = text(bound) if atomic else f"({text(bound)})"
            for sign in ("+", "-"):
                replace("off_by_one", bound.lineno, bound.col_offset, bound.end_col_offset,
                        f"{body} {sign} 1", f"bound {text(bound)} {sign} 1")
        if isinstance(node, ast.Compare) and one_line(node):
            operands = [node.left] + node.comparators
            for i, op in enumerate(node.ops):
                token = _COMPARE_TEXT[type(op)]
                span = _middle_token(lines[node.lineno - 1], operands[i].end_col_offset,
                                     operands[i + 1].col_offset, token)
                if span is None:
                    continue
                for new in _FLIPS[token]:
                    replace("flipped_comparison", node.lineno, *span, new, f"{token} -> {new}")
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and one_line(node):
            token = _BINOP_TEXT.get(type(node.op))
            left = node.left if isinstance(node, ast.BinOp) else node.target
            right = node.right if isinstance(node, ast.BinOp) else node.value
            if token is not None:
                full = token if isinstance(node, ast.BinOp) else token + "="
                span = _middle_token(lines[node.lineno - 1], left.end_col_offset,
                                     right.col_offset, full)
                for new in _OPERATOR_SWAPS.get(token, ()) if span else ():
                    new_full = new if isinstance(node, ast.BinOp) else new + "="
                    replace("wrong_operator", node.lineno, *span, new_full,
                            f"{full} -> {new_full}")
        if isinstance(node, ast.BoolOp) and one_line(node):
            token = "and" if isinstance(node.op, ast.And) else "or"
            for a, b in zip(node.values, node.values[1:]):
                span = _middle_token(lines[node.lineno - 1], a.end_col_offset, b.col_offset, token)
                if span:
                    replace("wrong_operator", node.lineno, *span, _OPERATOR_SWAPS[token][0],
                            f"{token} -> {_OPERATOR_SWAPS[token][0]}")
        if (isinstance(node, ast.Call) and one_line(node) and len(node.args) >= 2
                and not any(isinstance(a, ast.Starred) for a in node.args[:2])):
            a, b = node.args[0], node.args[1]
            if text(a) != text(b):
                line = lines[node.lineno - 1]
                swapped = text(b) + line[a.end_col_offset:b.col_offset] + text(a)
                replace("swapped_arguments", node.lineno, a.col_offset, b.end_col_offset,
                        swapped, f"arguments {text(a)}, {text(b)} swapped")
        if isinstance(node, ast.FunctionDef) and len(node.args.args) >= 2:
            a, b = node.args.args[0], node.args.args[1]
            if a.lineno == b.lineno == node.lineno and a.annotation is None:
                line = lines[node.lineno - 1]
                swapped = b.arg + line[a.end_col_offset:b.col_offset] + a.arg
                replace("swapped_arguments", node.lineno, a.col_offset, b.end_col_offset,
                        swapped, f"parameters of {node.name} swapped")
        if isinstance(node, ast.If):
            parent = parents.get(id(node))
            header = lines[node.lineno - 1].lstrip()
            siblings = getattr(parent, "body", []) + getattr(parent, "orelse", [])
            if header.startswith("if ") and not node.orelse and len(siblings) > 1 \
                    and node in getattr(parent, "body", []):
                drop("dropped_branch", node.lineno, node.end_lineno, "if statement removed")
            if header.startswith("elif "):
                drop("dropped_branch", node.lineno, node.body[-1].end_lineno, "elif removed")
            if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
                                    and lines[node.orelse[0].lineno - 1].lstrip()
                                    .startswith("elif ")):
                else_line = node.orelse[0].lineno - 1
                if lines[else_line - 1].strip() == "else:":
                    drop("dropped_branch", else_line, node.orelse[-1].end_lineno,
                         "else clause removed")
        if isinstance(node, ast.IfExp) and one_line(node):
            for branch in (node.body, node.orelse):
                replace("dropped_branch", node.lineno, node.col_offset, node.end_col_offset,
                        text(branch), f"conditional expression -> {text(branch)}")
        if isinstance(node, ast.Return) and node.value is not None and one_line(node.value):
            value = node.value
            function = functions.get(id(node))
            news = []
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                news.append(repr(not value.value))
            elif isinstance(value, ast.Name) and function is not None:
                local = [a.arg for a in function.args.args]
                local += [n.id for n in ast.walk(function)
                          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
                news += sorted(set(local) - {value.id})[:3]
            elif isinstance(value, (ast.Compare, ast.BoolOp)):
                news.append(f"not ({text(value)})")
            elif isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
                news.append(text(value.operand))
            elif function is not None and function.args.args:
                news.append(function.args.args[0].arg)
            for new in news:
                replace("wrong_return", value.lineno, value.col_offset, value.end_col_offset,
                        new, f"return {text(value)} -> return {new}")
    return out


# ---------------------------------------------------------------------- running tests in process

#: Line events a test run may take in process before it counts as looping.
STEP_BUDGET = 200_000


class _Budget(BaseException):
    """Raised by the tracer when a run exceeds STEP_BUDGET line events."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    hidden_failed: int
    looped: bool

    @property
    def ok(self) -> bool:
        return not self.failed and not self.hidden_failed and not self.looped


def strict_equal(a, b) -> bool:
    """Equality that also requires equal types, recursively (a hidden case's check: an object
    whose __eq__ always answers True does not pass)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return (len(a) == len(b) and all(strict_equal(k, k) for k in a)
                and all(k in b and strict_equal(a[k], b[k]) for k in a))
    return bool(a == b)


_RUN_LOCK = threading.Lock()


@functools.cache
def _compiled(source: str, filename: str):
    return compile(source, filename, "exec")


def run_in_process(task: Task, sources: dict[str, str], hidden: bool = False) -> Outcome:
    """Runs the task's visible test functions (and with `hidden`, its hidden cases) against
    `sources` (file name -> source) in this process, with a line-event budget. Only for
    trusted code, the bank's modules, a user's own task directories (load_task) and their
    mutants: model-written code runs in the sandbox."""
    passed, failed, hidden_failed, looped = [], [], 0, False
    names = [name for name in task.source_files]
    with _RUN_LOCK:
        saved = {n[:-3]: sys.modules.get(n[:-3]) for n in names}
        events = [0]

        def tracer(frame, event, arg):
            events[0] += 1
            if events[0] > STEP_BUDGET:
                raise _Budget
            return tracer

        old_trace = sys.gettrace()
        sys.settrace(tracer)
        try:
            modules = {}
            try:
                for name in names:  # imported modules first (helper, then main)
                    module = types.ModuleType(name[:-3])
                    module.__file__ = name
                    sys.modules[name[:-3]] = module
                    # the bank's own modules and mutants: trusted code
                    exec(_compiled(sources[name], name), module.__dict__)  # noqa: S102
                    modules[name] = module
                namespace = {"__name__": task.test_file[:-3]}
                exec(_compiled(task.sources[task.test_file], task.test_file),  # noqa: S102
                     namespace)
            except _Budget:
                raise
            except Exception:  # noqa: BLE001 - a broken module fails every test
                return Outcome((), ("<collection>",), len(task.hidden) if hidden else 0, False)
            for key, value in list(namespace.items()):
                if key.startswith("test") and callable(value):
                    try:
                        value()
                        passed.append(key)
                    except _Budget:
                        raise
                    except Exception:  # noqa: BLE001
                        failed.append(key)
            if hidden:
                main = modules[f"{task.main}.py"]
                for function, args, expected in task.hidden:
                    try:
                        result = getattr(main, function)(*copy.deepcopy(args))
                        hidden_failed += not strict_equal(result, expected)
                    except _Budget:
                        raise
                    except Exception:  # noqa: BLE001
                        hidden_failed += 1
        except _Budget:
            looped = True
        finally:
            sys.settrace(old_trace)
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
    return Outcome(tuple(passed), tuple(failed), hidden_failed, looped)


_VALID: dict[tuple, tuple[tuple[Mutation, tuple[str, ...]], ...]] = {}
_VALID_LOCK = threading.Lock()


def valid_mutations(task: Task) -> tuple[tuple[Mutation, tuple[str, ...]], ...]:
    """The task's kept mutations (module docstring) with the visible tests each makes fail, in a
    fixed order; computed once per task and process."""
    key = (task.name, task.files, task.target)
    if key in _VALID:
        return _VALID[key]
    with _VALID_LOCK:
        if key in _VALID:
            return _VALID[key]
        source = task.sources[task.target]
        original = ast.dump(ast.parse(source))
        kept = []
        seen = set()
        for mutation in _candidates(task.target, source):
            mutant = mutation.apply(source)
            if mutant in seen:
                continue
            seen.add(mutant)
            try:
                if ast.dump(ast.parse(mutant)) == original:
                    continue
            except SyntaxError:
                continue
            outcome = run_in_process(task, {**task.sources, task.target: mutant})
            if outcome.looped or not outcome.failed:
                continue
            kept.append((mutation, outcome.failed))
        _VALID[key] = tuple(kept)
        return _VALID[key]


def by_operator(task: Task) -> dict[str, list[tuple[Mutation, tuple[str, ...]]]]:
    out: dict[str, list] = {op: [] for op in OPERATORS}
    for mutation, failing in valid_mutations(task):
        out[mutation.operator].append((mutation, failing))
    return {op: v for op, v in out.items() if v}

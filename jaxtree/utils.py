"""Small host-side helpers shared across the library and the launch jobs."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Sequence

from tqdm import tqdm


def report(message: str) -> None:
    """One line on stderr for an event a user should see (a resume, a skipped update, a saved
    checkpoint), written around any progress bar; details stay in absl's INFO log."""
    tqdm.write(message, file=sys.stderr)


def check_writable(directory: str) -> None:
    """Creates `directory` if needed and a file in it (then removes it); raises OSError when
    either fails. Permission bits alone do not tell: root passes os.access everywhere, yet /proc
    and read-only mounts refuse new files."""
    os.makedirs(directory, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".jaxtree-write-check-"):
        pass


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= n (padding widths, row counts)."""
    return -(-int(n) // multiple) * multiple


def format_cell(value) -> str:
    """Table cell text: floats with 2 decimals below 100, thousands separators above."""
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Prints and returns a Markdown table (cells through `format_cell`)."""
    cells = [[str(h) for h in headers]] + [[format_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    text = "\n".join(lines)
    print(text)
    return text

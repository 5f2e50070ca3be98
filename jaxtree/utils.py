"""Small host-side helpers shared across the library and the launch jobs."""

from __future__ import annotations

import errno
import glob
import os
import platform
import shutil
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


def power_of_two_at_least(n: int, minimum: int = 1) -> int:
    """The smallest power of two >= max(n, minimum): shape buckets that keep the number of
    compiled programs logarithmic in the largest size."""
    return max(minimum, 1 << max(0, int(n) - 1).bit_length())


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


# How a full disk reads in TensorStore's errors (and orbax's error logs of them) (a ValueError: RESOURCE_EXHAUSTED ... "No space
# left on device [os_error_code='28']"), which orbax raises for the array items.
NO_SPACE_TEXT = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT),
                  f"os_error_code='{errno.ENOSPC}'")


def no_space(error: BaseException) -> bool:
    """Whether `error` or one in its chain of causes is a full disk ('no space left on device'
    or 'disk quota exceeded'): an OSError for orbax's JSON items, TensorStore's ValueError for
    the arrays, each wrapped in orbax's own exceptions."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(error) for text in NO_SPACE_TEXT):
            return True
        error = error.__cause__ or error.__context__
    return False


def free_space(path: str) -> str:
    """The free space of the filesystem holding `path` (or its nearest existing parent)."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        free = shutil.disk_usage(path or "/").free
    except OSError:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if free < 1024 or unit == "GiB":
            return f"{free:.0f} {unit}" if unit == "bytes" else f"{free:.1f} {unit}"
        free /= 1024
    return "unknown"


def processor() -> dict[str, str]:
    """The processor floats are computed on: {'processor': its model name, 'arch', 'simd': its
    vector extensions, 'caches': its data cache sizes}, as Linux reports them (the platform's
    names elsewhere). XLA:CPU picks vector widths and block sizes by these, so two machines
    give bit-identical runs only when they agree on them (docs/design.md)."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = value.split()
                    break
    except OSError:
        pass
    caches = []
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(index, "level")) as level, \
                    open(os.path.join(index, "type")) as kind, \
                    open(os.path.join(index, "size")) as size:
                kind_name = kind.read().strip()
                if kind_name != "Instruction":
                    caches.append(f"L{level.read().strip()}{'d' if kind_name == 'Data' else ''} "
                                  f"{size.read().strip()}")
        except OSError:
            continue
    simd = sorted(f for f in flags if f.startswith(("sse", "avx", "fma", "amx")))
    return {"processor": model, "arch": platform.machine(), "simd": " ".join(simd),
            "caches": ", ".join(caches)}

"""What the launch jobs share: one-line user errors (bad flags, config values and paths)."""

from __future__ import annotations

import re
import sys

from jaxtree.config import ConfigError
from jaxtree.experiment import moved_message

# Exit status of a job stopped by a user error (a bad flag, config value or path): absl's, for
# usage errors.
USAGE_ERROR = 2


def fail(message: str) -> None:
    """Ends the job with a one-line message on stderr and exit status 2 (no traceback)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(USAGE_ERROR)


def _override_error(argv: list[str], message: str) -> str:
    """The message of a failed flag parse, made specific: a `--config.x.y` override of the old
    flat layout is named with its new place, an unknown field by its config path."""
    paths = [arg[len("--config."):].split("=", 1)[0] for arg in argv
             if arg.startswith("--config.")]
    for path in paths:
        parts = path.split(".")
        for end in range(len(parts), 0, -1):
            moved = moved_message(".".join(parts[:end]))
            if moved:
                return f"config.{'.'.join(parts[:end])} {moved}"
    quoted = re.match(r"^\W*(\w+)\W*(.*)$", message)
    if quoted:
        key, rest = quoted.groups()
        unknown = [path for path in paths if f".{key}." in f".{path}."]
        if unknown:
            return f"config.{unknown[0]}: unknown field" + (f" ({rest})" if rest else "")
    return f"invalid command-line flag or config override: {message}"


def run_app(main) -> None:
    """`absl.app.run(main)` where every user error ends the job with one line and exit status
    2: a bad `--config.x.y=...` override (unknown field, wrong type; fields of the old flat
    layout are named with their new place), an invalid config value (ConfigError), or a
    missing / corrupt checkpoint or file (FileNotFoundError)."""
    from absl import app, flags

    def parse(argv):
        try:
            return flags.FLAGS(argv)
        except Exception as e:  # noqa: BLE001 - any parse failure is the user's flag, report it
            message = str(e).strip("'\"").replace("\\n", " ").replace("\\'", "'")
            fail(_override_error(argv, message))

    def guarded(argv):
        try:
            return main(argv)
        except ConfigError as e:
            fail(str(e))
        except FileNotFoundError as e:
            fail(str(e))

    app.run(guarded, flags_parser=parse)

"""The config reference in configs/README.md, generated from the typed config sections.

    python -m launch.config_reference            # rewrite the reference in configs/README.md
    python -m launch.config_reference --check    # exit 1 if it is out of date

Every field of every section (and the settings of every registered rollout strategy, reward term,
advantage function and group filter) with its type, default and meaning, from the declarations
in the modules that own them (`jaxtree.experiment.reference_markdown`).
"""

from __future__ import annotations

import os

from absl import flags

from jaxtree.experiment import REFERENCE_BEGIN, REFERENCE_END, reference_markdown
from launch.common import run_app

_CHECK = flags.DEFINE_boolean("check", False, "Only check that the reference is current.")

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                      "README.md")


def updated_readme(text: str) -> str:
    """`text` (the README) with its generated block replaced by the current reference (appended
    when it has none)."""
    if REFERENCE_BEGIN in text and REFERENCE_END in text:
        head, rest = text.split(REFERENCE_BEGIN, 1)
        tail = rest.split(REFERENCE_END, 1)[1].lstrip("\n")
        return head + reference_markdown() + tail
    return text.rstrip("\n") + "\n\n## Config reference\n\n" + reference_markdown()


def main(argv):
    del argv
    with open(README) as f:
        current = f.read()
    wanted = updated_readme(current)
    if _CHECK.value:
        if current != wanted:
            raise SystemExit(f"{README} is out of date: run python -m launch.config_reference")
        print(f"{README} is current")
        return
    with open(README, "w") as f:
        f.write(wanted)
    print(f"wrote {README}")


if __name__ == "__main__":
    run_app(main)

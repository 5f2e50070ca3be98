"""Learning curves of a training run as PNG files.

    python -m launch.plot --workdir=/tmp/jaxtree_fl [--output=DIR]

Reads <workdir>/metrics.jsonl and writes one PNG per panel into <workdir>/plots (or --output):
success rate (rollouts and held-out evaluation), reward, entropy, KL to the reference, response
length and gradient norm, plus `curves.png` with all panels together.
"""

from __future__ import annotations

from absl import flags

from jaxtree.train.plots import plot
from launch.common import fail, run_app

_WORKDIR = flags.DEFINE_string("workdir", None, "Training workdir (holds metrics.jsonl).")
_OUTPUT = flags.DEFINE_string("output", None, "Directory for the PNGs (default <workdir>/plots).")


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        fail("--workdir is required")
    paths = plot(_WORKDIR.value, _OUTPUT.value)  # a missing metrics.jsonl: one line, status 2
    print("wrote " + ", ".join(paths))


if __name__ == "__main__":
    run_app(main)

"""Learning curves of a training run as PNG files.

    python -m launch.plot --workdir=/tmp/jaxtree_fl [--output=DIR]

Reads <workdir>/metrics.jsonl and writes one PNG per panel into <workdir>/plots (or --output):
success rate (rollouts and held-out evaluation), reward, entropy, KL to the reference, response
length and gradient norm, plus `curves.png` with all panels together.
"""

from __future__ import annotations

from absl import app, flags

from jaxtree.train.plots import plot

_WORKDIR = flags.DEFINE_string("workdir", None, "Training workdir (holds metrics.jsonl).")
_OUTPUT = flags.DEFINE_string("output", None, "Directory for the PNGs (default <workdir>/plots).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        raise app.UsageError("--workdir is required")
    try:
        paths = plot(_WORKDIR.value, _OUTPUT.value)
    except FileNotFoundError as e:
        raise app.UsageError(str(e)) from e
    print("wrote " + ", ".join(paths))


if __name__ == "__main__":
    app.run(main)

"""A policy as a Hugging Face model directory (safetensors, tokenizer files, chat template,
generation config), loadable by `transformers.AutoModelForCausalLM` and `AutoTokenizer`.

    python -m launch.export --workdir=/tmp/jaxtree_fl --out=/tmp/fl_hf [--step=40]
    python -m launch.export --model=smollm2-135m-instruct --out=/tmp/smollm2_hf

`--workdir` takes a training (or warm-start) workdir, its newest checkpoint unless `--step`
names one; `--model` takes anything `--config.model.name` does (a released model's name, a GGUF
file, a Hugging Face directory), e.g. to turn a GGUF file into safetensors once. Byte-tokenizer
models get an equivalent byte-level BPE tokenizer (same ids, same special tokens and chat format).
"""

from __future__ import annotations

import os

from absl import flags

from jaxtree.checkpoints import CHECKPOINTS, complete_steps
from jaxtree.policy import export_policy, load_policy
from launch.common import fail, load_named_policy, run_app

_WORKDIR = flags.DEFINE_string("workdir", None, "Training or warm-start workdir to export from.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step to export (default: the newest).")
_MODEL = flags.DEFINE_string("model", None, "A policy spec instead of --workdir: released model "
                             "name, .gguf file, Hugging Face or jaxtree checkpoint directory.")
_OUT = flags.DEFINE_string("out", None, "Directory to write (created; existing files replaced).")


def _source() -> tuple[str, str]:
    """(flag, policy spec) of what to export."""
    if (_WORKDIR.value is None) == (_MODEL.value is None):
        fail("give exactly one of --workdir and --model")
    if _MODEL.value is not None:
        if _STEP.value is not None:
            fail("--step goes with --workdir")
        return "--model", _MODEL.value
    workdir = _WORKDIR.value
    steps = complete_steps(workdir)
    if not steps:
        fail(f"--workdir: no complete checkpoint under {os.path.join(workdir, CHECKPOINTS)}")
    if _STEP.value is None:
        return "--workdir", workdir
    if _STEP.value not in steps:
        fail(f"--step: {workdir} has no checkpoint {_STEP.value} (it has {steps})")
    return "--step", os.path.join(workdir, CHECKPOINTS, str(_STEP.value))


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if not _OUT.value:
        fail("--out is required")
    flag, spec = _source()
    policy = load_named_policy(flag, lambda: load_policy(spec))
    if os.path.exists(_OUT.value) and not os.path.isdir(_OUT.value):
        fail(f"--out: {_OUT.value} exists and is not a directory")
    export_policy(policy, _OUT.value)
    print(f"export: {policy.source} -> {_OUT.value} ({policy.config.model_type}, "
          f"vocab {policy.config.vocab_size}, {policy.config.num_layers} layers)")


if __name__ == "__main__":
    run_app(main)

"""A policy as a Hugging Face model directory (safetensors, tokenizer files, chat template,
generation config), loadable by `transformers.AutoModelForCausalLM` and `AutoTokenizer`.

    python -m launch.export --workdir=/tmp/jaxtree_fl --out=/tmp/fl_hf [--step=40]
    python -m launch.export --model=smollm2-135m-instruct --out=/tmp/smollm2_hf

`--workdir` takes a training (or warm-start) workdir, its newest checkpoint unless `--step`
names one; `--model` takes anything `--config.model.name` does (a released model's name, a GGUF
file, a Hugging Face directory), e.g. to turn a GGUF file into safetensors once. Byte-tokenizer
models get an equivalent byte-level BPE tokenizer (same ids, same special tokens and chat format).

A LoRA run (`model.lora.rank` > 0) is written twice: the merged model (base + adapters) as the
directory itself, and the adapter alone in the PEFT format under `OUT/adapter`
(`adapter_config.json` + `adapter_model.safetensors`, for `peft.PeftModel.from_pretrained`),
whose base is the base's own Hugging Face directory, or the base exported to `OUT/base` when it
is a preset, a GGUF file or a jaxtree checkpoint (a LoRA warm start).

`--out` is a fresh directory or an earlier export: one that holds a job's files (a run's
`config.json`, `checkpoints/`, `metrics.jsonl`, a lock...), e.g. the run's own workdir, is
refused, since the export would replace the run's record.
"""

from __future__ import annotations

import json
import os

from absl import flags

from jaxtree.checkpoints import CHECKPOINTS, complete_steps
from jaxtree.policy import export_lora_adapter, export_policy, load_policy
from jaxtree.train.jobs import PRM_OUTPUTS, SFT_OUTPUTS, TRAIN_OUTPUTS
from jaxtree.train.workdir import CONFIG_FILE, LOCK_FILE
from launch.common import fail, load_named_policy, run_app

_WORKDIR = flags.DEFINE_string("workdir", None, "Training or warm-start workdir to export from.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step to export (default: the newest).")
_MODEL = flags.DEFINE_string("model", None, "A policy spec instead of --workdir: released model "
                             "name, .gguf file, Hugging Face or jaxtree checkpoint directory.")
_OUT = flags.DEFINE_string("out", None, "Directory to write (created; an earlier export's files "
                           "replaced; a job's workdir refused).")

# what a job leaves in its workdir besides its config record: an export must not go there
_JOB_FILES = sorted((set(TRAIN_OUTPUTS) | set(SFT_OUTPUTS) | set(PRM_OUTPUTS) | {LOCK_FILE})
                    - {CONFIG_FILE})


def _job_file(out: str) -> str | None:
    """The first file of a job's workdir in `out` (its config record, whose config.json is not
    a model's, or any of _JOB_FILES), or None."""
    for name in _JOB_FILES:
        if os.path.lexists(os.path.join(out, name)):
            return name
    config = os.path.join(out, CONFIG_FILE)
    if os.path.lexists(config):
        try:
            with open(config, "rb") as f:
                record = json.load(f)
        except (OSError, ValueError):
            return CONFIG_FILE  # not a model's either: never overwrite what cannot be read
        if not (isinstance(record, dict) and "model_type" in record):
            return CONFIG_FILE
    return None


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
    out = _OUT.value
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"--out: {out} exists and is not a directory")
    if os.path.isdir(out) and (found := _job_file(out)):
        fail(f"--out: {out} holds a job's files ({found}), which the export would replace; "
             "give a fresh directory")
    flag, spec = _source()
    policy = load_named_policy(flag, lambda: load_policy(spec))
    export_policy(policy, out)
    print(f"export: {policy.source} -> {out} ({policy.config.model_type}, "
          f"vocab {policy.config.vocab_size}, {policy.config.num_layers} layers)")
    adapter = export_lora_adapter(spec, out)
    if adapter is not None:
        print(f"export: its LoRA adapter (PEFT) -> {adapter}")


if __name__ == "__main__":
    run_app(main)

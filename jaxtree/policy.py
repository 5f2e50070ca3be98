"""Resolving a `--model` / `--checkpoint` argument or the `model` config section into a policy
(architecture, params, tokenizer).

A LoRA run's checkpoint holds adapters and names its base (`jaxtree.models.lora.describe`):
`load_policy` loads that base again, checks it is the same (its content hash), and returns the
merged model, so every job that loads a policy (evaluate, sample, serve, export, the RL run
after a LoRA warm start) sees base + adapters."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

import jax
import numpy as np

from jaxtree import models
from jaxtree.config import ConfigError, Section, non_negative, one_of, option
from jaxtree.models.gguf_io import is_gguf_path
from jaxtree.models.lora import (TARGETS, LoraConfig, LoraParams, content_hash, describe,
                                 merge)
from jaxtree.models.named import NAMED_MODELS, resolve_named_model
from jaxtree.models.token_scores import TrainingMemory
from jaxtree.models.presets import BYTE_VOCAB_PRESETS, PRESETS
from jaxtree.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, load_tokenizer
from jaxtree.checkpoints import (CHECKPOINTS, BaseMismatchError, CheckpointNotFoundError,
                                 is_policy_checkpoint, load_policy_checkpoint,
                                 read_policy_metadata, workdir_of)

# Where a job keeps a copy of its policy's Hugging Face tokenizer (relative to the workdir), so
# its checkpoints stay loadable when the base model moves or is deleted.
TOKENIZER_DIR = "tokenizer"


@dataclasses.dataclass
class Policy:
    config: models.ModelConfig
    params: dict
    tokenizer: Tokenizer
    source: str  # 'random init (preset NAME, seed S)' or the checkpoint directory
    tokenizer_spec: str = "byte"  # 'byte' or the tokenizer directory (recorded in checkpoints)
    # train LoRA adapters over `params` instead of `params` themselves (ModelSpec.load(training=
    # True) with model.lora.rank > 0); None: the whole model trains
    lora: LoraConfig | None = None
    # how `load_policy` finds these params again: {'name': preset or absolute path, 'init_seed'
    # (presets)}, and 'sha256' (the identity of a merged LoRA checkpoint)
    origin: dict = dataclasses.field(default_factory=dict)

    def base_record(self) -> dict:
        """These params as a LoRA base: how to load them and their content hash."""
        return {**self.origin, "param_dtype": self.config.param_dtype,
                "sha256": self.origin.get("sha256") or content_hash(self.params)}

    def lora_metadata(self) -> dict:
        """{'lora': settings and base} for the checkpoints of a LoRA run, {} otherwise."""
        return {} if self.lora is None else {"lora": describe(self.lora, self.base_record())}


@dataclasses.dataclass(frozen=True)
class ModelSpec(Section):
    """Config section `model`: the policy training or evaluation starts from."""

    name: str = option("tiny", "a preset (random init), a released model's name "
                       "(smollm2-135m-instruct, from $JAXTREE_MODEL_DIR), a jaxtree checkpoint, a "
                       "Hugging Face checkpoint directory or a .gguf file")
    dtype: str = option("", "computation dtype ('' = float32 on CPU, bfloat16 on accelerators)",
                        check=one_of(("", "float32", "bfloat16")))
    param_dtype: str = option(
        "", "storage dtype of the parameters ('' = float32 in the jobs that train them (warm "
        "start, RL, PRM fitting: AdamW's small updates vanish in bfloat16 weights), the "
        "computation dtype in the jobs that only sample)", check=one_of(("", "float32", "bfloat16")))
    init_seed: int = option(0, "seed of a preset's random initialisation")
    remat: bool = option(False, "training: recompute each block's activations in the backward "
                         "pass instead of storing them (less memory, ~1/3 more compute)")
    remat_policy: str = option(
        "everything", "training, with remat: what each block keeps for the backward pass "
        "('everything' is recomputed; 'attention' keeps the projections' outputs and recomputes "
        "only the attention's scores and softmax: more memory, no second pass through the "
        "matmuls)", check=one_of(("everything", "attention")))
    logits_chunk: int = option(0, "training: positions per chunk of the vocabulary projection "
                               "in the losses, recomputed in the backward pass (0 = all at "
                               "once; 256 keeps a 49k vocabulary's logits small)",
                               check=non_negative())
    action_logits: bool = option(
        True, "training: the RL update projects onto the vocabulary only at the action tokens "
        "whose log-probs the loss needs (in slots per row, a power of two), not at prompt and "
        "observation tokens (the same loss up to float rounding; false: every position)")
    cpu_library_fusions: bool = option(
        True, "training, on a CPU: compile the RL update's programs (its steps, the reference and "
        "sampler-check log-probs) with XLA:CPU's library (YNNPACK) fusions, XLA's default (false: "
        "its own emitters, the same numbers up to float rounding; on SmolLM2-135M the "
        "prefix-shared update 7% faster, the per-trajectory one and the reference pass a few "
        "percent; sampling keeps the default either way)")
    lora: LoraConfig = LoraConfig()

    def training_memory(self) -> TrainingMemory:
        """The remat / logits-chunk / action-only trade-offs of the update and warm-start
        steps."""
        return TrainingMemory(remat=self.remat, remat_policy=self.remat_policy,
                              logits_chunk=self.logits_chunk,
                              action_only=self.action_logits)

    def check(self):
        if not self.name:
            raise ConfigError("name", "'' must name a preset or a checkpoint directory")

    def tokenizer(self) -> Tokenizer:
        """The tokenizer of the policy `name` names, without loading its parameters (for the
        checks a job makes before any work); a ConfigError naming `model.name` if it names
        nothing."""
        try:
            return load_policy_tokenizer(self.name)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError("model.name", f"{self.name!r}: {e}") from e

    def load(self, spec: str | None = None, training: bool = False) -> "Policy":
        """The policy `name` names, or `spec` (e.g. a warm-start checkpoint) in its place with
        this section's dtypes; `training`: a job that updates the parameters, which keeps them
        in float32 unless `param_dtype` says otherwise (bfloat16 computation on an accelerator
        still applies). A `name` that names nothing is a ConfigError naming `model.name`;
        errors of an explicit `spec` propagate as they are. With `model.lora.rank` > 0 a
        training job's policy is a frozen base (stored in `lora.base_dtype` when given) whose
        adapters train (`Policy.lora`)."""
        lora = self.lora if training and self.lora.enabled else None
        param_dtype = self.param_dtype or ("float32" if training else None)
        dtypes = dict(dtype=self.dtype or None, seed=self.init_seed,
                      param_dtype=(lora and lora.base_dtype) or param_dtype)
        if spec is not None:
            return dataclasses.replace(load_policy(spec, **dtypes), lora=lora)
        try:
            policy = load_policy(self.name, **dtypes)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError("model.name", f"{self.name!r}: {e}") from e
        return dataclasses.replace(policy, lora=lora)


def load_policy_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer `load_policy(spec)` would come with, without its parameters."""
    spec = resolve_named_model(spec)
    if spec in PRESETS:
        if spec not in BYTE_VOCAB_PRESETS:
            raise ValueError(f"preset {spec!r} has no built-in tokenizer; load a checkpoint "
                             "directory with its tokenizer files instead")
        return ByteTokenizer()
    if os.path.isdir(spec) and is_policy_checkpoint(spec):
        return load_tokenizer(_checkpoint_tokenizer(spec, read_policy_metadata(spec)
                                                    .get("tokenizer", "byte")))
    _refuse_workdir_without_checkpoint(spec)
    if os.path.isdir(spec) or is_gguf_path(spec):
        return HFTokenizer(spec)
    raise ValueError(_not_a_policy(spec))


def load_policy(spec: str, dtype: str | None = None, seed: int = 0,
                param_dtype: str | None = None) -> Policy:
    """A preset name (random initialisation from `seed`), a released model's name (see
    `jaxtree.models.named`), a jaxtree checkpoint (a workdir, its `checkpoints` directory or one
    step directory), a local Hugging Face checkpoint directory or a GGUF file.

    dtype (computation) defaults to float32 on CPU and bfloat16 on accelerators, param_dtype
    (storage) to dtype; a jaxtree checkpoint keeps the dtypes it was trained with unless they
    are given. Presets with the byte vocabulary come with the
    ByteTokenizer; a Hugging Face directory must hold its tokenizer files next to config.json and
    the weights.
    """
    spec = resolve_named_model(spec)
    if spec in PRESETS:
        config = models.get_preset(spec, dtype=dtype, param_dtype=param_dtype)
        if spec not in BYTE_VOCAB_PRESETS:
            raise ValueError(f"preset {spec!r} has no built-in tokenizer; load a checkpoint directory "
                             "with its tokenizer files instead")
        params = models.init_params(config, jax.random.key(seed))
        return Policy(config, params, ByteTokenizer(), f"random init (preset {spec}, seed {seed})",
                      origin={"name": spec, "init_seed": seed})
    origin = {"name": os.path.abspath(spec)}
    if os.path.isdir(spec) and is_policy_checkpoint(spec):
        config, params, tokenizer_spec, metadata = load_policy_checkpoint(spec)
        tokenizer_spec = _checkpoint_tokenizer(spec, tokenizer_spec)
        if "lora" in metadata:
            params, origin["sha256"] = _merged_adapters(spec, config, params, metadata["lora"],
                                                        param_dtype or dtype or "")
        if dtype is not None or param_dtype is not None:
            config = config.replace(dtype=dtype or config.dtype,
                                    param_dtype=param_dtype or dtype or config.param_dtype)
            params = jax.tree_util.tree_map(lambda x: x.astype(config.weight_dtype), params)
        return Policy(config, params, load_tokenizer(tokenizer_spec), spec, tokenizer_spec,
                      origin=origin)
    _refuse_workdir_without_checkpoint(spec)
    if os.path.isdir(spec) or is_gguf_path(spec):
        config, params = models.load_pretrained(spec, dtype=dtype, param_dtype=param_dtype)
        return Policy(config, params, HFTokenizer(spec), spec, os.path.abspath(spec),
                      origin=origin)
    raise ValueError(_not_a_policy(spec))


def _lora_base(checkpoint: str, config: models.ModelConfig, record: dict) -> Policy:
    """The base a LoRA checkpoint's metadata `record` names, loaded again; BaseMismatchError
    when it no longer has the recorded content."""
    base_record = record["base"]
    base = load_policy(base_record["name"], dtype=config.dtype,
                       seed=base_record.get("init_seed", 0), param_dtype=base_record["param_dtype"])
    found = base.base_record()["sha256"]
    if found != base_record["sha256"]:
        raise BaseMismatchError(
            f"checkpoint {checkpoint} holds LoRA adapters for the base {base_record['name']} "
            f"(sha256 {base_record['sha256'][:16]}), whose content is now another "
            f"(sha256 {found[:16]})")
    return base


def _lora_settings(record: dict) -> LoraConfig:
    return LoraConfig(rank=record["rank"], alpha=record["alpha"], targets=tuple(record["targets"]))


def _merged_adapters(checkpoint: str, config: models.ModelConfig, adapters, record: dict,
                     dtype: str) -> tuple[dict, str]:
    """(base + adapters merged, their identity) of a LoRA checkpoint whose metadata `record`
    names its base; BaseMismatchError when that base no longer has the recorded content. The
    identity hashes the base's hash, the adapters' bytes and the dtype the caller casts the
    result to, not the merged bytes: it does not depend on the merge's rounding here."""
    base = _lora_base(checkpoint, config, record)
    found = base.base_record()["sha256"]
    lora = _lora_settings(record)
    merged = merge(LoraParams(base.params, adapters, lora.scale), config.compute_dtype)
    identity = f"{found}:{content_hash(adapters)}:{lora.scale!r}:{dtype}"
    return merged, hashlib.sha256(identity.encode()).hexdigest()


def _checkpoint_tokenizer(checkpoint: str, spec: str) -> str:
    """A checkpoint's recorded tokenizer spec as a loadable one: 'byte', an absolute path, or a
    path relative to the checkpoint's workdir (the copy `save_tokenizer_for` made)."""
    if spec == "byte" or os.path.isabs(spec):
        return spec
    return os.path.join(workdir_of(checkpoint), spec)


def save_tokenizer_for(policy: Policy, workdir: str) -> str:
    """The tokenizer spec a job records in `workdir`'s checkpoints: 'byte', or TOKENIZER_DIR after
    writing the policy's Hugging Face tokenizer files (chat template included) there once, so the
    checkpoints do not depend on where the base model lives."""
    if policy.tokenizer_spec == "byte":
        return "byte"
    target = os.path.join(workdir, TOKENIZER_DIR)
    if not os.path.isfile(os.path.join(target, "tokenizer_config.json")):
        if not isinstance(policy.tokenizer, HFTokenizer):
            raise TypeError(f"policy {policy.source} has a {type(policy.tokenizer).__name__}, "
                            "which has no tokenizer files to copy")
        policy.tokenizer.hf.save_pretrained(target)
    return TOKENIZER_DIR


def _refuse_workdir_without_checkpoint(spec: str) -> None:
    """A jaxtree workdir (it has a checkpoints/ directory) whose job has not finished a save yet
    is named as such, instead of being read as a Hugging Face directory (its config.json is the
    experiment's, not a model's)."""
    if os.path.isdir(os.path.join(spec, CHECKPOINTS)):
        raise CheckpointNotFoundError(
            f"no complete checkpoint under {os.path.join(os.path.abspath(spec), CHECKPOINTS)} "
            "(its job has not finished a save: still running, or stopped before its first one)")


def _not_a_policy(spec: str) -> str:
    return (f"{spec!r} is neither a preset ({', '.join(sorted(PRESETS))}), a released model "
            f"({', '.join(sorted(NAMED_MODELS))}), an existing checkpoint directory (jaxtree or "
            "Hugging Face) nor a .gguf file")


# ----------------------------------------------------------------------------- Hugging Face export

# The byte tokenizer's chat format as a Jinja chat template: `<bos>`, then per message
# `<|role|>content<|end|>`, then `<|assistant|>` to open the reply.
BYTE_CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + "
                      "'|>' + message['content'] + '<|end|>' }}{% endfor %}"
                      "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which `tokenizers`' ByteLevel pre-tokenizer
    and decoder use: printable Latin-1 bytes stand for themselves, the others for 256 + n."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def byte_tokenizer_as_hf():
    """The ByteTokenizer as a `transformers` fast tokenizer with the same ids: a byte-level BPE
    without merges (byte b -> id b), the special tokens at their ids (256...), BOS/EOS/PAD and the
    chat template. `save_pretrained` writes files that `AutoTokenizer` and `HFTokenizer` read."""
    from tokenizers import AddedToken, Tokenizer as RawTokenizer, decoders, models as tok_models
    from tokenizers import pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte = ByteTokenizer()
    vocab = {char: b for b, char in _bytes_to_unicode().items()}
    raw = RawTokenizer(tok_models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens([AddedToken(name, special=True, normalized=False)
                            for name in ByteTokenizer.SPECIAL_TOKENS])
    if any(raw.token_to_id(name) != i for name, i in byte.special_ids.items()):
        raise RuntimeError("the byte-level BPE gave the special tokens other ids")
    return PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", chat_template=BYTE_CHAT_TEMPLATE,
                                   clean_up_tokenization_spaces=False)


def export_policy(policy: Policy, out: str) -> None:
    """Writes `policy` as a Hugging Face model directory: config.json and safetensors weights,
    tokenizer files with the chat template (the byte tokenizer as an equivalent byte-level BPE)
    and generation_config.json (its stop ids: EOS and the end-of-turn token)."""
    models.save_pretrained(out, policy.config, policy.params)
    tokenizer = policy.tokenizer
    hf = tokenizer.hf if isinstance(tokenizer, HFTokenizer) else byte_tokenizer_as_hf()
    hf.save_pretrained(out)
    stop_ids = sorted({tokenizer.eos_id, tokenizer.end_of_turn_id})
    generation = {"bos_token_id": tokenizer.bos_id, "pad_token_id": tokenizer.pad_id,
                  "eos_token_id": stop_ids[0] if len(stop_ids) == 1 else stop_ids}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=2)
    _umask_modes(out)


def _umask_modes(directory: str) -> None:
    """The safetensors files in `directory` with the mode every other file of an export gets
    (0666 less the umask): `safetensors` creates its files 0600, unreadable to the group and
    others that read the tokenizer and config beside them."""
    umask = os.umask(0)
    os.umask(umask)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.endswith(".safetensors") and os.path.isfile(path):
            os.chmod(path, 0o666 & ~umask)


# ----------------------------------------------------------------------------- PEFT adapters

ADAPTER_DIR = "adapter"  # a LoRA export's adapter in the PEFT format, under the export directory
BASE_DIR = "base"  # its base as a Hugging Face directory, when the base is not one already
PEFT_WEIGHTS = "adapter_model.safetensors"
PEFT_CONFIG = "adapter_config.json"
_HF_BLOCKS = {"attn": "self_attn", "mlp": "mlp"}  # transformers' module names (Llama, Qwen)


def peft_tensors(adapters) -> dict[str, np.ndarray]:
    """LoRA adapters under PEFT's names and layout: A [D_in, r] as `...q_proj.lora_A.weight`
    [r, D_in] and B [r, D_out] as `...q_proj.lora_B.weight` [D_out, r] (torch's Linear
    weights are [out, in]), float32."""
    tensors = {}
    for layer, blocks in adapters.items():
        index = int(layer.split("_")[1])
        for block, targets in blocks.items():
            for target, ab in targets.items():
                module = (f"base_model.model.model.layers.{index}.{_HF_BLOCKS[block]}."
                          f"{TARGETS[target][1]}")
                for name, x in (("lora_A", ab["a"]), ("lora_B", ab["b"])):
                    tensors[f"{module}.{name}.weight"] = np.ascontiguousarray(
                        np.asarray(jax.device_get(x), np.float32).T)
    return tensors


def export_peft_adapter(adapters, lora: LoraConfig, out: str, base_model: str) -> None:
    """Writes `adapters` as a PEFT LoRA adapter directory (`adapter_config.json` +
    `adapter_model.safetensors`) that `peft.PeftModel.from_pretrained(base, out)` loads onto
    the Hugging Face model `base_model` (its path, recorded in the config). PEFT's scaling
    lora_alpha / r is jaxtree's alpha / rank; no dropout, no bias."""
    from safetensors.numpy import save_file  # noqa: PLC0415

    os.makedirs(out, exist_ok=True)
    save_file(peft_tensors(adapters), os.path.join(out, PEFT_WEIGHTS), metadata={"format": "pt"})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
              "r": lora.rank, "lora_alpha": lora.alpha, "lora_dropout": 0.0, "bias": "none",
              "target_modules": [TARGETS[t][1] for t in lora.targets], "fan_in_fan_out": False,
              "use_rslora": False, "use_dora": False, "modules_to_save": None,
              "inference_mode": True}
    with open(os.path.join(out, PEFT_CONFIG), "w") as f:
        json.dump(config, f, indent=2)
    _umask_modes(out)


def lora_checkpoint(spec: str) -> tuple[Policy, Any, LoraConfig] | None:
    """(base policy, adapters, settings) of the LoRA checkpoint `spec` names (a workdir, its
    checkpoints directory or one step), its base loaded again and checked against the recorded
    hash; None when `spec` is any other policy."""
    spec = resolve_named_model(spec)
    if not (os.path.isdir(spec) and is_policy_checkpoint(spec)):
        return None
    if "lora" not in read_policy_metadata(spec):
        return None
    config, adapters, _, metadata = load_policy_checkpoint(spec)
    return _lora_base(spec, config, metadata["lora"]), adapters, _lora_settings(metadata["lora"])


def export_lora_adapter(spec: str, out: str) -> str | None:
    """For a LoRA checkpoint `spec`: its adapter in the PEFT format at `out`/adapter, over its
    base's Hugging Face directory (the base's own when it is one, else the base exported to
    `out`/base). Returns the adapter directory, or None when `spec` is no LoRA checkpoint."""
    parts = lora_checkpoint(spec)
    if parts is None:
        return None
    base, adapters, lora = parts
    name = base.origin.get("name", "")
    if os.path.isdir(name) and not is_policy_checkpoint(name):
        base_model = name  # a Hugging Face directory already
    else:  # a preset, a GGUF file, a jaxtree checkpoint (e.g. a merged LoRA warm start)
        base_model = os.path.abspath(os.path.join(out, BASE_DIR))
        export_policy(base, base_model)
    adapter_dir = os.path.join(out, ADAPTER_DIR)
    export_peft_adapter(adapters, lora, adapter_dir, base_model)
    return adapter_dir

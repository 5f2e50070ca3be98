"""PRM checkpoints: a Hugging Face directory with a Llama / Qwen2 / Qwen3 backbone and a linear
score head.

A PRM directory holds `config.json` and safetensors weights as `jaxtree.models.load_pretrained`
reads them for the backbone (tensors `model.*`), plus the head, one linear layer
hidden -> num_labels (1 or 2) in either layout:

  * `score.weight` [num_labels, hidden] and an optional `score.bias` [num_labels]: transformers'
    `LlamaForTokenClassification` / `Qwen2ForTokenClassification` (and their
    `...ForSequenceClassification`, whose head has no bias; jaxtree scores every step position
    with it all the same);
  * `v_head.summary.weight` [num_labels, hidden] and `v_head.summary.bias`: Skywork-PRM's value
    head (its dropout is the identity at inference).

A token-classification checkpoint has no `lm_head`; one that has it (Skywork-PRM keeps its causal
LM's) gets it ignored: scoring reads the hidden states, never the vocabulary logits. Any other
head (several layers, e.g. `score.0.weight` / `score.2.weight`; none at all) is a CheckpointError
naming what was found. The tokenizer is the directory's own Hugging Face tokenizer files, or the
byte tokenizer when `jaxtree_prm.json` says so (PRMs trained on the tiny byte-level model).

`save_prm` writes the token-classification layout with its `config.json` (architectures
`<Family>ForTokenClassification`, id2label), which transformers'
`AutoModelForTokenClassification.from_pretrained` loads, and `jaxtree_prm.json`
({"tokenizer": "byte" | "files", "num_labels", "source"}).
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from jaxtree.models import hf_io
from jaxtree.models.config import ModelConfig
from jaxtree.models.checkpoint_layout import param_paths, unflatten
from jaxtree.models.hf_io import CheckpointError
from jaxtree.scorers.prm import LABEL_COUNTS, ProcessRewardModel, backbone_of
from jaxtree.tokenizers import ByteTokenizer, HFTokenizer

PRM_FILE = "jaxtree_prm.json"
# (weight, bias) tensor names of the linear heads jaxtree reads.
LINEAR_HEADS = (("score.weight", "score.bias"), ("v_head.summary.weight", "v_head.summary.bias"))
# Names under which checkpoints keep heads: a tensor there that is not a linear head's is refused.
HEAD_PREFIXES = ("score.", "v_head.", "classifier.", "value_head.", "reward_head.")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
ARCHITECTURES = {"llama": "LlamaForTokenClassification", "qwen2": "Qwen2ForTokenClassification",
                 "qwen3": "Qwen3ForTokenClassification"}
_LM_HEAD = ("lm_head", "kernel")


def _backbone_names(config: ModelConfig) -> dict[str, tuple[tuple[str, ...], bool, tuple]]:
    """Hugging Face tensor name -> (our parameter path, transposed, our shape) of the backbone
    (every parameter but the output projection)."""
    out = {}
    for path, leaf in param_paths(config).items():
        if path != _LM_HEAD:
            name, transposed = hf_io._hf_name(path)
            out[name] = (path, transposed, tuple(leaf.shape))
    return out


def _read_tensors(path: str, config: ModelConfig) -> tuple[dict, dict[str, np.ndarray]]:
    """(backbone params, the tensors outside the backbone) of a checkpoint directory."""
    names = _backbone_names(config)
    backbone, others = {}, {}
    for file in hf_io._checkpoint_files(path):
        for name, array in hf_io._iter_safetensors(file):
            if name in names:
                our_path, transposed, want = names[name]
                got = array.shape[::-1] if transposed else array.shape
                if tuple(got) != want:
                    raise CheckpointError(f"{file}: tensor {name!r} has shape {array.shape}, "
                                          "config.json implies "
                                          f"{want[::-1] if transposed else want}")
                backbone[our_path] = jnp.asarray(np.asarray(array.T if transposed else array),
                                                 config.weight_dtype)
            elif name != "lm_head.weight" and not hf_io._IGNORED.match(name):
                others[name] = np.asarray(array, np.float32)
    missing = [name for name, (p, _, _) in names.items() if p not in backbone]
    if missing:
        raise CheckpointError(f"{path}: missing backbone tensors {missing[:8]}"
                              f"{' ...' if len(missing) > 8 else ''}")
    return unflatten(backbone), others


def _linear_head(path: str, tensors: dict[str, np.ndarray], hidden: int) -> dict:
    """The head {'kernel': [D, N], 'bias': [N]} from the non-backbone tensors; CheckpointError
    for anything but one linear layer with 1 or 2 labels."""
    found = sorted(tensors)
    for weight_name, bias_name in LINEAR_HEADS:
        if weight_name not in tensors:
            continue
        extra = [n for n in found if n not in (weight_name, bias_name)]
        if extra:
            raise CheckpointError(f"{path}: tensors besides the linear head {weight_name!r}: "
                                  f"{extra[:8]}; a PRM head must be one linear layer")
        weight = tensors[weight_name]
        if weight.ndim != 2 or weight.shape[1] != hidden or weight.shape[0] not in LABEL_COUNTS:
            raise CheckpointError(f"{path}: head {weight_name!r} has shape {weight.shape}; "
                                  f"expected [num_labels in {LABEL_COUNTS}, hidden={hidden}]")
        bias = tensors.get(bias_name, np.zeros(weight.shape[0], np.float32))
        if bias.shape != (weight.shape[0],):
            raise CheckpointError(f"{path}: head bias {bias_name!r} has shape {bias.shape}, "
                                  f"expected ({weight.shape[0]},)")
        return {"kernel": jnp.asarray(weight.T, jnp.float32),
                "bias": jnp.asarray(bias, jnp.float32)}
    head_like = [n for n in found if n.startswith(HEAD_PREFIXES)]
    if head_like:
        raise CheckpointError(f"{path}: unsupported score head {head_like[:8]}: jaxtree reads one "
                              "linear layer, score.weight [num_labels, hidden] (+ score.bias) or "
                              "v_head.summary.weight (+ v_head.summary.bias)")
    what = f"tensors outside the backbone: {found[:8]}" if found else "only backbone tensors"
    raise CheckpointError(f"{path}: no PRM score head (expected score.weight or "
                          f"v_head.summary.weight); found {what}")


def _prm_metadata(path: str) -> dict:
    file = os.path.join(path, PRM_FILE)
    if not os.path.exists(file):
        return {}
    try:
        with open(file) as f:
            metadata = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{file}: unreadable ({e})") from e
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{file}: not a JSON object")
    return metadata


def _load_tokenizer(path: str, metadata: dict):
    """(tokenizer, spec) of a PRM directory."""
    if metadata.get("tokenizer") == "byte":
        return ByteTokenizer(), "byte"
    if any(os.path.exists(os.path.join(path, f)) for f in TOKENIZER_FILES):
        return HFTokenizer(path), os.path.abspath(path)
    raise CheckpointError(f"{path}: no tokenizer (expected Hugging Face tokenizer files "
                          f"{TOKENIZER_FILES} or {PRM_FILE} naming the byte tokenizer)")


def load_prm(path: str, dtype: str | None = None) -> ProcessRewardModel:
    """The PRM of a directory (module docstring); dtype as in `load_pretrained`.

    Raises:
      CheckpointError naming the directory and the problem (missing directory, config, weights,
      tokenizer or head; an unsupported head; a shape mismatch).
    """
    config = hf_io.load_config(path, dtype)
    backbone, others = _read_tensors(path, config)
    head = _linear_head(path, others, config.hidden_size)
    tokenizer, spec = _load_tokenizer(path, _prm_metadata(path))
    return ProcessRewardModel(config, {"backbone": backbone, "head": head}, tokenizer, path, spec)


def _hf_config(prm: ProcessRewardModel) -> dict:
    labels = {str(i): f"LABEL_{i}" for i in range(prm.num_labels)}
    return {**prm.config.to_hf_dict(), "architectures": [ARCHITECTURES[prm.config.model_type]],
            "id2label": labels, "label2id": {v: int(k) for k, v in labels.items()}}


def save_prm(path: str, prm: ProcessRewardModel) -> None:
    """Writes the PRM as a token-classification directory (module docstring): config.json,
    model.safetensors (backbone in config.param_dtype, head `score.*`), the tokenizer (its files,
    or the byte tokenizer named in jaxtree_prm.json)."""
    os.makedirs(path, exist_ok=True)
    config = prm.config
    store = ml_dtypes.bfloat16 if config.param_dtype == "bfloat16" else np.dtype(
        config.weight_dtype)
    names = {p: (n, t) for n, (p, t, _) in _backbone_names(config).items()}
    flat = jax.tree_util.tree_flatten_with_path(backbone_of(prm.params["backbone"]))[0]
    tensors = {}
    for key_path, leaf in flat:
        our_path = tuple(k.key for k in key_path)
        if our_path not in names:
            raise ValueError(f"save_prm: backbone parameter {'/'.join(our_path)} is not in the "
                             f"{config.model_type} architecture")
        name, transposed = names[our_path]
        array = np.asarray(jax.device_get(leaf)).astype(store)
        tensors[name] = np.ascontiguousarray(array.T if transposed else array)
    head = jax.device_get(prm.params["head"])
    tensors["score.weight"] = np.ascontiguousarray(np.asarray(head["kernel"]).T.astype(store))
    tensors["score.bias"] = np.asarray(head["bias"]).astype(store)
    if os.path.exists(os.path.join(path, hf_io.INDEX_FILE)):  # a stale sharded save
        os.remove(os.path.join(path, hf_io.INDEX_FILE))
    save_file(tensors, os.path.join(path, hf_io.SINGLE_FILE), metadata={"format": "pt"})
    with open(os.path.join(path, hf_io.CONFIG_FILE), "w") as f:
        json.dump(_hf_config(prm), f, indent=2)
    if isinstance(prm.tokenizer, HFTokenizer):
        prm.tokenizer.hf.save_pretrained(path)
    metadata = {"tokenizer": "byte" if isinstance(prm.tokenizer, ByteTokenizer) else "files",
                "num_labels": prm.num_labels, "source": prm.source}
    with open(os.path.join(path, PRM_FILE), "w") as f:
        json.dump(metadata, f, indent=2)

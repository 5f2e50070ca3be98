"""PATR's LLM-as-judge process scorer, in process: a jaxtree policy scores partial trajectories.

PATR §4.2 and App. B: the judge reads the task and a compact view of the recent trajectory under
a phase-specific prompt (diagnosis, editing, verification, else the default one) and answers
`{"score": x}` with x in [0, 1]; the branch score blends it with a heuristic (Eq. 8):

    s = lambda * s_judge + (1 - lambda) * s_heuristic.

Reading the answer: instead of sampling JSON, the judge's next-token distribution is read right
after the assistant's `{"score": ` (one forward per prompt, batched):

    s_judge = p(1) + p(0) * E[d | "0."] / 10,

with p the probability of the digit tokens "1" and "0" renormalised over the two, and the
expected first decimal digit d from a second row ending in `{"score": 0.` (renormalised over the
ten digits). It is the mean of the score the judge would write (to one decimal), needs no
parsing and cannot be malformed. The heuristic is the environment's `process_score`.

The judge's chat (`judge_messages`) and the blend (`blend_with_heuristic`) are shared with the
HTTP backend (`jaxtree.scorers.judge_http`), which asks a judge on an OpenAI-compatible server.

Phase selection (App. B) looks at the recent actions: test runs or pass/fail words ->
verification; file modifications -> editing; searches, file reads, tracebacks -> diagnosis; else
the default prompt. The prompts are the paper's (App. B, Codes 1-5), with its SWE wording.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.models import Transformer
from jaxtree.rollout.episode import Episode
from jaxtree.sampling.sampler import bucket_length

SYSTEM_PROMPT = ("You evaluate partial SWE-agent trajectories for tree-search expansion.\n"
                 "Output ONLY valid JSON: {\"score\": <0.0 to 1.0>}. Nothing else.")

_TAIL = "\n\nTask:\n{task}\n\nTrajectory:\n{trajectory}\n\nOutput ONLY: {{\"score\": <0.0 to 1.0>}}"

PROMPTS = {
    "default": (
        "Score this partial SWE-agent trajectory for tree-search branching.\n\nConsider:\n"
        "- Is the agent making measurable progress toward solving the issue?\n"
        "- Are its actions grounded in evidence from the code or observations?\n"
        "- Is it avoiding repetitive or aimless commands?\n"
        "- If we continue from this state, how likely will this branch lead to a correct fix?\n"
        "\n0.0 = stuck, looping, or wrong direction\n"
        "0.5 = some relevant work but unclear progress\n"
        "1.0 = clearly on track, strong evidence of progress" + _TAIL),
    "diagnosis": (
        "Score this partial trajectory during EXPLORATION / DIAGNOSIS.\n\nConsider:\n"
        "- Is the agent searching in the right files and directories?\n"
        "- Is it narrowing down the bug location with each step?\n"
        "- Is it gathering evidence (reading code, reproducing the bug) rather than guessing?\n"
        "- Is it avoiding repeated searches that yield no new information?\n"
        "\n0.0 = aimless browsing, wrong files, repetitive commands\n"
        "0.5 = relevant exploration but slow progress\n"
        "1.0 = efficiently locating the root cause" + _TAIL),
    "editing": (
        "Score this partial trajectory during EDITING.\n\nConsider:\n"
        "- Is the agent editing the file that evidence pointed to?\n"
        "- Is the change minimal and tied to the diagnosed root cause?\n"
        "- Did the agent collect enough evidence before editing, or is it guessing?\n"
        "- Could this edit introduce new bugs or break other functionality?\n"
        "\n0.0 = editing blind, wrong file, speculative changes\n"
        "0.5 = reasonable edit but unclear if it addresses root cause\n"
        "1.0 = precise, evidence-based fix in the right location" + _TAIL),
    "verification": (
        "Score this partial trajectory during TESTING / VERIFICATION.\n\nConsider:\n"
        "- Is the agent running tests relevant to the issue (not random test suites)?\n"
        "- If tests fail, does the agent appear to understand the failure?\n"
        "- If tests pass, do they actually cover the bug that was fixed?\n"
        "- Is the agent verifying the fix rather than declaring premature success?\n"
        "\n0.0 = irrelevant tests, ignoring failures, false success\n"
        "0.5 = running some tests but coverage of the fix is unclear\n"
        "1.0 = targeted verification that confirms the fix works" + _TAIL),
}

# App. B's phase rules, most specific first.
PHASE_PATTERNS = (
    # `run_tests` needs its own alternative: '_' is a word character, so \btests?\b misses it
    ("verification", re.compile(r"pytest|unittest|run_tests|\bsubmit\b|\btests?\b|"
                                r"\bpass(ed)?\b|\bfail(ed|ure)?\b", re.I)),
    ("editing", re.compile(r"\bpatch|\binsert|\breplace|\bedit|sed -i|\bwrite", re.I)),
    ("diagnosis", re.compile(r"\bsearch|\bgrep|\bfind\b|\bcat\b|\bls\b|\bopen\b|\bview|"
                             r"traceback", re.I)),
)
ANSWER_PREFIX = '{"score": '


def phase_of(actions: Sequence[str]) -> str:
    """The prompt phase of a trajectory from its recent action texts (App. B)."""
    text = "\n".join(actions)
    for phase, pattern in PHASE_PATTERNS:
        if pattern.search(text):
            return phase
    return "default"


def trajectory_text(episode: Episode, recent_turns: int) -> tuple[str, list[str]]:
    """(the compact trajectory: the last `recent_turns` actions with their rewards and the current
    state, those actions' texts)."""
    turns = episode.turns[-recent_turns:] if recent_turns else []
    first = episode.num_turns - len(turns)
    actions = [t.action_signature for t in turns]
    lines = [f"step {first + i + 1}: {a} (reward {t.reward:g}{'' if t.valid else ', invalid'})"
             for i, (a, t) in enumerate(zip(actions, turns))]
    lines.append("current state:\n" + episode.env.render())
    return "\n".join(lines), actions


def judge_messages(episode: Episode, recent_turns: int) -> list[dict]:
    """The judge's chat for one branch, [system, user] ({'role', 'content'} dicts): PATR's
    system prompt and the phase prompt filled with the task and the recent trajectory. Both
    backends send it (the in-process judge adds the assistant's answer prefix)."""
    trajectory, actions = trajectory_text(episode, recent_turns)
    user = PROMPTS[phase_of(actions)].format(task=episode.env.instructions(),
                                             trajectory=trajectory)
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def blend_with_heuristic(weight: float, judge_scores, episodes: Sequence[Episode]) -> np.ndarray:
    """PATR Eq. 8 for each branch: weight * s_judge + (1 - weight) * the environment's
    `process_score()` (float64[n]; judge_scores: float[n] in [0, 1])."""
    heuristic = np.asarray([e.env.process_score() for e in episodes], np.float64)
    return weight * np.asarray(judge_scores, np.float64) + (1 - weight) * heuristic


@functools.partial(jax.jit, static_argnames=("config",))
def _answer_logits(config, params, tokens, lengths):
    """float32[B, V] logits after each row's last token (right-padded rows). Only those rows go
    through the output projection: a full [B, T, V] would not fit for a real vocabulary (a
    49k-token judge over 128 rows of 288 tokens needs 7 GB of logits)."""
    logits, _ = Transformer(config).apply({"params": params}, tokens, chunk_lengths=lengths,
                                          last_only=True)
    return logits


class JudgeScorer:
    """The in-process judge (module docstring) over a loaded policy; call it with live episodes."""

    def __init__(self, policy, weight: float, recent_turns: int, max_prompt_tokens: int):
        self.policy = policy
        self.weight = weight
        self.recent_turns = recent_turns
        self.max_prompt_tokens = max_prompt_tokens
        tok = policy.tokenizer
        self.digit_ids = []
        for d in "0123456789":
            ids = tok.encode(d)
            if len(ids) != 1:
                raise ValueError(f"the judge's tokenizer splits the digit {d!r} into {ids}; the "
                                 "judge reads single-token digits")
            self.digit_ids.append(ids[0])
        self.digit_ids = np.asarray(self.digit_ids)

    def prompt_tokens(self, episode: Episode) -> list[int]:
        """The judge's chat for one branch, ending inside its answer after `{"score": `."""
        tok = self.policy.tokenizer
        head = tok.apply_chat_template(judge_messages(episode, self.recent_turns))
        answer = tok.encode(ANSWER_PREFIX)
        keep = self.max_prompt_tokens - len(answer) - 2
        # Long trajectories keep the chat's start (system prompt and task) and its end.
        if len(head) > keep:
            head = head[:keep // 2] + head[len(head) - (keep - keep // 2):]
        return head + answer

    def judge_scores(self, episodes: Sequence[Episode]) -> np.ndarray:
        """s_judge of each episode (float64[n], in [0, 1])."""
        if not episodes:
            return np.zeros(0)
        tok = self.policy.tokenizer
        rows = []
        for e in episodes:
            head = self.prompt_tokens(e)
            rows += [head, head + tok.encode("0.")]
        width = bucket_length(max(len(r) for r in rows), 32)
        count = bucket_length(len(rows), 16)  # few distinct shapes: few compilations
        tokens = np.full((count, width), tok.pad_id, np.int32)
        lengths = np.ones(count, np.int32)
        for i, r in enumerate(rows):
            tokens[i, :len(r)] = r
            lengths[i] = len(r)
        logits = np.asarray(jax.device_get(_answer_logits(
            self.policy.config, self.policy.params, jnp.asarray(tokens), jnp.asarray(lengths))),
            np.float64)[:len(rows)]
        digits = logits[:, self.digit_ids]
        digits = np.exp(digits - digits.max(axis=1, keepdims=True))
        first = digits[0::2][:, [0, 1]]
        first = first / first.sum(axis=1, keepdims=True)          # p(0), p(1)
        decimal = digits[1::2] / digits[1::2].sum(axis=1, keepdims=True)
        expected_tenths = decimal @ np.arange(10) / 10.0
        return np.clip(first[:, 1] + first[:, 0] * expected_tenths, 0.0, 1.0)

    def __call__(self, episodes: Sequence[Episode]) -> np.ndarray:
        return blend_with_heuristic(self.weight, self.judge_scores(episodes), episodes)

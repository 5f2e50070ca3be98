"""Per-turn labels: what a rollout records about each turn besides its reward and validity,
computed only when part of the experiment reads it.

A label is declared once, here or by a user (`register_label`): its name, dtype, the value a
batch holds past an episode's last turn, and how the environment gives it. Parts of the pipeline
declare the labels they read when they register (`Registry.register(..., reads=(...))`); the
pipeline collects the reads, checks at launch that each has a producer, and hands the rollout the
set to compute. A turn then queries the environment for those labels only:

    labeler = TurnLabeler(("verified", "state_signature"), signature_fn)
    labels = labeler.before_step(env, parsed, history)       # in the state the action meets
    labels.update(labeler.after_step(env, parsed, info, history))
    batch.label("verified")                                   # float32[N, K]

Built-in labels (the phase says which state of the environment a label reads):

  name              dtype    past the end  phase   meaning
  verified          float32  NaN           before  VPR's verifier V(s_t, a_t), 1/0 (`env.verify`)
  turn_score        float32  NaN           before  TSR's S(s_t, a_t) (`env.turn_score`)
  state_signature   object   None          before  RTMC's state signature, by the rollout's
                                                   signature function (`rollout.signature`)
  anchor_state      object   None          before  GiGPO's anchor: the canonical state
  action_signature  object   None          after   RTMC's action signature (also PATR's repeat
                                                   rule, the judge's and the PRM's step texts)
  process_score     float32  NaN           after   PATR's heuristic process score after the turn
  validation        bool     False         after   the environment reported a validation after
                                                   a modification (RTMC's Eq. 12 shaping)
  mc_value          float32  NaN           -       MC-PR's V(s_t): made by the `mc_values`
                                                   rollout strategy, not by the environment

A label with no phase is produced by a rollout strategy (registered with `produces=`), which
attaches it to turns itself (`Episode.attach_label`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from environments.base import TextEnv

BEFORE, AFTER = "before", "after"


@dataclasses.dataclass(frozen=True)
class LabelSpec:
    """A per-turn label. `compute(env, parsed, info, history, signature_fn)` gives its value in
    `phase` (BEFORE: the state the action was taken in, `info` is None; AFTER: after the step);
    None for a label a rollout strategy produces."""

    name: str
    dtype: Any
    fill: Any
    doc: str
    phase: str | None = None
    compute: Callable[..., Any] | None = None


LABELS: dict[str, LabelSpec] = {}


def register_label(spec: LabelSpec) -> LabelSpec:
    """Declares a label (ValueError if the name is taken)."""
    if spec.name in LABELS:
        raise ValueError(f"label {spec.name!r} is already registered")
    if (spec.phase is None) != (spec.compute is None) or spec.phase not in (None, BEFORE, AFTER):
        raise ValueError(f"label {spec.name!r}: give both a phase ({BEFORE!r} or {AFTER!r}) and "
                         "a compute function, or neither (a strategy produces it)")
    LABELS[spec.name] = spec
    return spec


def environment_labels() -> tuple[str, ...]:
    """The labels any rollout can compute from its environment."""
    return tuple(name for name, spec in LABELS.items() if spec.compute is not None)


for _spec in (
    LabelSpec("verified", np.float32, np.nan, "VPR's verifier V(s_t, a_t), 1/0", BEFORE,
              lambda env, parsed, info, history, signature: float(env.verify(parsed))),
    LabelSpec("turn_score", np.float32, np.nan, "TSR's score S(s_t, a_t) of the action", BEFORE,
              lambda env, parsed, info, history, signature: float(env.turn_score(parsed))),
    LabelSpec("state_signature", object, None, "RTMC's signature of the state s_t", BEFORE,
              lambda env, parsed, info, history, signature: signature(env, history)),
    LabelSpec("anchor_state", object, None, "GiGPO's anchor: the canonical state s_t", BEFORE,
              lambda env, parsed, info, history, signature: env.canonical_state()),
    LabelSpec("action_signature", object, None, "RTMC's signature of the action a_t", AFTER,
              lambda env, parsed, info, history, signature: env.action_signature(parsed)),
    LabelSpec("process_score", np.float32, np.nan, "PATR's heuristic score after the turn",
              AFTER, lambda env, parsed, info, history, signature: float(env.process_score())),
    LabelSpec("validation", bool, False, "a validation after a modification (RTMC Eq. 12)",
              AFTER, lambda env, parsed, info, history, signature:
              bool(info.get("validation", False))),
    LabelSpec("mc_value", np.float32, np.nan, "MC-PR's Monte-Carlo value V(s_t)"),
):
    register_label(_spec)


def check_known(names: Iterable[str]) -> tuple[str, ...]:
    """The names as a tuple, ValueError naming one that is not a registered label."""
    names = tuple(names)
    for name in names:
        if name not in LABELS:
            raise ValueError(f"no per-turn label {name!r}; registered: {tuple(LABELS)}")
    return names


class TurnLabeler:
    """Computes a fixed set of environment labels for each played turn (none by default)."""

    def __init__(self, names: Iterable[str] = (),
                 signature_fn: Callable[[TextEnv, Sequence], str] | None = None):
        names = check_known(names)
        produced = [n for n in names if LABELS[n].compute is None]
        if produced:
            raise ValueError(f"label {produced[0]!r} is produced by a rollout strategy, not "
                             "computed from the environment")
        if "state_signature" in names and signature_fn is None:
            raise ValueError("the state_signature label needs a signature function")
        self.names = tuple(sorted(set(names), key=list(LABELS).index))
        self.signature_fn = signature_fn
        self._before = [LABELS[n] for n in self.names if LABELS[n].phase == BEFORE]
        self._after = [LABELS[n] for n in self.names if LABELS[n].phase == AFTER]

    def before_step(self, env: TextEnv, parsed: Any, history: Sequence) -> dict[str, Any]:
        """The labels that read the state the action is taken in."""
        return {spec.name: spec.compute(env, parsed, None, history, self.signature_fn)
                for spec in self._before}

    def after_step(self, env: TextEnv, parsed: Any, info: Mapping,
                   history: Sequence) -> dict[str, Any]:
        """The labels that read the state after the step (and its `info`)."""
        return {spec.name: spec.compute(env, parsed, info, history, self.signature_fn)
                for spec in self._after}


class MissingLabel(KeyError):
    """A batch was asked for a per-turn label its rollout did not record."""

    def __str__(self) -> str:
        return self.args[0]


def label_table(name: str, rows: Sequence[Sequence[Mapping[str, Any]]],
                turns: int) -> np.ndarray:
    """[N, K] array of label `name` from each row's turn label dicts (the label's fill where a
    turn does not carry it and past each row's last turn)."""
    spec = LABELS[name]
    table = np.full((len(rows), turns), spec.fill, spec.dtype)
    for i, row in enumerate(rows):
        for t, labels in enumerate(row):
            if name in labels:
                table[i, t] = labels[name]
    return table

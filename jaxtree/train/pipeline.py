"""The training pipeline of an experiment, built and checked in one place.

    check_experiment(exp)                  # at launch: ConfigError naming the field, or nothing
    pipeline = build_pipeline(exp, policy)
    Trainer(exp, pipeline, workdir, policy, metadata).run()

`Pipeline` holds the parts a training step composes, each built from its config section:

    tasks ─► strategy ─► rewards ─► filter ─► advantage ─► updater (loss, optax) ─► evaluator
             rollout     reward     filter    advantage    loss, optim, train, mesh    eval

and `labels`, the per-turn labels its rollouts record. Labels are declared, not built in: every
part registers the labels it reads (`Registry.register(..., reads=...)`), a strategy the ones it
produces; `labels_read` collects the reads of the configured parts, `check_experiment` checks
that each has a producer (the environment, for most; the `mc_values` strategy for MC-PR's
values), and the rollout computes those and no others.
"""

from __future__ import annotations

import dataclasses

import jax

from jaxtree.advantages import ADVANTAGES, FILTERS, build_advantage, build_filter
from jaxtree.advantages.base import Advantage
from jaxtree.advantages.group_filters import GroupFilter
from jaxtree.config import ConfigError, require
from jaxtree.evaluation import Evaluator
from jaxtree.experiment import Experiment
from jaxtree.parallel import mesh as mesh_lib
from jaxtree.policy import Policy
from jaxtree.rewards import REWARDS, build_rewards
from jaxtree.rewards.base import RewardTerm
from jaxtree.rollout.labels import LABELS, environment_labels
from jaxtree.rollout.signatures import SIGNATURES
from jaxtree.rollout.strategies import STRATEGIES, RolloutStrategy, build_strategy, check_stage
from jaxtree.train.update import Updater, cpu_compiler_options, optimizer_from_config

WIDTH_MULTIPLE = 64  # token widths are padded to a multiple of this: few distinct shapes


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """The parts of a training step (see the module docstring)."""

    strategy: RolloutStrategy
    rewards: RewardTerm
    filter: GroupFilter
    advantage: Advantage
    updater: Updater
    evaluator: Evaluator
    labels: tuple[str, ...]


def labels_read(exp: Experiment) -> dict[str, list[tuple[str, str]]]:
    """{label: [(config field, part)] of the configured parts that read it}, e.g. {'verified':
    [('reward.terms', 'verifier')]}, over the reward terms, advantage, filter and strategy (and
    the state signature function, when the state signatures are read)."""
    readers: list[tuple[str, str, tuple[str, ...]]] = []
    for term in exp.reward.terms:
        readers.append(("reward.terms", term,
                        REWARDS.part(term).labels_read(exp.reward.part_settings(term))))
    for field, registry, section, name in (
            ("advantage.name", ADVANTAGES, exp.advantage, exp.advantage.name),
            ("filter.name", FILTERS, exp.filter, exp.filter.name),
            ("rollout.strategy", STRATEGIES, exp.rollout, exp.rollout.strategy)):
        readers.append((field, name, registry.part(name).labels_read(section.part_settings(name))))
    out: dict[str, list[tuple[str, str]]] = {}
    for field, name, labels in readers:
        for label in labels:
            out.setdefault(label, []).append((field, name))
    if "state_signature" in out:
        signature = exp.rollout.signature
        for label in SIGNATURES.part(signature).labels_read(None):
            out.setdefault(label, []).append(("rollout.signature", signature))
    return out


def check_labels(exp: Experiment) -> None:
    """ConfigError naming the reader's field unless every label the experiment reads is
    registered and produced: by the environment, or by the configured rollout strategy."""
    strategy = exp.rollout.strategy
    produced = set(environment_labels()) | set(STRATEGIES.part(strategy).produces)
    for label, readers in labels_read(exp).items():
        field, part = readers[0]
        if label not in LABELS:
            raise ConfigError(field, f"{part!r} reads the per-turn label {label!r}, which is not "
                              f"registered (labels: {', '.join(LABELS)})")
        if label not in produced:
            producers = [name for name in STRATEGIES.names()
                         if label in STRATEGIES.part(name).produces]
            raise ConfigError(field, f"{part!r} reads the per-turn label {label!r}, which only "
                              f"rollout.strategy={' or '.join(map(repr, producers))} produces; "
                              f"rollout.strategy is {strategy!r}")


def rollout_labels(exp: Experiment) -> tuple[str, ...]:
    """The per-turn labels the experiment's rollouts record, in registration order."""
    read = labels_read(exp)
    return tuple(name for name in LABELS if name in read)


def check_experiment(exp: Experiment) -> None:
    """Constraints across sections that the RL loop needs (ConfigError naming the field)."""
    rollout, train = exp.rollout, exp.train
    optimizer_steps = train.steps * train.epochs * train.num_minibatches
    require(exp.optim.warmup_steps <= optimizer_steps, "optim.warmup_steps",
            f"{exp.optim.warmup_steps} is not in [0, {optimizer_steps}] (the run's optimizer "
            "steps)")
    require(rollout.group_size > 1, "rollout.group_size",
            f"{rollout.group_size} is not >= 2 (group-relative advantages compare the rollouts "
            "of a task)")
    require(train.num_minibatches <= rollout.groups_per_step * rollout.group_size,
            "train.num_minibatches", f"{train.num_minibatches} is more than the "
            f"{rollout.groups_per_step * rollout.group_size} episodes of a step")
    check_stage(rollout)  # the strategy's own constraints (slots for its branches, ...)
    check_labels(exp)
    try:
        parallelism = mesh_lib.batch_parallelism(exp.mesh.make())
    except ValueError as e:
        raise ConfigError("mesh", f"{e} ({jax.device_count()} devices here)") from None
    require(train.micro_batch_size % parallelism == 0, "train.micro_batch_size",
            f"{train.micro_batch_size} is not a multiple of the mesh's batch parallelism "
            f"data x fsdp = {parallelism}")
    # Every process plays at least one group and one held-out task (an empty share would be
    # a rollout of nothing).
    processes = jax.process_count()
    require(rollout.groups_per_step >= processes, "rollout.groups_per_step",
            f"{rollout.groups_per_step} is fewer than the {processes} processes (each plays a "
            "share of the groups)")
    require(exp.eval.num_tasks >= processes, "eval.num_tasks",
            f"{exp.eval.num_tasks} is fewer than the {processes} processes (each evaluates a "
            "share of the tasks)")


# The updaters this process built, by everything their programs depend on (`_updater_key`), the
# newest last. JAX keeps a traced and compiled program with the jitted function object that made
# it, so a second Updater of the same configuration would trace, lower and compile every update
# program again; a process that trains several runs of one configuration (a notebook, a sweep in
# one process, the test suite: 76 of the 351 programs its README commands' runs compiled were
# such repeats) reuses the first one's instead. An Updater keeps no state between calls
# except a LoRA run's placed base parameters, so LoRA updaters are not shared.
_SHARED_UPDATERS: dict[tuple, Updater] = {}
_SHARED_UPDATERS_KEPT = 4


def _updater_key(exp: Experiment, policy: Policy, total_steps: int, mesh,
                 norm_constant: float) -> tuple | None:
    """What an Updater's programs depend on, or None where it must not be shared (LoRA)."""
    if policy.lora is not None and policy.lora.enabled:
        return None
    leaves, structure = jax.tree_util.tree_flatten(policy.params)
    # the run's length reaches the programs only through a decaying schedule: runs of a
    # constant learning rate (after any warm-up) share one Updater whatever their lengths
    total_steps = total_steps if exp.optim.schedule != "constant" else None
    return (policy.config, exp.optim, total_steps, exp.loss, exp.train.micro_batch_size, mesh,
            exp.model.training_memory(), exp.model.cpu_library_fusions, norm_constant, structure,
            tuple((tuple(x.shape), str(x.dtype)) for x in leaves))


def build_updater(exp: Experiment, policy: Policy, max_steps: int) -> Updater:
    """The jitted, sharded update step of the experiment's loss, optimizer and mesh;
    `max_steps` is the environment's turn limit (seq-sum's default constant). The same object
    for a configuration this process built one for already (`_SHARED_UPDATERS`)."""
    t, engine = exp.train, exp.rollout
    total_steps = t.steps * t.epochs * t.num_minibatches
    norm_constant = exp.loss.norm_constant or float(
        engine.max_action_tokens * (engine.max_turns or max_steps))
    try:
        mesh = exp.mesh.make()
        key = _updater_key(exp, policy, total_steps, mesh, norm_constant)
        if key in _SHARED_UPDATERS:
            _SHARED_UPDATERS[key] = _SHARED_UPDATERS.pop(key)  # the newest last
            return _SHARED_UPDATERS[key]
        optimizer, schedule = optimizer_from_config(exp.optim, total_steps)
        updater = Updater(policy.config, optimizer, exp.loss, t.micro_batch_size, mesh,
                          policy.params, exp.model.training_memory(),
                          width_multiple=WIDTH_MULTIPLE, schedule=schedule,
                          norm_constant=norm_constant, lora=policy.lora,
                          compiler_options=cpu_compiler_options(exp.model.cpu_library_fusions))
    except ValueError as e:
        raise ConfigError("mesh", str(e)) from e
    if key is not None:
        _SHARED_UPDATERS[key] = updater
        while len(_SHARED_UPDATERS) > _SHARED_UPDATERS_KEPT:
            del _SHARED_UPDATERS[next(iter(_SHARED_UPDATERS))]
    return updater


def build_pipeline(exp: Experiment, policy: Policy) -> Pipeline:
    """Every part of a training step for `policy` (checked with `check_experiment` first)."""
    check_experiment(exp)
    make_env = exp.env.factory()
    labels = rollout_labels(exp)
    return Pipeline(
        strategy=build_strategy(exp.rollout, policy.config, policy.tokenizer, make_env, labels),
        rewards=build_rewards(exp.reward), filter=build_filter(exp.filter),
        advantage=build_advantage(exp.advantage),
        updater=build_updater(exp, policy, make_env().max_steps),
        evaluator=Evaluator(policy.config, policy.tokenizer, exp.env.eval_factory(),
                            exp.rollout.engine(), exp.eval),
        labels=labels)

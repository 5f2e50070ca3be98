"""The optimizer of the update step: config section `optim`, AdamW after global-norm clipping on a
linear warm-up then constant or cosine schedule.

    optimizer, schedule = optimizer_from_config(exp.optim, total_steps)
"""

from __future__ import annotations

import dataclasses

import optax

from jaxtree.config import Section, between, non_negative, one_of, option, positive

SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass(frozen=True)
class OptimConfig(Section):
    """Config section `optim`: AdamW after global-norm clipping, on a warm-up + decay schedule."""

    learning_rate: float = option(5e-4, "peak learning rate", check=positive())
    schedule: str = option("constant", "after warm-up: 'constant', or 'cosine' decay to 10%",
                           check=one_of(SCHEDULES))
    warmup_steps: int = option(0, "optimizer steps of linear warm-up from 0",
                               check=non_negative())
    weight_decay: float = option(0.0, "AdamW weight decay", check=non_negative())
    max_grad_norm: float = option(1.0, "global gradient-norm clip", check=positive())
    b1: float = option(0.9, "Adam β1", check=between(0, 1, high_open=True))
    b2: float = option(0.999, "Adam β2", check=between(0, 1, high_open=True))


def make_schedule(learning_rate: float, *, warmup_steps: int = 0, total_steps: int = 1,
                  schedule: str = "constant") -> optax.Schedule:
    """Linear warm-up to `learning_rate`, then constant or cosine decay to 10% by `total_steps`."""
    if schedule == "constant":
        after = optax.constant_schedule(learning_rate)
    elif schedule == "cosine":
        after = optax.cosine_decay_schedule(learning_rate, max(total_steps - warmup_steps, 1),
                                            alpha=0.1)
    else:
        raise ValueError(f"schedule={schedule!r}: expected one of {SCHEDULES}")
    if warmup_steps <= 0:
        return after
    warmup = optax.linear_schedule(0.0, learning_rate, warmup_steps)
    return optax.join_schedules([warmup, after], [warmup_steps])


def make_optimizer(schedule: optax.Schedule, *, weight_decay: float = 0.0,
                   max_grad_norm: float = 1.0, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8) -> optax.GradientTransformation:
    """Global-norm gradient clipping, then AdamW on `schedule`."""
    return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                       optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))


def optimizer_from_config(optim: OptimConfig, total_steps: int):
    """(optimizer, schedule) of an `optim` section for a run of `total_steps` optimizer steps."""
    schedule = make_schedule(optim.learning_rate, warmup_steps=optim.warmup_steps,
                             total_steps=total_steps, schedule=optim.schedule)
    return make_optimizer(schedule, weight_decay=optim.weight_decay,
                          max_grad_norm=optim.max_grad_norm, b1=optim.b1, b2=optim.b2), schedule

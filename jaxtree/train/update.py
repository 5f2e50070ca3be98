"""The policy update: clipped-surrogate loss, gradient accumulation, optax, sharded and jitted.

One call of the update step consumes one minibatch, a `losses.Minibatch` (tokens, action mask,
behaviour and reference log-probs, advantages and aggregation weights, each [B, T]) whose loss is
`losses.minibatch_loss`.

B is split into micro-batches of micro_batch_size rows whose gradients and loss sums add up, so
memory is bounded by one micro-batch's activations. Two ways, the same sums up to float
reassociation:

  fused      (`update_step`) one jitted call: `lax.scan` over B / micro_batch_size micro-batches,
             all as wide as the minibatch, rows taken strided (rows m, m + M, m + 2M, ...) so that,
             with the batch split over data x fsdp, every device holds its share of every
             micro-batch and no rows move between devices.
  by length  (`Updater.step(..., by_length=True)`, the trainer's default) rows sorted by the width
             they need (one past their last action token: causal attention never lets an earlier
             token see a later one), each micro-batch cut to its own rows' width (rounded up to
             `width_multiple`); micro-batches of one width are accumulated by one jitted
             `lax.scan` call (power-of-two counts: `accumulation_calls`), then one jitted
             optimizer step; rows with no action token are left out. When one long episode widens
             the minibatch (a multi-turn episode among one-turn ones), only its own micro-batch
             pays for the width.

A non-finite loss or gradient norm leaves params and optimizer state unchanged and reports
`skipped` = 1; the step counter still advances, so the schedule and the log stay aligned.

With LoRA (`jaxtree.models.lora`) the trained params are the adapters: the frozen base is an
explicit input of each jitted step (held once, never donated), gradients and optimizer state
cover the adapters alone, and the model is applied unmerged (no weight gradient of the base).

With `TrainingMemory(action_only=True)` (the default; `model.action_logits`) `Updater.step`
hands every micro-batch to the loss as a `losses.ActionMinibatch`: its action tokens gathered
into K slots per row (K a power of two per accumulation call), so the vocabulary projection runs
at those positions only; the same loss up to float rounding. A plain Minibatch given to the
jitted step is scored at every position.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxtree import losses
from jaxtree.losses import (MINIBATCH_DTYPES, Minibatch,  # noqa: F401 (re-exported)
                            needed_widths, take_micro_batch, take_rows)
from jaxtree.train.optim import (SCHEDULES, OptimConfig,  # noqa: F401 (re-exported)
                                 make_optimizer, make_schedule, optimizer_from_config)
from jaxtree.models.config import ModelConfig
from jaxtree.models.lora import LoraConfig, LoraParams, init_adapters, merge
from jaxtree.models.token_scores import TrainingMemory, token_scores
from jaxtree.parallel import distributed
from jaxtree.parallel import mesh as mesh_lib
from jaxtree.utils import round_up


class TrainState(NamedTuple):
    """Everything the update step changes. step: int32[]; params and opt_state: pytrees."""

    step: jax.Array
    params: Any
    opt_state: Any


def _micro_batches(x: jax.Array, count: int) -> jax.Array:
    """[B, ...] -> [count, B / count, ...] with micro-batch m holding rows m, m + count, ..."""
    rows = x.shape[0] // count
    return x.reshape((rows, count) + x.shape[1:]).swapaxes(0, 1)


def _grad_fn(model_config, loss_config, memory, loss=losses.minibatch_loss, base=None,
             lora_scale=1.0):
    """value_and_grad of `loss` in its params; with `base`, params are LoRA adapters over it."""
    if base is None:
        return jax.value_and_grad(functools.partial(loss, model_config, loss_config, memory),
                                  has_aux=True)
    return jax.value_and_grad(lambda adapters, mb: loss(
        model_config, loss_config, memory, LoraParams(base, adapters, lora_scale), mb),
        has_aux=True)


def loss_sum_keys(loss_config: losses.LossConfig) -> tuple[str, ...]:
    """The names of the loss sums a loss reports for this loss config. Every loss of the update
    (`losses.minibatch_loss`, its action-only and forest forms) ends in `losses.loss_of_scores`,
    so its sums are traced abstractly on a one-token micro-batch: no model forward and backward
    is traced for their names (that trace cost as much as the update step's own)."""
    one_token = Minibatch(*(jax.ShapeDtypeStruct((1, 1), dtype) for dtype in MINIBATCH_DTYPES))
    scores = jax.ShapeDtypeStruct((1, 1), jnp.float32)
    _, sums = jax.eval_shape(functools.partial(losses.loss_of_scores, loss_config), scores,
                             scores, one_token)
    return tuple(sums)


def zero_carry(params, sum_keys: tuple[str, ...]):
    """What `accumulate_gradients` adds to: (zero gradients like `params`, loss 0, the loss sums
    `sum_keys` at 0)."""
    return (jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.float32),
            {k: jnp.zeros((), jnp.float32) for k in sum_keys})


def accumulate_gradients(model_config: ModelConfig, loss_config: losses.LossConfig,
                         memory: TrainingMemory, params, carry, mbs, loss=losses.minibatch_loss,
                         base=None, lora_scale: float = 1.0):
    """`carry` (grads, loss, sums) plus the gradients, losses and loss sums of the micro-batches
    `mbs` (a Minibatch, or what `loss` takes, every field stacked [count, ...]) under
    `lax.scan`; with `base` (LoRA), `params` are adapters over it, and only they get gradients."""
    grad_fn = _grad_fn(model_config, loss_config, memory, loss, base, lora_scale)

    def accumulate(carry, mb):
        grads, loss, sums = carry
        (mb_loss, mb_sums), mb_grads = grad_fn(params, mb)
        grads = jax.tree_util.tree_map(jnp.add, grads, mb_grads)
        sums = {k: sums[k] + mb_sums[k] for k in sums}
        return (grads, loss + mb_loss, sums), None

    carry, _ = jax.lax.scan(accumulate, carry, mbs)
    return carry


def apply_gradients(optimizer: optax.GradientTransformation, state: TrainState, carry):
    """One optimizer step from the accumulated (grads, loss, sums); a non-finite loss or gradient
    norm keeps params and optimizer state. Returns (new state, metrics)."""
    grads, loss, sums = carry
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, new_opt_state = optimizer.update(grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    keep = lambda new, old: jnp.where(finite, new, old)
    params = jax.tree_util.tree_map(keep, new_params, state.params)
    opt_state = jax.tree_util.tree_map(keep, new_opt_state, state.opt_state)
    # the step actually taken in parameter space (after clipping and Adam's normalisation): a
    # gradient spike after a stretch of small gradients shows here, amplified
    update_norm = jnp.where(finite, optax.tree.norm(updates), 0.0)
    metrics = dict(losses.summarize_loss_metrics(sums), loss=loss, grad_norm=grad_norm,
                   update_norm=update_norm, skipped=(~finite).astype(jnp.int32))
    return TrainState(state.step + 1, params, opt_state), metrics


def update_step(model_config: ModelConfig, optimizer: optax.GradientTransformation,
                loss_config: losses.LossConfig, micro_batch_size: int, state: TrainState,
                batch: Minibatch,
                micro_batch_sharding: NamedSharding | None = None,
                memory: TrainingMemory = TrainingMemory(), base=None, lora_scale: float = 1.0,
                loss=losses.minibatch_loss):
    """One optimizer step on one minibatch, fused: every micro-batch as wide as the minibatch.
    `memory` trades compute for activation memory (`jaxtree.models.token_scores`); `base`, as
    in `accumulate_gradients`; `batch` is what `loss` takes (for `losses.minibatch_loss` a
    Minibatch, or an ActionMinibatch: logits at action tokens only), rows first in every
    field.

    Returns (new state, metrics: loss, grad_norm, skipped, learning-rate free loss diagnostics).
    """
    rows = batch.tokens.shape[0]
    if rows % micro_batch_size:
        raise ValueError(f"minibatch of {rows} rows is not a multiple of micro_batch_size="
                         f"{micro_batch_size}")
    count = rows // micro_batch_size
    mbs = jax.tree.map(lambda x: _micro_batches(x, count), batch)
    if micro_batch_sharding is not None:
        mbs = jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, micro_batch_sharding),
                           mbs)
    keys = loss_sum_keys(loss_config)
    carry = accumulate_gradients(model_config, loss_config, memory, state.params,
                                 zero_carry(state.params, keys), mbs, loss=loss, base=base,
                                 lora_scale=lora_scale)
    return apply_gradients(optimizer, state, carry)


def length_groups(widths: np.ndarray, rows: int,
                  width_multiple: int) -> list[tuple[np.ndarray, int]]:
    """Rows in micro-batches of `rows`, grouped by the width they need (`needed_widths`).

    Rows needing width 0 are left out; the others are sorted longest first (ties by row index, so
    the plan is deterministic and equal on every process) and cut into consecutive micro-batches.
    Returns [(row indices int[rows], width)], width = the micro-batch's widest row rounded up to
    `width_multiple`; index -1 marks a filler row in the last micro-batch (no loss).
    """
    widths = np.asarray(widths)
    order = np.argsort(-widths, kind="stable")
    order = order[widths[order] > 0]
    groups = []
    for start in range(0, len(order), rows):
        index = order[start:start + rows]
        width = round_up(int(widths[index[0]]), width_multiple)
        groups.append((np.concatenate([index, np.full(rows - len(index), -1)]), width))
    return groups


def accumulation_calls(groups: list[tuple[np.ndarray, int]]) -> list[tuple[list, int]]:
    """`length_groups`' micro-batches as accumulation calls: runs of consecutive micro-batches
    of one width, each run cut into power-of-two counts, largest first (7 -> 4, 2, 1). A call
    is one `lax.scan` over its micro-batches: on the CPU a micro-batch inside a scan costs ~0.7x
    a call of its own (docs/benchmarks.md), and power-of-two counts bound the compiled shapes at
    log2(micro-batches) + 1 per width. Returns [([row indices of each micro-batch], width)]."""
    calls, start = [], 0
    while start < len(groups):
        width = groups[start][1]
        end = start
        while end < len(groups) and groups[end][1] == width:
            end += 1
        while start < end:
            count = 1 << ((end - start).bit_length() - 1)
            calls.append(([index for index, _ in groups[start:start + count]], width))
            start += count
    return calls


def cpu_compiler_options(library_fusions: bool) -> dict[str, str] | None:
    """XLA options for the update's programs: None (XLA's defaults) unless `library_fusions` is
    False on the CPU backend, which compiles them without XLA:CPU's library (YNNPACK) fusions
    (`model.cpu_library_fusions`: on SmolLM2-135M's update faster, on its sampling slower;
    docs/design.md, "XLA:CPU notes")."""
    if library_fusions or jax.default_backend() != "cpu":
        return None
    return {"xla_cpu_experimental_ynn_fusion_type": ""}


class Updater:
    """The jitted, sharded update step and reference log-probs for one model, optimizer and mesh.

    Parameters and optimizer state live sharded by `mesh.param_shardings`; batches are split by
    rows over data x fsdp (their row count must be a multiple of `row_multiple`, the micro-batch
    size, itself a multiple of data x fsdp so every device gets rows of every micro-batch). The
    state is donated: the caller must use the returned state. In a multi-process job the mesh
    spans every process's devices, every process calls each method with the same host values
    (the whole minibatch), and each places the rows of its own devices (`distributed.put`).
    `memory` trades compute for activation memory (`jaxtree.models.token_scores`), `schedule`
    is the learning-rate schedule (for the log), `norm_constant` seq-sum's C (`minibatch`).
    With `lora`, `params_template` is the base, placed once (`base`, `model_shardings`; never
    copied or donated), and the state's params are adapters (`param_shardings`).
    """

    def __init__(self, model_config: ModelConfig, optimizer: optax.GradientTransformation,
                 loss_config: losses.LossConfig, micro_batch_size: int, mesh: Mesh,
                 params_template, memory: TrainingMemory = TrainingMemory(),
                 width_multiple: int = 64, schedule: optax.Schedule | None = None,
                 norm_constant: float = 0.0, lora: LoraConfig | None = None,
                 compiler_options: dict[str, str] | None = None):
        self.model_config = model_config
        # XLA options of every program that computes the model (the update's steps, the
        # reference and forest log-probs): `cpu_compiler_options`
        self.compiler_options = compiler_options
        self.optimizer = optimizer
        self.schedule = schedule
        self.norm_constant = norm_constant
        self.loss_config = loss_config
        self.memory = memory
        self.mesh = mesh
        self.lora = lora if lora is not None and lora.enabled else None
        self.model_shardings = mesh_lib.param_shardings(params_template, mesh)
        self.base, trainable, self.param_shardings = None, params_template, self.model_shardings
        if self.lora is not None:
            self.base = distributed.put(params_template, self.model_shardings)
            trainable = jax.eval_shape(functools.partial(init_adapters, self.lora), self.base)
            self.param_shardings = mesh_lib.param_shardings(trainable, mesh)
        opt_template = jax.eval_shape(optimizer.init, trainable)
        replicated = mesh_lib.replicated(mesh)
        self.state_shardings = TrainState(
            replicated, self.param_shardings,
            mesh_lib.tree_shardings_like(opt_template, self.param_shardings, trainable, mesh))
        self.batch_sharding = mesh_lib.batch_sharding(mesh)
        parallelism = mesh_lib.batch_parallelism(mesh)
        if micro_batch_size <= 0 or micro_batch_size % parallelism:
            raise ValueError(f"micro_batch_size={micro_batch_size} must be a positive "
                             f"multiple of the batch parallelism data x fsdp = {parallelism}")
        self.row_multiple = micro_batch_size
        self.width_multiple = width_multiple
        mb_sharding = NamedSharding(mesh, P(None, mesh_lib.BATCH_AXES))
        self.micro_batch_sharding = mb_sharding
        # the loss takes a Minibatch, or with memory.action_only an ActionMinibatch (`step`
        # gives it one: `loss_input`), its vocabulary projection at action tokens only
        self._step = self._with_base(
            functools.partial(update_step, model_config, optimizer, loss_config, micro_batch_size,
                              micro_batch_sharding=mb_sharding, memory=memory),
            (self.state_shardings, self.batch_sharding), (self.state_shardings, replicated),
            donate_argnums=(0,))
        # by length: accumulation calls (a scan over micro-batches of one width), then a step
        self._carry_shardings = (self.param_shardings, replicated, replicated)
        self._accumulate = self.jit_accumulate(losses.minibatch_loss)
        self._apply = jax.jit(
            functools.partial(apply_gradients, optimizer),
            in_shardings=(self.state_shardings, self._carry_shardings),
            out_shardings=(self.state_shardings, replicated), donate_argnums=(0,),
            compiler_options=compiler_options)
        self._zero_carry = jax.jit(functools.partial(zero_carry,
                                                     sum_keys=loss_sum_keys(loss_config)),
                                   in_shardings=(self.param_shardings,),
                                   out_shardings=self._carry_shardings)
        self._copy = jax.jit(lambda tree: jax.tree_util.tree_map(jnp.copy, tree),
                             in_shardings=(self.param_shardings,),
                             out_shardings=self.param_shardings)
        self._replicate = jax.jit(lambda tree: tree, in_shardings=(self.model_shardings,),
                                  out_shardings=replicated)
        self._init_opt_state = jax.jit(self.optimizer.init,
                                       out_shardings=self.state_shardings.opt_state)
        self._logprobs = self.jit_scores(
            lambda params, tokens: token_scores(model_config, params, tokens, memory)[0], 1)
        if self.lora is not None:
            self._merge = jax.jit(
                lambda base, adapters: merge(LoraParams(base, adapters, self.lora.scale),
                                             model_config.compute_dtype),
                in_shardings=(self.model_shardings, self.param_shardings),
                out_shardings=self.model_shardings)

    def _with_base(self, fn, in_shardings, out_shardings, donate_argnums=()):
        """`fn(*args)` jitted (with the updater's compiler options); with LoRA `fn(*args, base=,
        lora_scale=)`, the frozen base an explicit input."""
        if self.lora is None:
            return jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings,
                           donate_argnums=donate_argnums, compiler_options=self.compiler_options)
        scale = self.lora.scale
        jitted = jax.jit(lambda base, *args: fn(*args, base=base, lora_scale=scale),
                         in_shardings=(self.model_shardings, *in_shardings),
                         out_shardings=out_shardings,
                         donate_argnums=tuple(i + 1 for i in donate_argnums),
                         compiler_options=self.compiler_options)
        call = functools.partial(jitted, self.base)
        call.lower = functools.partial(jitted.lower, self.base)  # as a jitted function's
        return call

    def jit_accumulate(self, loss):
        """`accumulate_gradients` of `loss` jitted: (state params, carry, stacked
        micro-batches) -> carry, the carry donated."""
        return self._with_base(
            functools.partial(accumulate_gradients, self.model_config, self.loss_config,
                              self.memory, loss=loss),
            (self.param_shardings, self._carry_shardings, self.micro_batch_sharding),
            self._carry_shardings, donate_argnums=(1,))

    def jit_scores(self, fn, batch_args: int):
        """`fn(params, *batch)` jitted (`batch_args` row-split arguments, a row-split result)
        for model params: a plain tree (the model, the LoRA base) or `LoraParams`."""
        jit_for = lambda shardings: jax.jit(  # noqa: E731
            fn, in_shardings=(shardings, *(self.batch_sharding,) * batch_args),
            out_shardings=self.batch_sharding, compiler_options=self.compiler_options)
        plain = jit_for(self.model_shardings)
        if self.lora is None:
            return plain
        adapted = jit_for(LoraParams(self.model_shardings, self.param_shardings, self.lora.scale))
        return lambda p, *args: (adapted if isinstance(p, LoraParams) else plain)(p, *args)

    def init_state(self, params, step: int = 0) -> TrainState:
        """A fresh state for training the policy `params`: a copy of them (the state is donated
        to each step, so it must not share buffers with arrays the caller keeps), or with LoRA
        fresh adapters over the updater's base (which `params` must be)."""
        params = self.place_params(params if self.lora is None
                                   else init_adapters(self.lora, self.base))
        opt_state = self._init_opt_state(params)
        return TrainState(distributed.put(jnp.asarray(step, jnp.int32),
                                          self.state_shardings.step), params, opt_state)

    def place_params(self, params):
        """A sharded copy of train-state `params` that never shares buffers with the input
        (device_put may reuse the input's buffer for one shard of a replicated array)."""
        params = distributed.put(params, self.param_shardings)
        return self._copy(params)

    def reference_params(self, params):
        """The frozen KL reference of training `params`: a placed copy, or with LoRA the base
        itself (which `params` must be: no second copy)."""
        return self.place_params(params) if self.lora is None else self.base

    def policy_params(self, params):
        """The model params of train-state `params` (with LoRA: base + adapters, unmerged)."""
        return params if self.lora is None else LoraParams(self.base, params, self.lora.scale)

    def sampling_params(self, params):
        """Plain model params of train-state `params` for the samplers (with LoRA: W + s A B
        merged into a copy of the adapted kernels, the rest shared with the base)."""
        return params if self.lora is None else self._merge(self.base, params)

    def replicated_params(self, params):
        """`params` gathered whole onto every device of the mesh (an all-gather of the fsdp and
        tensor shards): the source of each process's local copy for rollouts in a
        multi-process job (`jaxtree.parallel.distributed.local_copy`)."""
        return self._replicate(params)

    def minibatch(self, tokens, action_mask, old_logprobs, advantages,
                  ref_logprobs) -> Minibatch:
        """A minibatch of host arrays [B, T] with the loss's aggregation weights."""
        return losses.minibatch(tokens, action_mask, old_logprobs, advantages, ref_logprobs,
                                self.loss_config, self.norm_constant)

    def step(self, state: TrainState, batch: Minibatch,
             by_length: bool = False) -> tuple[TrainState, dict]:
        """One optimizer step on the minibatch `batch` (host arrays, B a multiple of
        `row_multiple`): fused, or with micro-batches grouped `by_length`."""
        if not by_length:
            return self._step(state, distributed.put(self.loss_input(batch),
                                                     self.batch_sharding))
        batch = Minibatch(*(np.asarray(x) for x in batch))
        groups = length_groups(needed_widths(batch.action_mask, batch.weights),
                               self.row_multiple, self.width_multiple)
        if not groups:  # no action token at all: an all-zero accumulation, as the fused step
            groups = [(np.full(self.row_multiple, -1), self.width_multiple)]
        carry = self._zero_carry(state.params)
        for indices, width in accumulation_calls(groups):
            mb = self.loss_input(take_micro_batch(batch, np.concatenate(indices), width))
            mbs = jax.tree.map(lambda x: x.reshape(len(indices), self.row_multiple,
                                                   *x.shape[1:]), mb)
            carry = self._accumulate(state.params, carry,
                                     distributed.put(mbs, self.micro_batch_sharding))
        return self._apply(state, carry)

    def loss_input(self, mb: Minibatch):
        """What the update's loss takes of the (micro-)batch `mb` (host arrays [B, T]): `mb`
        itself, or with `memory.action_only` its action tokens in K slots per row
        (`losses.take_action_slots`, K a power of two: `losses.action_slot_count`)."""
        if not self.memory.action_only:
            return Minibatch(*mb)
        mb = Minibatch(*(np.asarray(x) for x in mb))
        return losses.take_action_slots(mb, losses.action_slot_count(mb))

    def logprobs(self, params, tokens, widths: np.ndarray | None = None) -> jax.Array:
        """float32[B, T] log-probs of `tokens` (B a multiple of `row_multiple`), computed in
        micro-batch-sized chunks of rows. With `widths` (int[B], the columns each row needs:
        `needed_widths`), rows are chunked by width and each chunk cut to its own; columns past
        a row's width are 0."""
        size = self.row_multiple
        if widths is None:
            out = [self._logprobs(params, distributed.put(tokens[i:i + size],
                                                          self.batch_sharding))
                   for i in range(0, tokens.shape[0], size)]
            return jnp.concatenate(out, axis=0)
        tokens = np.asarray(tokens)
        out = np.zeros(tokens.shape, np.float32)
        for index, width in length_groups(widths, size, self.width_multiple):
            chunk = take_rows(tokens, index, width, zero_fillers=False)
            scores = distributed.host_array(self._logprobs(
                params, distributed.put(chunk, self.batch_sharding)))
            real = index >= 0
            keep = min(width, tokens.shape[1])
            out[index[real], :keep] = scores[real, :keep]
        out[np.arange(tokens.shape[1]) >= np.asarray(widths)[:, None]] = 0.0
        return jnp.asarray(out)

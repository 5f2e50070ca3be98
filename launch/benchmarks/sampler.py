"""Sampler throughput: jaxtree's jitted sampler vs transformers' PyTorch `generate`.

Both run the same weights (a preset, or any policy `--config.model.name` accepts, such as
`smollm2-135m-instruct`: exported with `save_pretrained` and loaded by transformers),
the same prompts, plain sampling at temperature 1 over the full vocabulary, exactly `new_tokens`
tokens per row (no EOS). Throughput is end-to-end generated tokens per second of a `generate` call
(host preparation, prefill, decode, transfer back), median over repeats after a warm-up call.

For one batch size the result is also compared with the memory-bandwidth floor of decoding: every
decode step must read all weights once and each row's keys/values up to its current length, so
floor time per step = (weight bytes + mean KV bytes) / copy bandwidth. On a CPU at larger batch
sizes the binding limit is arithmetic rather than memory, so the roofline (the larger of that time
and the step's FLOPs at the measured matmul throughput) is reported too.
"""

from __future__ import annotations

import tempfile

import jax
import numpy as np

from jaxtree import models
from jaxtree.policy import load_policy
from jaxtree.sampling import Sampler, SamplingConfig
from jaxtree.tokenizers import ByteTokenizer
from jaxtree.utils import print_table
from launch.benchmarks.common import copy_bandwidth, machine_info, matmul_flops, median_seconds, write_json


def _hf_generate_fn(hf_model, prompts: np.ndarray, new_tokens: int, pad_id: int):
    import torch  # noqa: PLC0415

    ids = torch.as_tensor(prompts, dtype=torch.long, device=hf_model.device)
    mask = torch.ones_like(ids)

    def run():
        with torch.no_grad():
            out = hf_model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                    temperature=1.0, top_k=0, top_p=1.0,
                                    max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                    eos_token_id=None, pad_token_id=pad_id)
        if out.shape[1] != ids.shape[1] + new_tokens:
            raise RuntimeError(f"transformers generated {out.shape[1] - ids.shape[1]} tokens, "
                               f"expected {new_tokens}")
        return out

    return run


def kv_bytes_per_step(config: models.ModelConfig, batch: int, mean_context: float) -> float:
    itemsize = np.dtype(config.compute_dtype).itemsize
    return (config.num_layers * 2 * batch * config.num_kv_heads * config.head_dim * itemsize
            * mean_context)


def flops_per_step(config: models.ModelConfig, batch: int, mean_context: float) -> float:
    """Multiply-adds x 2 of one decode step: every parameter once per row (the tied output
    projection included) plus q.k and p.v over the mean context."""
    attention = 4 * config.num_layers * config.num_heads * config.head_dim * mean_context
    return batch * (2 * config.num_params() + attention)


def _model(name: str, dtype: str | None) -> tuple[models.ModelConfig, dict, int]:
    """(config, params, pad id) of a preset (random init, seed 0) or a policy spec."""
    if name in models.PRESETS:
        config = models.get_preset(name, dtype=dtype)
        return config, models.init_params(config, jax.random.key(0)), ByteTokenizer().pad_id
    policy = load_policy(name, dtype=dtype)
    return policy.config, policy.params, policy.tokenizer.pad_id


def run(models_list, batches, new_tokens, prompt_len, repeats, floor_batch, output, with_hf=True,
        dtype: str | None = None, copy_bytes: int = 256 * 1024**2):
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    rng = np.random.default_rng(0)
    bandwidth = copy_bandwidth(copy_bytes)
    peak_flops = matmul_flops()
    results, rows = [], []
    for name in models_list:
        config, params, pad_id = _model(name, dtype)
        hf_model = None
        if with_hf:
            with tempfile.TemporaryDirectory() as tmp:
                models.save_pretrained(tmp, config, params)
                hf_model = transformers.AutoModelForCausalLM.from_pretrained(
                    tmp, dtype=getattr(torch, config.param_dtype)).eval()
                if torch.cuda.is_available():  # the baseline on the same accelerator
                    hf_model = hf_model.to("cuda")
        sampler = Sampler(config, SamplingConfig(temperature=1.0), new_tokens, pad_id=pad_id)
        for batch in batches:
            prompts = rng.integers(0, 256, size=(batch, prompt_len))
            prompt_lists = prompts.tolist()
            keys = iter(jax.random.split(jax.random.key(1), repeats + 1))

            def ours():
                result = sampler.generate(params, prompt_lists, next(keys))
                assert all(len(t) == new_tokens for t in result.tokens)

            ours_s, ours_all = median_seconds(ours, repeats)
            entry = {"model": name, "params": config.num_params(), "batch": batch,
                     "dtype": config.dtype,
                     "new_tokens": new_tokens, "prompt_len": prompt_len,
                     "jaxtree_seconds": ours_all, "jaxtree_tokens_per_s": batch * new_tokens / ours_s}
            if hf_model is not None:
                hf_s, hf_all = median_seconds(
                    _hf_generate_fn(hf_model, prompts, new_tokens, pad_id), repeats)
                entry.update(transformers_seconds=hf_all,
                             transformers_tokens_per_s=batch * new_tokens / hf_s,
                             speedup=hf_s / ours_s)
            if batch == floor_batch:
                weight_bytes = config.num_params() * np.dtype(config.weight_dtype).itemsize
                mean_context = prompt_len + (new_tokens + 1) / 2
                step_bytes = weight_bytes + kv_bytes_per_step(config, batch, mean_context)
                step_flops = flops_per_step(config, batch, mean_context)
                floor_tokens_per_s = batch * bandwidth / step_bytes
                roofline_tokens_per_s = batch / max(step_bytes / bandwidth, step_flops / peak_flops)
                entry.update(bytes_per_decode_step=step_bytes, flops_per_decode_step=step_flops,
                             floor_tokens_per_s=floor_tokens_per_s,
                             fraction_of_floor=entry["jaxtree_tokens_per_s"] / floor_tokens_per_s,
                             roofline_tokens_per_s=roofline_tokens_per_s,
                             fraction_of_roofline=(entry["jaxtree_tokens_per_s"]
                                                   / roofline_tokens_per_s))
            results.append(entry)
            rows.append([name, f"{config.num_params() / 1e6:.1f}M", batch,
                         entry["jaxtree_tokens_per_s"], entry.get("transformers_tokens_per_s", "-"),
                         f"{entry['speedup']:.1f}x" if "speedup" in entry else "-",
                         f"{entry['fraction_of_floor']:.0%}" if "fraction_of_floor" in entry
                         else "",
                         f"{entry['fraction_of_roofline']:.0%}" if "fraction_of_roofline" in entry
                         else ""])
            print(f"  {name} batch {batch}: {entry['jaxtree_tokens_per_s']:,.0f} tok/s", flush=True)
        compile_s = sum(e.seconds for e in sampler.compile_events)
        print(f"  {name}: {sampler.num_compiles} compilations, {compile_s:.1f}s")
        results.append({"model": name, "compilations": sampler.num_compiles,
                        "compile_seconds": compile_s})

    print(f"\nsampler: {new_tokens} new tokens, prompt {prompt_len}, median of {repeats}; "
          f"copy bandwidth {bandwidth / 1e9:.1f} GB/s, matmul {peak_flops / 1e9:.0f} GFLOP/s")
    table = print_table(["model", "params", "batch", "jaxtree tok/s", "transformers tok/s",
                         "speedup", "of bandwidth floor", "of roofline"], rows)
    write_json(output, {"benchmark": "sampler", "machine": machine_info(),
                        "copy_bandwidth_bytes_per_s": bandwidth, "matmul_flops_per_s": peak_flops,
                        "repeats": repeats,
                        "results": results, "table": table})

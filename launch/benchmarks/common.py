"""Timing, machine description and reporting shared by the benchmarks."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from typing import Callable

import jax
import numpy as np


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> tuple[float, list]:
    """Runs fn warmup times untimed, then `repeats` times; returns (median seconds, all times)."""
    return interleaved_median_seconds({"fn": fn}, repeats, warmup)["fn"]


def seeded_median_seconds(fn: Callable[[int], object], repeats: int) -> tuple[float, list, list]:
    """fn(0) untimed (it compiles), then fn(1), ..., fn(repeats) timed: (median seconds, all
    times, the timed calls' return values). Each call gets its own seed."""
    seeds, outputs = iter(range(repeats + 1)), []
    seconds, times = median_seconds(lambda: outputs.append(fn(next(seeds))), repeats)
    return seconds, times, outputs[1:]


def interleaved_median_seconds(fns: dict[str, Callable[[], object]], repeats: int,
                               warmup: int = 1) -> dict[str, tuple[float, list]]:
    """`median_seconds` for several variants timed in turn within each repeat (A B A B ...), so
    a drift in the machine's speed during the run affects every variant alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(t), t) for name, t in times.items()}


def copy_bandwidth(num_bytes: int = 256 * 1024**2, repeats: int = 5) -> float:
    """Main-memory copy bandwidth in bytes/s, counting the read and the write (STREAM 'copy')."""
    src = np.ones(num_bytes // 4, np.float32)
    dst = np.empty_like(src)
    seconds, _ = median_seconds(lambda: np.copyto(dst, src), repeats)
    return 2 * num_bytes / seconds


def matmul_flops(n: int = 1024, repeats: int = 5) -> float:
    """float32 matmul throughput of the default JAX device, in FLOP/s (an n x n x n product)."""
    a = jax.numpy.ones((n, n), jax.numpy.float32)
    matmul = jax.jit(lambda x, y: x @ y)
    seconds, _ = median_seconds(lambda: matmul(a, a).block_until_ready(), repeats)
    return 2 * n**3 / seconds


def machine_info() -> dict:
    import torch  # noqa: PLC0415  (only benchmarks that compare against PyTorch need it)

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def write_json(path: str, payload: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}")

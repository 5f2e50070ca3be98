"""Test set-up: CPU only, float32 matmuls at full precision, shared tiny models."""

import atexit
import gc
import os
import shutil
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests run tiny shapes, where XLA's compile time dwarfs the run time: the LLVM backend's
# cheapest optimisation level, with XLA:CPU's elemental emitters instead of its fusion emitters,
# compiles the toy update step in 1.0 s instead of 2.3 s with default flags (1.7 s with the
# optimisation level alone), and runs it in 136 ms instead of 47 ms: the right trade for tests,
# which run a few steps of many programs (the suite: 283 s -> 242 s on 2 cores with the emitter
# flag added), not for training. Values agree within every test's tolerance. Skipping LLVM's
# expensive passes as well takes another 6-10% off compile-heavy files (tests/test_train.py 22.4 s
# -> 20.9 s of CPU, test_latr_rollout.py + test_sampler.py 37.3 s -> 34.2 s), numbers unchanged
# (the pipeline digests hold).
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false "
                  "--xla_llvm_disable_expensive_passes=true")
os.environ.setdefault("XLA_FLAGS", TEST_XLA_FLAGS)
# One persistent XLA compilation cache for the session, shared by the xdist workers and the jobs
# tests start as subprocesses (launch.train, launch.sft, ...): a program compiled once, in any
# process, is loaded instead of compiled again. Compilation is most of the suite's time on CPU.
_OWN_XLA_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # else a user's, or the xdist controller's
    _OWN_XLA_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(
        prefix="jaxtree-tests-xla-cache-")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402
import pytest  # noqa: E402

from jaxtree import models  # noqa: E402


# The slowest test files (seconds on the 2-core CI machine, compile-dominated), slowest first.
# The xdist workers take whole files in collection order as they become free (pytest.ini's
# --no-loadscope-reorder: xdist would otherwise order files by their number of tests); starting
# with the longest files (longest-processing-time-first) keeps the two workers' loads even, so
# the suite ends when both finish rather than after one worker's tail of long files.
SLOW_FILES = ("test_readme_commands.py", "test_pipeline_digests.py", "test_prefix_update.py",
              "test_benchmarks.py", "test_lora.py", "test_job_faults.py", "test_latr.py",
              "test_gguf.py", "test_multihost.py", "test_trainer.py", "test_rollout.py",
              "test_launch.py", "test_train.py", "test_sampler.py", "test_token_scores.py",
              "test_sft.py", "test_model_parity.py", "test_patr.py", "test_latr_rollout.py",
              "test_composition.py", "test_compare.py", "test_launch_errors_eval.py",
              "test_losses.py", "test_serve.py", "test_advantages.py", "test_protocol.py",
              "test_mini_swe.py", "test_evaluation.py", "test_edit_distance.py",
              "test_kv_cache.py", "test_export.py", "test_vpr.py", "test_mc_values.py",
              "test_prm.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))  # stable


def pytest_configure(config):
    """Garbage collection sized for a session that compiles thousands of programs: a full
    collection scans every object alive (the caches of compiled programs grow to millions), and
    with Python's default thresholds a worker ran about 30 of them (12-15 s of a worker's ~350 s),
    plus pytest's five at the session's end (another 7 s). Generation-0 collections ten times
    rarer make full ones rarer in proportion; one collection at the end still finds every
    unreachable cycle for the unraisable-exception check."""
    gc.set_threshold(10_000, 10, 10)
    try:  # pytest's own knob (a stash key its tests set); a pytest without it keeps its five
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:
        return
    config.stash[gc_collect_iterations_key] = 1


def pytest_collection_finish(session):
    """What is alive once the tests are collected (the modules of JAX, PyTorch, transformers and
    the project, millions of objects) lives until the end: frozen, full collections skip it
    (a worker's time in collections over four of the slowest files: 4.4-4.6 s -> 3.2-4.1 s)."""
    gc.collect()
    gc.freeze()


@atexit.register
def _remove_own_cache():
    """The process that created the session's compilation cache removes it as it exits (a pytest
    session, or a script that imports this module: tests/pipeline_digests.py)."""
    if _OWN_XLA_CACHE is not None:
        shutil.rmtree(_OWN_XLA_CACHE, ignore_errors=True)


if os.environ.get("PYTEST_XDIST_WORKER"):
    @atexit.register  # after JAX's own exit handler (imported above), so it runs first
    def _end_worker_now():
        """An xdist worker has reported everything when its interpreter exits; what would follow
        is JAX's exit handler, which clears the caches of thousands of compiled programs, and the
        interpreter's teardown of every object: seconds of a worker's tail that the run waits
        for (JAX's handler alone took 4 s a worker, py-spy). Exit handlers registered later (the
        tests' fork servers) have run by now."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


@pytest.fixture(scope="session")
def tiny():
    """(config, params) of the tiny preset with two decoder blocks instead of four, random init.
    Two blocks still catch a block that reads another block's cache or parameters; the model
    unrolls its blocks, so each further one is traced, lowered and compiled again in every
    program (test_rollout.py + test_patr.py: 37.5-44.5 s with four blocks, 31.7 s with two)."""
    config = models.get_preset("tiny").replace(num_layers=2)
    return config, models.init_params(config, jax.random.key(0))

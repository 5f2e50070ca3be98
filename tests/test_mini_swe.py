"""mini-SWE: the task bank and its mutations, the oracle on every task, sandbox containment of
hostile code, directory cleanup, the TextEnv protocol, signatures, verifier and process score.

Sandbox runs cost ~50 ms each; hostile code is pointed at a sentinel directory created here, never
at real host paths.
"""

import gc
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import environments
from environments import mini_swe_inprocess as inprocess
from environments import mini_swe_mutations as mutations
from environments import mini_swe_tasks as tasks
from environments.mini_swe import Command, MiniSWE, rtmc_action_signature, truncate
from environments.mini_swe_sandbox import ROOT_PREFIX, Sandbox, sweep_stale_roots
from run_processes import processes_of_runs

REPO = Path(__file__).parents[1]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def make(**options) -> MiniSWE:
    return environments.make("mini_swe", **options)


def play(env, text):
    return env.step(text)


def oracle_play(env):
    """Plays the oracle to the end; returns the infos."""
    infos = []
    while not env.done:
        action = env.oracle_action()
        assert env.verify(action), action
        infos.append(env.step(env.answer_text(action))[3])
    return infos


def snapshot(env):
    return (env.render(), env.state_signature(), env.canonical_state(), env.done, env.num_steps,
            env.total_reward)


# ---------------------------------------------------------------------- the bank


def test_bank_modules_splits_and_sources():
    single = {n for n, task in tasks.TASKS.items() if not task.two_file}
    pairs = {n for n, task in tasks.TASKS.items() if task.two_file}
    assert len(single) >= 30 and len(pairs) >= 6
    train_single, train_pairs = tasks.SPLITS["train"]
    test_single, test_pairs = tasks.SPLITS["test"]
    assert set(train_single) | set(test_single) == single
    assert set(train_pairs) | set(test_pairs) == pairs
    assert not set(train_single + train_pairs) & set(test_single + test_pairs)
    assert len(test_single) >= 6 and len(test_pairs) >= 2
    names = set()
    for task in tasks.TASKS.values():
        assert task.test_file in task.sources and task.target in task.source_files
        assert task.two_file == (len(task.source_files) == 2)
        if task.two_file:  # the bug goes into the helper, which the main module imports
            main = task.sources[f"{task.main}.py"]
            assert f"from {task.target[:-3]} import" in main and task.target != f"{task.main}.py"
        for name, source in task.files:
            assert source.isascii() and source.startswith('"""'), name
            assert name[:-3] not in sys.stdlib_module_names and name not in names
            names.add(name)
            if name == task.test_file:
                assert re.search(r"^def test_", source, re.MULTILINE)
            else:  # no word PATR's phase rules read as verification (module docstring)
                assert not re.search(r"\b(pass(ed)?|tests?|fail(ed|ure)?)\b", source,
                                     re.IGNORECASE), name
        assert task.hidden


def test_the_bank_is_a_task_directory_read_by_the_task_dir_loader():
    """One task format: the built-in bank is the directory BANK_DIR, read by the loader that
    `task_dir=` uses (in its order.txt order, files exactly as stored), and `task_dir=` pointed at
    it draws the bank's tasks. Its files are data, not a package."""
    bank = Path(tasks.BANK_DIR)
    assert list(tasks.TASKS) == (bank / tasks.ORDER_FILE).read_text().split()
    loaded = tasks.load_task_directory(tasks.BANK_DIR)
    for split, (single, pairs) in tasks.SPLITS.items():
        assert tuple(t.name for t in loaded[split]) == tuple(
            n for n in tasks.TASKS if n in single + pairs)
        assert all(t == tasks.TASKS[t.name] for t in loaded[split])
        assert [t.name for t in loaded[split] if not t.two_file] == list(single)
    for task in tasks.TASKS.values():
        assert {p.name: p.read_text() for p in (bank / task.name).glob("*.py")} == task.sources
    assert not list(bank.rglob("__init__.py"))
    env = make(task_dir=tasks.BANK_DIR, split="test")
    assert env._tasks == {t.name: t for t in loaded["test"]}
    env.reset(0)
    assert oracle_play(env)[-1]["success"]
    env.close()


def test_every_task_fails_before_and_the_oracle_fix_passes_every_test():
    """All tasks of both splits, every kept mutation, in process (no sandbox): the unmodified code
    passes its visible tests and hidden cases; at least one visible test fails on each mutant; the
    oracle's edit (the inverse mutation) makes the visible and the hidden tests pass again."""
    counts = dict.fromkeys(mutations.OPERATORS, 0)
    for name, task in tasks.TASKS.items():
        assert inprocess.run_in_process(task, task.sources, hidden=True).ok, name
        env = make(module=name)
        env.reset(0)
        kept = mutations.valid_mutations(task)
        assert kept, name
        for mutation, failing in kept:
            counts[mutation.operator] += 1
            mutant = mutation.apply(task.sources[task.target])
            outcome = inprocess.run_in_process(task, {**task.sources, task.target: mutant})
            assert failing and outcome.failed == failing and not outcome.looped, mutation
            env._files = {**task.sources, task.target: mutant}
            env._seen = {n: frozenset(range(1, 1000)) for n in env._files}  # skip the view
            fix = env.oracle_action()
            assert fix.kind == "edit" and fix.path == task.target and env.verify(fix), mutation
            assert env.parse_action(env.answer_text(fix)) == fix
            fixed = env._files[task.target].split("\n")
            fixed[fix.start - 1:fix.end] = fix.text.split("\n") if fix.text else []
            fixed = "\n".join(fixed)
            assert inprocess.run_in_process(task, {**task.sources, task.target: fixed},
                                            hidden=True).ok, mutation
        env.close()
    assert all(n >= 20 for n in counts.values()), counts


def _hidden_failures(task, sources) -> int:
    outcome = inprocess.run_in_process(task, sources, hidden=True)
    return outcome.hidden_failed + outcome.looped  # a loop: in the sandbox, a limit stops it


def test_the_hidden_cases_catch_every_planted_bug():
    """`submit` pays on the hidden cases alone: for every task and every mutation the operators
    can plant, at least one hidden case fails (in process, the trusted runner), and the
    unmodified code passes them all; so the environment draws every kept mutation."""
    for name, task in tasks.TASKS.items():
        assert task.hidden and not _hidden_failures(task, task.sources), name
        source = task.sources[task.target]
        for mutation, _ in mutations.valid_mutations(task):
            assert _hidden_failures(task, {**task.sources, task.target: mutation.apply(source)}), (
                name, mutation.description)


def test_a_task_needs_hidden_cases_that_catch_its_bugs(tmp_path):
    """A task without hidden cases is refused; a mutation every hidden case passes is never
    planted (it would pay unrepaired)."""
    with pytest.raises(ValueError, match="no hidden case"):
        tasks.load_task(str(_swap_task(tmp_path / "none", "swap_none")))
    weak = '("swap", ((1, 1),), (1, 1))\n'  # swapping equal items: blind to most bugs
    _swap_task(tmp_path / "weak", "swap_weak", hidden_txt=weak)
    env = make(task_dir=str(tmp_path / "weak"))
    env.reset(0)
    task, source = env.task, env.task.sources[env.task.target]
    blind = {m for m, _ in mutations.valid_mutations(task)
             if not _hidden_failures(task, {**task.sources, task.target: m.apply(source)})}
    assert blind and len(blind) < len(mutations.valid_mutations(env.task))
    for seed in range(30):
        env.reset(seed)
        assert env.mutation not in blind
    strong = weak + '("swap", ((1, 2),), (2, 1))\n'
    _swap_task(tmp_path / "strong", "swap_strong", hidden_txt=strong)
    env = make(task_dir=str(tmp_path / "strong"))
    for seed in range(3):
        env.reset(seed)
        assert oracle_play(env)[-1]["success"]
    env.close()


def test_mutations_are_single_sites_of_their_operator():
    task = tasks.TASKS["wordwrap"]
    source = task.sources[task.target]
    for mutation, _ in mutations.valid_mutations(task):
        assert mutation.operator in mutations.OPERATORS
        assert source.split("\n")[mutation.start - 1:mutation.end] == list(mutation.old_lines)
        if mutation.operator == "dropped_branch" and not mutation.new_lines:
            assert mutation.old_lines[0].lstrip().startswith(("if ", "elif ", "else"))
        else:
            assert len(mutation.old_lines) == len(mutation.new_lines) == 1
    examples = {m.description for m, _ in mutations.valid_mutations(task)}
    assert "<= -> < on line 12" in examples and "elif removed (lines 12-13)" in examples


@pytest.mark.parametrize("operator", mutations.OPERATORS)
def test_each_operator_fails_the_tests_and_the_oracle_fixes_it_through_step(operator):
    module = next(n for n in tasks.SPLITS["train"][0]
                  if operator in mutations.by_operator(tasks.TASKS[n]))
    env = make(module=module, operators=[operator])
    env.reset(1)
    assert env.mutation.operator == operator
    _, reward, done, info = env.step("run_tests")
    assert info["valid"] and reward == 0.0 and not done and info["sandbox"] is None
    assert info["tests_failed"] == len(env._failing) > 0 and not info["validation"]
    infos = oracle_play(env)
    assert infos[-1]["success"] and env.total_reward == 1.0
    assert [i["action"].split()[0] for i in infos] == ["view", "edit", "run_tests", "submit"]


def test_oracle_solves_held_out_tasks_end_to_end():
    env = make(split="test", two_file=0.5)
    seen_pairs = set()
    for seed in range(10):
        env.reset(seed)
        assert env.task.name in tasks.SPLITS["test"][0] + tasks.SPLITS["test"][1]
        seen_pairs.add(env.task.two_file)
        infos = oracle_play(env)
        assert infos[-1]["success"] and len(infos) == 4, (seed, env.task.name)
    assert seen_pairs == {True, False}


def test_task_draw_is_a_function_of_the_seed_and_respects_the_split():
    env, twin = make(), make()
    for seed in range(30):
        first = env.reset(seed)
        assert twin.reset(seed) == first and env.mutation == twin.mutation
        assert env.task.name in tasks.SPLITS["train"][0]
    test_env = make(split="test", two_file=1.0)
    for seed in range(10):
        test_env.reset(seed)
        assert test_env.task.two_file and test_env.task.name in tasks.SPLITS["test"][1]
    assert len({make().reset(s) for s in range(12)}) > 6


# ---------------------------------------------------------------------- sandbox containment


@pytest.fixture
def sentinel():
    """A world-writable directory outside every sandbox, so that only the sandbox protects it."""
    path = tempfile.mkdtemp(prefix="mini-swe-sentinel-")
    os.chmod(path, 0o777)
    keep = os.path.join(path, "keep.txt")
    with open(keep, "w") as f:
        f.write("keep")
    os.chmod(keep, 0o666)
    yield path
    shutil.rmtree(path, ignore_errors=True)


HOSTILE = {
    "rm_rf": ("import os\nos.system('rm -rf {sentinel}')", "process"),
    "rmtree": ("import shutil\nshutil.rmtree('{sentinel}')", "filesystem"),
    "overwrite": ("open('{sentinel}/keep.txt', 'w').write('gone')", "filesystem"),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", "process"),
    "infinite_loop": ("while True:\n    x = 1", "cpu"),
    "sleep": ("import time\ntime.sleep(60)", "timeout"),
    "gigabyte_of_output": ("import sys\nfor _ in range(1000):\n    sys.stdout.write('x' * 1000000)",
                           "output"),
    "socket": ("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=3)", "network"),
    "memory": ("x = bytearray(4 * 1024 ** 3)", "memory"),
    "hard_exit": ("import os\nos._exit(0)", "crash"),
    "fill_the_disk": ("for i in range(100000):\n    open('f%d' % i, 'w').write('x' * 1000000)",
                      "filesystem"),
}


def _hostile_turn(env, code, expected):
    """Plants `code` at the top of the module, runs the tests: one failed turn, nothing else."""
    env.step(f"edit scaling.py 1 0\n{code}")
    before = (env._files.copy(), env.num_steps, env.num_invalid)
    observation, reward, done, info = env.step("run_tests")
    assert info["valid"] and reward == 0.0 and not done, observation
    assert info["sandbox"] == expected, (expected, observation)
    assert info["tests_passed"] == 0 or expected == "process", observation
    assert env._files == before[0] and env.num_steps == before[1] + 1
    assert env.num_invalid == before[2]
    # The episode goes on: the next turn works and the oracle still repairs the module.
    assert env.step("view scaling.py 1 3")[3]["valid"]
    assert not env.done


def _sandbox_processes(deadline: float = 2.0) -> list[str]:
    """Processes of this process's runs that still exist after up to `deadline` seconds."""
    return processes_of_runs(deadline) if IS_ROOT else []


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_code_costs_one_turn_and_reports_the_limit(case, sentinel):
    code, expected = HOSTILE[case]
    env = make(module="scaling", cpu_limit=1, time_limit=1.5 if case == "sleep" else 10.0,
               cache_runs=False)
    env.reset(0)
    _hostile_turn(env, code.format(sentinel=sentinel), expected)
    assert Path(sentinel, "keep.txt").read_text() == "keep"
    assert not _sandbox_processes()


def _kernel_layers():
    return Sandbox(strict=False).isolation()


@pytest.mark.parametrize("case,expected", [("rm_rf", "process"), ("overwrite", "filesystem"),
                                           ("fork_bomb", "process"), ("socket", "network"),
                                           ("fill_the_disk", "filesystem")])
def test_kernel_layers_contain_hostile_code_without_the_audit_hook(case, expected, sentinel):
    """strict_sandbox=False: the audit hook only watches; the uid drop, Landlock, RLIMIT_NPROC and
    the network namespace stop the code."""
    layers = _kernel_layers()
    if not ({"uid", "netns"} <= set(layers) and any(x.startswith("landlock") for x in layers)):
        pytest.skip(f"kernel isolation layers unavailable here: {layers}")
    env = make(module="scaling", strict_sandbox=False, cpu_limit=2, cache_runs=False)
    env.reset(0)
    code = HOSTILE[case][0].format(sentinel=sentinel)
    env.step(f"edit scaling.py 1 0\n{code}")
    observation, reward, done, info = env.step("run_tests")
    assert info["valid"] and reward == 0.0 and not done
    assert info["sandbox"] == expected, observation
    assert Path(sentinel, "keep.txt").read_text() == "keep"
    if case == "socket":  # refused by the kernel (seccomp, namespace, Landlock), not by Python
        assert re.search(r"Errno (1|101|13)\]|Network is unreachable|not permitted", observation)
    assert not _sandbox_processes()


def test_isolation_layers_in_effect_are_named():
    """isolation() names kernel-enforced layers only; the audit hook is diagnostics."""
    sandbox = Sandbox()
    layers = sandbox.isolation()
    assert "rlimits" in layers and not any(layer.startswith("audit") for layer in layers)
    assert sandbox.diagnostics() == ("audit-strict",)
    assert Sandbox(strict=False).diagnostics() == ("audit",)
    if IS_ROOT and sys.platform.startswith("linux"):
        assert {"netns", "pidns"} <= set(layers)  # root may always unshare these


def test_hidden_cases_compare_exact_types():
    """An object that equals everything passes the visible asserts but not the hidden cases."""
    env = make(module="scaling", operators=["wrong_constant"])
    env.reset(0)
    cheat = "class Anything(float):\n    def __eq__(self, other):\n        return True\n"
    cheat += "".join(f"def {f}(*args):\n    return Anything(0)\n"
                     for f in ("clamp", "rescale", "percent"))
    n = len(env._files["scaling.py"].splitlines())
    assert env.step(f"edit scaling.py {n + 1} {n}\n{cheat.rstrip()}")[3]["valid"]
    info = env.step("run_tests")[3]
    assert info["tests_failed"] == 0 and info["tests_passed"] == 3
    _, reward, done, info = env.step("submit")
    assert done and reward == 0.0 and not info["success"]


# ---------------------------------------------------------------------- paths


def test_path_traversal_absolute_paths_and_symlinks_are_rejected():
    env = make(module="scaling")
    env.reset(0)
    repo = env._workspace.repo
    os.symlink("/etc/passwd", os.path.join(repo, "evil.py"))
    for text in ["view ../../../../etc/passwd", "view /etc/passwd", "view evil.py",
                 "edit ../outside.py 1 1\nx = 1", "edit /tmp/x.py 1 0\nx = 1",
                 "search root ../../etc/passwd", "view ~/.bashrc", "view sub/../../x.py",
                 "edit evil.py 1 1\nx = 1"]:
        observation, reward, _, info = env.step(text)
        assert not info["valid"] and reward == env.format_penalty, text
        assert observation.startswith("Error:") and "root:" not in observation, observation
    # A known file swapped for a symlink behind the environment's back is not followed.
    target = os.path.join(repo, "scaling.py")
    os.unlink(target)
    os.symlink("/etc/passwd", target)
    for text in ["view scaling.py", "edit scaling.py 1 1\nx = 1", "search root scaling.py"]:
        observation, _, _, info = env.step(text)
        assert not info["valid"] and "symbolic link" in observation, observation
    assert Path("/etc/passwd").read_text()  # untouched
    env.close()


# ---------------------------------------------------------------------- directories


def test_directories_are_removed_on_close_reset_and_garbage_collection():
    env = make()
    env.reset(0)
    first = env._workspace.path
    assert os.path.isdir(os.path.join(first, "repo"))
    env.reset(1)
    assert not os.path.exists(first)
    child = env.clone()
    child_dir = child._workspace.path
    assert child_dir != env._workspace.path and os.path.isdir(child_dir)
    del child
    gc.collect()
    assert not os.path.exists(child_dir)
    current = env._workspace.path
    env.close()
    assert not os.path.exists(current)
    with pytest.raises(environments.EnvNotResetError):
        env.render()
    env.reset(2)
    assert env.render()


_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {repo!r})
    import environments
    from jaxtree.train.stop import StopRequest
    env = environments.make("mini_swe")
    env.reset(0)
    keep = [env, env.clone()]
    print(os.path.dirname(env._workspace.path), flush=True)
    if sys.argv[1] == "graceful":
        with StopRequest() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            while not stop.requested:
                time.sleep(0.01)
        sys.exit(0)  # the training job's normal exit after SIGTERM
    os.kill(os.getpid(), signal.SIGTERM)  # default action: no cleanup possible
    time.sleep(30)
""")


@pytest.mark.parametrize("mode", ["graceful", "killed"])
def test_directories_are_removed_after_sigterm(mode):
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(repo=str(REPO)), mode],
                          capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    root = proc.stdout.strip().splitlines()[0]
    assert os.path.basename(root).startswith(ROOT_PREFIX)
    if mode == "graceful":
        assert proc.returncode == 0, proc.stderr
        assert not os.path.exists(root)
    else:
        assert proc.returncode == -signal.SIGTERM
        assert os.path.isdir(root)  # left behind, for the next process to sweep
        assert root in sweep_stale_roots(os.path.dirname(root))
        assert not os.path.exists(root)


# ---------------------------------------------------------------------- clones


def test_clone_copies_the_directory_and_is_independent():
    env = make(module="scaling", operators=["wrong_constant"])
    env.reset(0)
    env.step("view scaling.py 1 5")
    before = snapshot(env)
    disk = Path(env._workspace.repo, "scaling.py").read_text()
    child = env.clone()
    assert snapshot(child) == before
    assert Path(child._workspace.repo, "scaling.py").read_text() == disk
    action = child.oracle_action()
    while action.kind != "edit":
        child.step(child.answer_text(action))
        action = child.oracle_action()
    child.step(child.answer_text(action))
    assert child._files != env._files and snapshot(env) == before
    assert Path(env._workspace.repo, "scaling.py").read_text() == disk
    assert child.step("run_tests")[3]["tests_failed"] == 0
    assert env.step("run_tests")[3]["tests_failed"] > 0
    import copy
    twin = copy.deepcopy(env)
    assert twin._workspace.path != env._workspace.path and snapshot(twin) == snapshot(env)


# ---------------------------------------------------------------------- signatures


def test_state_signatures_are_first_visit_within_an_episode():
    rng = np.random.default_rng(0)
    env = make(action_signatures="rtmc")
    for seed in range(6):
        env.reset(seed)
        seen = [env.state_signature()]
        while not env.done:
            roll = rng.random()
            if roll < 0.3:
                text = "view " + min(env._files)  # repeats: same signature base
            elif roll < 0.45:
                text = "nonsense"
            else:
                action = env.random_action(rng)
                text = env.answer_text(action) if action.kind != "submit" else "run_tests"
            env.step(text)
            seen.append(env.state_signature())
        assert len(seen) == len(set(seen)), seen


def test_equal_signatures_for_equivalent_histories():
    def signature(*texts, **options):
        env = make(module="scaling", **options)
        env.reset(0)
        for text in texts:
            env.step(text)
        return env.state_signature()

    assert signature() == "T0/0"
    a = signature("view scaling.py 1 10", "view test_scaling.py")
    assert a == signature("view test_scaling.py", "view scaling.py 1 10")
    assert a == "scaling.py:V[0]|test_scaling.py:Vf|T0/0"
    assert signature("view scaling.py 1 10") == signature("view scaling.py 5 20")  # one bucket
    assert signature("view scaling.py 1 10") != signature("view scaling.py")
    # First visit: a repeat (or an invalid turn) gets '#k'; what follows matches at any depth.
    assert signature("view scaling.py 1 10", "view scaling.py 1 10").endswith("#1")
    assert signature("view scaling.py 1 10", "bogus", "bogus").endswith("#2")
    edit = "edit scaling.py 2 2\n# note"
    deep = signature("view scaling.py 1 10", "view scaling.py 1 10", edit)
    assert deep == signature("view scaling.py 1 10", edit) == signature("bogus",
                                                                        "view scaling.py 1 9",
                                                                        edit)
    assert re.fullmatch(r"scaling\.py:M:[0-9a-f]{4},V\[0\]\|T0/0", deep)
    assert signature("search clamp") == "scaling.py:S|test_scaling.py:S|T0/0"
    assert signature("run_tests") == "T0/1"


def test_action_signatures():
    env = make()
    view = Command("view", "a.py", 120, 250)
    assert env.action_signature(view) == "view a.py 120 250"  # protocol: the canonical text
    rtmc = make(action_signatures="rtmc")
    assert rtmc.action_signature(view) == "view:partial[1-2]@a.py"
    assert rtmc.action_signature(Command("view", "a.py", 1, 50)) == "view:partial[0]@a.py"
    assert rtmc.action_signature(Command("view", "a.py")) == "view:full@a.py"
    assert rtmc.action_signature(Command("run_tests")) == "test:all"
    assert rtmc.action_signature(Command("run_tests", text="test_x")) == "test:test_x"
    assert rtmc.action_signature(Command("submit")) == "finish"
    assert re.fullmatch(r"search:[0-9a-f]{4}@\*", rtmc_action_signature(Command("search",
                                                                                text="x")))
    edit = rtmc_action_signature(Command("edit", "a.py", 3, 3, "x = 1"))
    assert re.fullmatch(r"modify:replace:[0-9a-f]{4}@a\.py", edit)
    assert rtmc_action_signature(Command("edit", "a.py", 3, 2, "x = 1")).startswith(
        "modify:insert:")
    assert edit != rtmc_action_signature(Command("edit", "a.py", 3, 3, "x = 2"))
    assert rtmc.action_signature(None) == rtmc.action_signature(("view", "a.py")) == "<invalid>"


@pytest.mark.parametrize("mode", ["text", "rtmc"])
def test_one_file_has_one_signature_however_its_path_is_written(mode):
    """`view ./a.py` and `view a.py` are one transition: one action signature (both modes), one
    next state."""
    for plain, written in [("view scaling.py 1 5", "view ./scaling.py 1 5"),
                           ("view scaling.py", "view .//scaling.py"),
                           ("search clamp scaling.py", "search clamp ./scaling.py"),
                           ("edit scaling.py 1 0\n# a note", "edit ./scaling.py 1 0\n# a note")]:
        signatures, states = [], []
        for text in (plain, written):
            env = make(module="scaling", action_signatures=mode)
            env.reset(0)
            action = env.parse_action(text)
            assert env.step(text)[3]["valid"], text
            signatures.append(env.action_signature(action))
            states.append(env.state_signature())
        assert signatures[0] == signatures[1] and states[0] == states[1], (text, signatures)
    env = make(action_signatures=mode)  # illegal paths keep their spelling
    assert "/etc/passwd" in env.action_signature(Command("view", "/etc/passwd"))


def test_a_test_run_signature_carries_its_result():
    """RTMC §4.1: test actions end in :ok / :error, read from the state after the step (as the
    rollout's `action_signature` label is); an unplayed run has no result yet."""
    from jaxtree.rollout.labels import TurnLabeler
    labeler = TurnLabeler(("action_signature",))
    env = make(module="scaling", operators=["wrong_constant"], action_signatures="rtmc")
    env.reset(0)
    run = env.parse_action("run_tests")
    assert env.action_signature(run) == "test:all"
    info = env.step("run_tests")[3]
    assert info["tests_failed"] == 1
    assert labeler.after_step(env, run, info, ()) == {"action_signature": "test:all:error"}
    env.step(env.answer_text(env.oracle_action()))  # view
    env.step(env.answer_text(env.oracle_action()))  # the fix
    info = env.step("run_tests")[3]
    assert info["tests_failed"] == 0
    assert labeler.after_step(env, run, info, ()) == {"action_signature": "test:all:ok"}
    one = env.parse_action("run_tests test_percent")
    env.step("run_tests test_percent")
    assert env.action_signature(one) == "test:test_percent:ok"
    assert make(action_signatures="rtmc").action_signature(run) == "test:all"  # no episode


def test_edits_with_the_same_effect_have_one_signature():
    """An edit's RTMC hash covers the change's old and new text, as the state's M:/I: op does,
    not the line range it was written with."""
    def played(text):
        env = make(module="scaling", operators=["wrong_constant"], action_signatures="rtmc")
        env.reset(0)
        action = env.parse_action(text)
        before = env.action_signature(action)  # from the state the edit meets
        env.step(text)
        return before, env.action_signature(action), env.state_signature(), env._files

    fix = "    return round(100 * part / whole, digits)"
    narrow = played(f"edit scaling.py 21 21\n{fix}")
    wide = played(f"edit scaling.py 20 21\n        return 0.0\n{fix}")
    assert narrow[3] == wide[3]  # the same effect
    assert narrow[0] == narrow[1] == wide[0] == wide[1]
    assert narrow[2] == wide[2]
    digest = re.fullmatch(r"modify:replace:([0-9a-f]{4})@scaling\.py", narrow[1]).group(1)
    assert f"scaling.py:M:{digest}" in narrow[2]  # the action's hash is the state's
    other = played("edit scaling.py 21 21\n    return round(10 * part / whole, digits)")
    assert other[1] != narrow[1] and other[2] != narrow[2]
    inserted = played("edit scaling.py 20 20\n        return 0.0\n# a note")  # keeps line 20
    assert inserted[1].startswith("modify:insert:") and ":I:" in inserted[2]


# ---------------------------------------------------------------------- parsing and text


def test_parse_leniency_and_strictness():
    env = make()
    lenient = {
        "<answer>  VIEW   x.py  1-5 </answer>": Command("view", "x.py", 1, 5),
        "view x.py 1:5": Command("view", "x.py", 1, 5),
        "  view x.py\n\n": Command("view", "x.py"),
        "Edit x.py 3:3\n```python\n    return 1\n```": Command("edit", "x.py", 3, 3,
                                                                "    return 1"),
        "```\nedit x.py 2 3\n  a\n  b\n```": Command("edit", "x.py", 2, 3, "  a\n  b"),
        "edit x.py 4 3\r\n    y = 2  \r\n": Command("edit", "x.py", 4, 3, "    y = 2"),
        "edit x.py 2 4": Command("edit", "x.py", 2, 4, ""),
        "Run Tests": Command("run_tests"), "run-tests": Command("run_tests"),
        "RUN_TESTS test_foo": Command("run_tests", text="test_foo"),
        "<answer>SUBMIT</answer>": Command("submit"),
        'search "a b" x.py': Command("search", "x.py", text="a b"),
        "search  foo bar": Command("search", None, text="foo bar"),
        "search x.py": Command("search", None, text="x.py"),
        "think first <answer>view a.py</answer> then <answer>view b.py</answer>":
            Command("view", "b.py"),
    }
    for text, action in lenient.items():
        assert env.parse_action(text) == action, text
        for style in ("chat", "compact"):
            assert env.parse_action(env.answer_text(action, style)) == action
    for text in ["", "view", "view x.py 5", "view x.py 5 3", "view x.py a b", "edit x.py",
                 "edit x.py a b", "edit x.py 0 1\nx", "edit x.py 5 2\nx", "submit now",
                 "run_tests a b", "run_tests 1x", "frobnicate x.py", "search", "view a b c d",
                 "view x.py\nmore", "<answer></answer>", "search 'unbalanced"]:
        parsed = env.parse_action(text)
        assert parsed is None or text == "search 'unbalanced", (text, parsed)
    assert env.parse_action("search 'unbalanced") == Command("search", text="'unbalanced")


def test_truncation_marker():
    assert truncate("abc", 10) == "abc"
    text = "".join(f"line {i}\n" for i in range(200))
    cut = truncate(text, 300)
    match = re.search(r"\n\[\.\.\. truncated (\d+) chars\]\n", cut)
    assert match and int(match.group(1)) == len(text) - 300
    assert cut.startswith("line 0") and cut.endswith("line 199\n")
    env = make(max_output_chars=200, style="compact")
    env.reset(0)
    observation = env.step("view " + env.task.target)[0]
    assert "[... truncated" in observation and len(observation) < 260


def test_prompts_and_styles():
    chat, compact = make(style="chat"), make(style="compact")
    chat.reset(3)
    compact.reset(3)
    assert "<answer>" in chat.prompt() and chat.system_prompt
    assert chat.prompt("compact") == compact.prompt() and len(compact.prompt()) < len(chat.prompt())
    assert "failing: test_" in compact.render()
    assert chat.task.test_file in chat.render() and "Turns left: 12" in chat.render()
    observation = chat.step("bogus command")[0]
    assert observation.startswith("Error: could not parse")


# ---------------------------------------------------------------------- the protocol


STATE_QUERIES = ["step", "render", "prompt", "canonical_state", "state_signature",
                 "oracle_action", "verify", "turn_score", "random_action", "process_score",
                 "metrics"]


def _call(env, method):
    args = {"step": ("view x.py",), "verify": (Command("submit"),),
            "turn_score": (Command("submit"),), "random_action": (np.random.default_rng(0),)}
    return getattr(env, method)(*args.get(method, ()))


def test_state_queries_before_reset_raise_and_stateless_members_work():
    env = make()
    for method in STATE_QUERIES:
        with pytest.raises(environments.EnvNotResetError,
                           match=rf"^MiniSWE: call reset\(seed\) before {method}\(\)$"):
            _call(env, method)
    assert env.instructions() and env.action_signature(None) == "<invalid>"
    assert env.parse_action("view a.py") == Command("view", "a.py")
    assert env.clone().style == env.style
    for bad in [-1, 1.0, True, "3", None, np.int64(-2)]:
        with pytest.raises(ValueError, match=r"^MiniSWE\.reset: seed must be"):
            env.reset(bad)
    assert env.reset(np.int64(5)) == env.reset(5)
    for method in STATE_QUERIES:
        _call(env, method)


NON_ACTIONS = [None, True, 1, 1.5, "view a.py", ("view", "a.py"), Command("bogus"),
               Command("view", None), Command("view", "a.py", 0, 1), Command("view", "a.py", 3, 2),
               Command("view", "a.py", True, 2), Command("view", "a b.py"),
               Command("view", "a.py", 1, None), Command("search", text=""),
               Command("search", "bar", text="x"), Command("search", text="a\nb"),
               Command("edit", "a.py", 1, 1, None), Command("edit", "a.py", 1, 1, "x  "),
               Command("edit", "a.py", 3, 1, "x"), Command("edit", "a.py", 1, 1, "```\nx"),
               Command("edit", "a.py", 1.0, 1, "x"), Command("run_tests", text="a b"),
               Command("run_tests", "a.py"), Command("submit", text="x")]


def test_values_that_are_not_actions_count_as_malformed():
    env = make()
    env.reset(0)
    before = snapshot(env)
    malformed = env.turn_score(None)
    assert malformed == env.format_penalty
    for value in NON_ACTIONS:
        assert env.verify(value) is False, value
        assert env.turn_score(value) == malformed, value
        assert env.action_signature(value) == "<invalid>", value
        for method in (env.format_action, env.answer_text):
            with pytest.raises(ValueError, match=rf"^MiniSWE\.format_action: "
                                                 rf"{re.escape(repr(value))} is not"):
                method(value)
    assert snapshot(env) == before


def test_turn_score_is_the_reward_a_clone_receives():
    env = make(module="scaling")
    env.reset(0)
    rng = np.random.default_rng(0)
    actions = [env.random_action(rng) for _ in range(6)] + [Command("submit"),
                                                            Command("view", "nope.py")]
    for action in actions:
        assert env.turn_score(action) == env.clone().step(env.answer_text(action))[1], action
    oracle_play(env)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=80) | st.sampled_from(["view", "edit a 1 1", "search", "}{"]),
       seed=st.integers(0, 20))
def test_step_never_raises_on_arbitrary_text(text, seed):
    env = make()
    env.reset(seed)
    observation, reward, _, info = env.step(text)
    assert isinstance(observation, str) and np.isfinite(reward)
    if env.parse_action(text) is None:
        assert not info["valid"] and info["action"] is None and reward == env.format_penalty
    env.close()


def test_queries_along_oracle_play_and_after_the_end():
    env = make(two_file=0.5)
    rng = np.random.default_rng(1)
    for seed in range(4):
        env.reset(seed)
        verified = []
        while not env.done:
            before = snapshot(env)
            action = env.oracle_action()
            assert 0.0 <= env.process_score() <= 1.0 and env.verify(action)
            assert env.parse_action(env.answer_text(action, "compact")) == action
            assert env.action_signature(action) == env.format_action(action)
            verified += [a for a in (action, env.random_action(rng)) if env.verify(a)]
            assert snapshot(env) == before
            env.step(env.answer_text(action))
        assert env.oracle_action() is None and not any(env.verify(a) for a in verified)
        assert env.process_score() == 1.0


def test_malformed_turns_until_the_step_limit():
    env = make(max_steps=3)
    env.reset(0)
    for _ in range(3):
        _, reward, done, info = env.step("}{")
        assert reward == -0.1 and not info["valid"]
    assert done and info["truncated"] and not info["success"] and env.process_score() == 0.0


# ---------------------------------------------------------------------- verify, scores, info


def test_verify_reads_an_optimal_fix_path():
    env = make(module="scaling", operators=["wrong_constant"])
    env.reset(0)
    target = env.task.target
    view = env.oracle_action()
    assert view.kind == "view" and env.verify(view)
    assert not env.verify(Command("submit")) and not env.verify(Command("run_tests"))
    assert not env.verify(Command("view", env.task.test_file))  # off target
    env.step(env.answer_text(view))
    assert not env.verify(view)  # nothing new to see
    fix = env.oracle_action()
    assert fix.kind == "edit" and env.verify(fix)
    assert not env.verify(Command("edit", target, 1, 0, "# a comment"))
    env.step(env.answer_text(fix))
    assert env.verify(Command("run_tests")) and env.verify(Command("submit"))
    env.step("run_tests")
    assert not env.verify(Command("run_tests")) and env.verify(Command("submit"))
    env.step("edit scaling.py 1 0\n# harmless comment")  # AST-equal: still restored
    assert env._fixed() and env.verify(Command("run_tests"))


def test_process_score_by_hand():
    env = make(module="scaling", operators=["wrong_constant"])
    env.reset(0)
    scores = [env.process_score()]
    while not env.done:
        env.step(env.answer_text(env.oracle_action()))
        scores.append(env.process_score())
    assert scores == pytest.approx([0.5, 0.6, 0.7, 0.95, 1.0])
    env.reset(0)
    fix = None
    twin = env.clone()
    twin.step(twin.answer_text(twin.oracle_action()))
    fix = twin.oracle_action()
    env.step(env.answer_text(fix))                        # a blind edit
    assert env.process_score() == pytest.approx(0.35)
    env.step("view scaling.py 1 3")
    env.step("view scaling.py 1 3")                       # a repeat
    assert env.process_score() == pytest.approx(0.35 + 0.1 - 0.1)
    env.step("nonsense")                                  # a failed turn
    assert env.process_score() == pytest.approx(0.30)
    env.step("submit")
    assert env.success and env.process_score() == 1.0


def test_validation_and_run_info():
    env = make(module="scaling", operators=["wrong_constant"])
    env.reset(0)
    info = env.step("run_tests")[3]
    assert not info["validation"] and info["tests_failed"] > 0 and info["sandbox"] is None
    env.step(env.answer_text(env.oracle_action()))
    info = env.step(env.answer_text(env.oracle_action()))[3]
    assert info["action"].startswith("edit") and info["fixed"] and info["tests_passed"] is None
    info = env.step("run_tests")[3]
    assert info["validation"] and info["tests_failed"] == 0  # the first passing run after an edit
    info = env.step("run_tests " + env._test_names()[0])[3]
    assert not info["validation"] and info["tests_passed"] == 1  # nothing new to validate
    info = env.step("submit")[3]
    assert info["success"] and info["edits"] == 1 and info["test_runs"] == 3
    assert info["task"] == "scaling/wrong_constant" and info["two_file"] is False


def test_subprocess_seconds_are_the_turns_sandboxed_runs():
    env = make(module="scaling", operators=["wrong_constant"], cache_runs=False)
    env.reset(0)
    info = env.step(env.answer_text(env.oracle_action()))[3]  # view: no subprocess
    assert info["action"].startswith("view") and info["subprocess_seconds"] == 0.0
    assert env.step("not a command")[3]["subprocess_seconds"] == 0.0
    # a run's seconds are measured around the subprocess (start to reap): above 0, below the
    # sandbox's wall-clock limit
    for command in ("run_tests", "run_tests", "submit"):
        assert 0.0 < env.step(command)[3]["subprocess_seconds"] < env.sandbox.time_limit
    # with the process-wide cache, a run identical to an earlier one starts no subprocess
    cached = make(module="scaling", operators=["wrong_constant"], cache_runs=True)
    cached.reset(0)
    cached.step("run_tests")
    assert cached.step("run_tests")[3]["subprocess_seconds"] == 0.0


# ---------------------------------------------------------------------- the PATR judge


def _phases(texts):
    from jaxtree.scorers.judge import phase_of
    return [phase_of([t]) for t in texts]


def test_judge_phases_of_diagnosis_and_editing_actions():
    env = make(module="scaling", operators=["wrong_constant"])
    env.reset(0)
    view, search = env.oracle_action(), Command("search", text="def percent")
    env.step(env.answer_text(view))
    edit = env.oracle_action()
    texts = [env.action_signature(a) for a in (view, search, edit)]
    assert _phases(texts) == ["diagnosis", "diagnosis", "editing"]
    rtmc = make(action_signatures="rtmc")
    assert _phases([rtmc.action_signature(a) for a in (view, search, edit)]) == [
        "diagnosis", "diagnosis", "editing"]


def test_judge_phases_of_verification_actions():
    assert _phases(["run_tests", "run_tests test_clamp", "submit"]) == ["verification"] * 3


# ---------------------------------------------------------------------- options


def test_options_and_registration():
    assert "mini_swe" in environments.names()
    for options in [{"split": "dev"}, {"two_file": 2}, {"operators": ["nope"]}, {"operators": []},
                    {"module": "nope"}, {"action_signatures": "x"}, {"max_output_chars": 5},
                    {"bogus": 1}]:
        with pytest.raises(ValueError):
            environments.make("mini_swe", **options)
    env = make(module="rpn")
    env.reset(0)
    assert env.task.two_file and env.mutation.path == "stackops.py"


# ---------------------------------------------------------------------- tasks of your own code

OWN_HELPER = '''
"""Unit prices."""


def unit_price(total, count):
    if count <= 0:
        return 0
    return total // count
'''

OWN_MAIN = '''
"""Cheapest offer."""
from unitprice import unit_price


def cheapest(offers):
    best = None
    for name, total, count in offers:
        price = unit_price(total, count)
        if best is None or price < best[1]:
            best = (name, price)
    return best[0]
'''

OWN_TESTS = '''
from shop import cheapest


def test_cheapest():
    assert cheapest([("a", 10, 2), ("b", 9, 3)]) == "b"
    assert cheapest([("a", 4, 4), ("b", 9, 3), ("c", 0, 0)]) == "c"
'''


def _own_task(root, name, split="test", main=OWN_MAIN):
    """A two-file task directory: the bug goes into the helper the tested module imports (named
    to sort after it, so the modules load in import order, not by name)."""
    path = Path(root, name)
    path.mkdir()
    (path / "unitprice.py").write_text(textwrap.dedent(OWN_HELPER))
    (path / "shop.py").write_text(textwrap.dedent(main))
    (path / "test_shop.py").write_text(textwrap.dedent(OWN_TESTS))
    hidden = [["cheapest", [[["x", 8, 4]]], "x"],  # hidden cases that catch the helper's bugs
              ["cheapest", [[["x", 4, 4], ["z", 6, 0]]], "z"],
              ["cheapest", [[["x", 9, 2], ["y", 10, 3]]], "y"]]
    (path / "task.json").write_text(json.dumps({"main": "shop", "target": "unitprice.py",
                                                "hidden": hidden, "split": split}))
    return path


def test_tasks_of_your_own_code_are_mutated_and_repaired_by_the_oracle(tmp_path):
    _own_task(tmp_path, "shop_task")
    env = make(task_dir=str(tmp_path), split="test")
    for seed in range(4):
        env.reset(seed)
        assert env.task.name == "shop_task" and env.task.two_file
        assert env.mutation.path == "unitprice.py"
        infos = oracle_play(env)
        assert infos[-1]["success"] and env.total_reward > 0, (seed, env.mutation)
    # the bank is not drawn from, and its options keep their meaning
    with pytest.raises(ValueError, match="no task of split"):
        make(task_dir=str(tmp_path), split="train")
    with pytest.raises(ValueError, match="two_file"):
        make(task_dir=str(tmp_path), split="test", two_file=0.5)


SWAP = '''
"""Pairs."""


def swap(pair):
    return pair[1], pair[0]
'''

SWAP_TESTS = '''
from pairs import swap


def test_swap():
    assert swap((1, 2)) == (2, 1)
'''


def _swap_task(root, name, **files):
    """A single-file task directory; `files` adds more files (hidden_txt= writes hidden.txt,
    task_json= task.json)."""
    path = Path(root, name)
    path.mkdir(parents=True)
    (path / "pairs.py").write_text(textwrap.dedent(SWAP))
    (path / "test_pairs.py").write_text(textwrap.dedent(SWAP_TESTS))
    for key, text in files.items():
        (path / key.replace("_", ".")).write_text(text)
    return path


def test_hidden_cases_as_python_literals_and_the_order_of_tasks(tmp_path):
    """hidden.txt holds hidden cases as Python literals: a tuple stays a tuple (JSON has none, and
    hidden cases compare types); order.txt fixes the order tasks are listed and drawn in."""
    as_json = json.dumps({"hidden": [["swap", [[1, 2]], [2, 1]]]})
    with pytest.raises(ValueError, match="1 hidden case"):  # a list is not the tuple returned
        tasks.load_task(str(_swap_task(tmp_path / "json", "swap_json", task_json=as_json)))
    cases = (("swap", ((1, 2),), (2, 1)), ("swap", (("a", None),), (None, "a")))
    literals = "# a tuple in, a tuple out\n\n" + "".join(f"{case!r}\n" for case in cases)
    for name in ("swap_b", "swap_a"):
        _swap_task(tmp_path / "own", name, hidden_txt=literals)
    assert [t.name for t in tasks.load_task_directory(str(tmp_path / "own"))["train"]] == [
        "swap_a", "swap_b"]  # no order.txt: by name
    (tmp_path / "own" / "order.txt").write_text("swap_b\nswap_a\n")
    loaded = tasks.load_task_directory(str(tmp_path / "own"))["train"]
    assert [t.name for t in loaded] == ["swap_b", "swap_a"]
    assert loaded[0].hidden == loaded[1].hidden == cases
    assert repr(loaded[0].hidden) == repr(cases)  # tuples, not lists
    env = make(task_dir=str(tmp_path / "own"))
    env.reset(0)
    assert oracle_play(env)[-1]["success"]  # the sandbox's hidden run compares the tuples
    env.close()


def test_a_malformed_task_directory_is_refused_naming_the_problem(tmp_path):
    broken = "def cheapest(offers):\n    return offers[0][0]\n"
    _own_task(tmp_path, "fails_its_tests", main=broken)
    with pytest.raises(ValueError, match="fails_its_tests: the unmodified code must pass"):
        make(task_dir=str(tmp_path))
    with pytest.raises(ValueError, match="not a directory"):
        make(task_dir=str(tmp_path / "missing"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match="exactly one test_"):
        tasks.load_task(str(other))
    with pytest.raises(ValueError, match="built-in"):
        tasks.load_task(str(_own_task(other, "wordwrap")))
    for i, (files, problem) in enumerate([
            ({"hidden_txt": '\n("swap", ((1, 2),), (2, 1)'}, "hidden.txt line 2: not a Python"),
            ({"hidden_txt": '("swap", (1, 2))'}, "expected .function"),
            ({"hidden_txt": "", "task_json": '{"hidden": []}'}, "both task.json and hidden.txt")]):
        with pytest.raises(ValueError, match=problem):
            tasks.load_task(str(_swap_task(tmp_path / "bad", f"swap{i}", **files)))
    ordered = tmp_path / "ordered"
    _swap_task(ordered, "swap_a")
    _swap_task(ordered, "swap_b")
    for order, problem in [("swap_a\n", "does not list ['swap_b']"),
                           ("swap_a\nswap_b\nswap_c\n",
                            "lists names that are not task subdirectories: ['swap_c']"),
                           ("swap_a\nswap_b\nswap_a\n", "lists more than once ['swap_a']")]:
        (ordered / "order.txt").write_text(order)
        with pytest.raises(ValueError, match=re.escape(f"ordered: order.txt {problem}")):
            make(task_dir=str(ordered))

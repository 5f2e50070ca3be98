"""launch/grid_lanes.sh: a grid's unfinished runs as parallel launch.compare lanes, the warm start
first, a deadline that stops the lanes, aggregation at the end.

`PYTHON` points the script at a stub of `python -m launch.compare` that records what each call
was asked to do (the real harness is tested in test_compare.py), so the script's own logic runs
here in a second or two."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "launch", "grid_lanes.sh")

# The stub reads the plan from $STUB_PLAN ({"warm_starts": [...], "runs": [[variant, seed], ...]}),
# appends one JSON line per event to $STUB_EVENTS, and keeps state under --out like the harness:
# warm_starts/<key>/warm_start.json ("complete") and runs/<variant>/seed_<s>/done.
STUB = textwrap.dedent('''\
    #!{python}
    import json, os, signal, sys, time
    args = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "1") for a in sys.argv[1:]
                if a.startswith("--"))
    out = args["out"]
    plan = json.load(open(os.environ["STUB_PLAN"]))

    def event(**kw):
        with open(os.environ["STUB_EVENTS"], "a") as f:
            f.write(json.dumps({{"t": time.time(), **kw}}) + "\\n")

    def warm_file(key):
        return os.path.join(out, "warm_starts", key, "warm_start.json")

    def built(key):
        return os.path.exists(warm_file(key)) and json.load(open(warm_file(key)))["complete"]

    def done(v, s):
        return os.path.exists(os.path.join(out, "runs", v, "seed_" + s, "done"))

    if "dry_run" in args:
        event(kind="plan", records=args.get("records"))
        for key in plan["warm_starts"]:
            print("# warm start %s: %s" % (key, "built" if built(key) else "to build"))
        for name in plan.get("artifacts", ()):
            print("# artifact %s: to build" % name)
        for v, s in plan["runs"]:
            print("# variant=%s seed=%s: %s" % (v, s, "finished (skipped)" if done(v, s) else "new"))
        sys.exit(0)
    if "aggregate_only" in args:
        event(kind="aggregate", out=out, records=args.get("records"))
        sys.exit(0)
    v, s = args["only"], args["seeds"]
    event(kind="start", variant=v, seed=s, warm_built=all(built(k) for k in plan["warm_starts"]),
          cpus=sorted(os.sched_getaffinity(0)), records=args.get("records"))
    for key in plan["warm_starts"]:
        if not built(key):
            time.sleep(0.5)
            os.makedirs(os.path.dirname(warm_file(key)), exist_ok=True)
            json.dump({{"complete": True}}, open(warm_file(key), "w"))
            event(kind="warm_start", key=key)
    if v == "slow":
        def stop(signum, frame):
            event(kind="sigterm", variant=v, seed=s)
            sys.exit(130)
        signal.signal(signal.SIGTERM, stop)
        time.sleep(60)
    if v == "nap":
        time.sleep(1.0)
    os.makedirs(os.path.join(out, "runs", v, "seed_" + s), exist_ok=True)
    open(os.path.join(out, "runs", v, "seed_" + s, "done"), "w").close()
    event(kind="done", variant=v, seed=s, cpus=sorted(os.sched_getaffinity(0)))
''')


def run_lanes(tmp_path, plan, *args, lanes=None, pin=False, records=None):
    stub = tmp_path / "stub_python"
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(0o755)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = {**os.environ, "PYTHON": str(stub), "POLL_S": "0.1", "STUB_PLAN": str(tmp_path / "plan.json"),
           "STUB_EVENTS": str(tmp_path / "events.jsonl")}
    if lanes is not None:
        env["LANES"] = str(lanes)
    if pin:
        env["PIN"] = "1"
    if records is not None:
        env["RECORDS"] = records
    out = tmp_path / "out"
    done = subprocess.run(["bash", SCRIPT, "grid.py", str(out), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    events_file = tmp_path / "events.jsonl"
    events = ([json.loads(line) for line in events_file.read_text().splitlines()]
              if events_file.exists() else [])
    return done, events, out


def test_warm_start_first_then_every_unfinished_run_in_its_own_lane(tmp_path):
    runs = [["a", "0"], ["a", "1"], ["b", "0"], ["b", "1"]]
    # b seed 1 finished in an earlier call: skipped.
    os.makedirs(tmp_path / "out" / "runs" / "b" / "seed_1")
    (tmp_path / "out" / "runs" / "b" / "seed_1" / "done").touch()
    done, events, out = run_lanes(tmp_path, {"warm_starts": ["k1"], "runs": runs})
    assert done.returncode == 0, done.stdout + done.stderr
    starts = [e for e in events if e["kind"] == "start"]
    assert sorted((e["variant"], e["seed"]) for e in starts) == [("a", "0"), ("a", "1"),
                                                                ("b", "0")]
    warm = [e for e in events if e["kind"] == "warm_start"]
    assert len(warm) == 1, "the warm start is built once, by the first lane"
    assert starts[0]["variant"] == "a" and starts[0]["seed"] == "0"
    assert all(e["warm_built"] and e["t"] >= warm[0]["t"] for e in starts[1:])
    # every run lands in OUT/runs, through the lane directories' links
    for v, s in [("a", "0"), ("a", "1"), ("b", "0")]:
        assert (out / "runs" / v / f"seed_{s}" / "done").exists()
        assert (out / "lanes" / f"{v}_seed{s}" / "runs").resolve() == (out / "runs").resolve()
    assert events[-1]["kind"] == "aggregate" and events[-1]["out"] == str(out)


def test_records_directory_reaches_the_plan_every_lane_and_the_aggregation(tmp_path):
    done, events, _ = run_lanes(tmp_path, {"warm_starts": [], "runs": [["a", "0"], ["b", "0"]]},
                                records="kept/records")
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [e for e in events if e["kind"] in ("plan", "start", "aggregate")]
    assert [e["kind"] for e in calls] == ["plan", "start", "start", "aggregate"]
    assert all(e["records"] == "kept/records" for e in calls)
    done, events, _ = run_lanes(tmp_path, {"warm_starts": [], "runs": [["c", "0"]]})
    assert done.returncode == 0 and all(e.get("records") is None for e in events[-3:])


def test_lanes_run_at_once_up_to_the_limit(tmp_path):
    runs = [["a", "0"], ["a", "1"], ["a", "2"]]
    done, events, _ = run_lanes(tmp_path, {"warm_starts": [], "runs": runs}, lanes=1)
    assert done.returncode == 0, done.stdout + done.stderr
    # LANES=1: each lane starts after the previous one is done
    order = [(e["kind"], e["seed"]) for e in events if e["kind"] in ("start", "done")]
    assert order == [("start", "0"), ("done", "0"), ("start", "1"), ("done", "1"),
                     ("start", "2"), ("done", "2")]


def test_runs_are_taken_seed_by_seed_in_the_grids_variant_order(tmp_path):
    """A grid stopped part-way holds every variant of its first seeds (a paired comparison)."""
    runs = [["z", "0"], ["z", "1"], ["z", "10"], ["a", "0"], ["a", "1"], ["a", "10"]]
    done, events, _ = run_lanes(tmp_path, {"warm_starts": [], "runs": runs}, lanes=1)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(e["variant"], e["seed"]) for e in events if e["kind"] == "start"] == [
        ("z", "0"), ("a", "0"), ("z", "1"), ("a", "1"), ("z", "10"), ("a", "10")]


def test_pinned_lanes_each_get_a_cpu_no_running_lane_holds(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    runs = [["nap", str(s)] for s in range(len(cpus) + 1)]
    done, events, _ = run_lanes(tmp_path, {"warm_starts": [], "runs": runs}, pin=True)
    assert done.returncode == 0, done.stdout + done.stderr
    starts = {e["seed"]: e for e in events if e["kind"] == "start"}
    ends = {e["seed"]: e["t"] for e in events if e["kind"] == "done"}
    assert sorted(starts) == sorted(s for _, s in runs)
    for e in starts.values():
        assert len(e["cpus"]) == 1 and e["cpus"][0] in cpus
    # Lanes that ran at the same time ran on different CPUs, so at most one per CPU ran at once.
    for a in starts:
        for b in starts:
            overlap = a < b and starts[a]["t"] < ends[b] and starts[b]["t"] < ends[a]
            assert not (overlap and starts[a]["cpus"] == starts[b]["cpus"]), (a, b)
    at_once = max(sum(starts[s]["t"] <= starts[r]["t"] < ends[s] for s in starts) for r in starts)
    assert at_once <= len(cpus)
    assert f"on CPU {starts['0']['cpus'][0]}" in done.stdout


def test_pinned_warm_start_builds_on_every_cpu_then_its_lane_is_pinned(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    runs = [["nap", str(s)] for s in range(len(cpus))]
    done, events, _ = run_lanes(tmp_path, {"warm_starts": ["k1"], "runs": runs}, pin=True)
    assert done.returncode == 0, done.stdout + done.stderr
    first = [e for e in events if e["kind"] in ("start", "done") and e["seed"] == "0"]
    assert [e["kind"] for e in first] == ["start", "done"]
    assert first[0]["cpus"] == cpus, "the warm start is built on every CPU"
    assert len(first[1]["cpus"]) == 1, "then the lane holds one CPU"
    others = [e for e in events if e["kind"] == "start" and e["seed"] != "0"]
    assert all(len(e["cpus"]) == 1 and e["cpus"] != first[1]["cpus"] for e in others)


def test_deadline_stops_the_lanes_with_sigterm_and_still_aggregates(tmp_path):
    runs = [["slow", "0"], ["a", "0"]]
    start = time.time()
    done, events, _ = run_lanes(tmp_path, {"warm_starts": [], "runs": runs}, "2")
    assert time.time() - start < 30
    assert done.returncode == 124, done.stdout + done.stderr
    kinds = [(e["kind"], e.get("variant")) for e in events]
    assert ("sigterm", "slow") in kinds and ("done", "a") in kinds
    assert ("done", "slow") not in kinds
    assert kinds[-1] == ("aggregate", None)


@pytest.mark.parametrize("plan, message", [
    ({"warm_starts": ["k1", "k2"]}, "more than one warm start"),
    ({"warm_starts": ["k1"], "artifacts": ["prm"]}, "needs artifacts that are not built")])
def test_grids_the_lanes_cannot_share_safely_are_refused(tmp_path, plan, message):
    done, events, _ = run_lanes(tmp_path, {**plan, "runs": [["a", "0"]]})
    assert done.returncode == 2
    assert message in done.stderr
    assert [e["kind"] for e in events] == ["plan"]        # nothing but the dry run


@pytest.mark.parametrize("args", [[], ["grid.py"]])
def test_missing_arguments_print_the_usage(args):
    done = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.startswith("usage: bash launch/grid_lanes.sh")

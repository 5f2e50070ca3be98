"""launch.evaluate and launch.sample: user errors end the job in one line (exit status 2), and
evaluate writes its results and transcripts where it can (and says so where it cannot); sample's
cap of --max_new_tokens to the model's context is checked by tests/test_launch.py's run.

The jobs run together, forked from one process that imported their libraries: a job that only
fails is mostly Python imports.
"""

import json
import os

import pytest

from toy_run import assert_one_line_error, run_module_jobs, start_job, wait_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "frozen_lake_sft.py")
# The tiny preset on two held-out lakes, two samples each.
SMALL_EVAL = ("-m", "launch.evaluate", f"--config={CONFIG}", "--config.eval.num_tasks=2",
              "--config.eval.samples_per_task=2", "--config.rollout.num_slots=4",
              "--config.rollout.context_length=256")


def _assert_one_line_error(proc, *fragments):
    """A user error (status 2) in one line, and nothing on stdout."""
    assert_one_line_error(proc, 2, *fragments)
    assert proc.stdout == "", proc.stdout


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """{name: finished job} of every `launch.evaluate` and `launch.sample` job of this file, run
    together (forked from one process that imported their libraries once), with the paths
    they were given; `written` is the evaluation that succeeds."""
    tmp = tmp_path_factory.mktemp("jobs")
    corrupt = tmp / "corrupt"  # a directory without config.json or checkpoints
    corrupt.mkdir()
    a_file = tmp / "a_file"
    a_file.write_text("")
    unfinished = tmp / "unfinished"  # a job's workdir before its first save
    (unfinished / "checkpoints").mkdir(parents=True)
    (unfinished / "config.json").write_text('{"sft": {"steps": 40}}')
    out = tmp / "out" / "eval.json"
    sample = ("-m", "launch.sample")
    argv = {
        "eval_missing": (*SMALL_EVAL, "--checkpoint=/nonexistent"),
        "eval_broken": (*SMALL_EVAL, f"--checkpoint={corrupt}"),
        "eval_not_saved": (*SMALL_EVAL, f"--checkpoint={unfinished}"),
        "eval_under_file": (*SMALL_EVAL, f"--output={a_file}/eval.json"),
        "eval_in_proc": (*SMALL_EVAL, "--output=/proc/jaxtree_eval.json"),
        "eval_negative": (*SMALL_EVAL, "--transcripts=-1"),
        "sample_missing": (*sample, f"--model={tmp / 'missing'}"),
        "sample_broken": (*sample, f"--model={corrupt}"),
        "sample_samples": (*sample, "--num_samples=0"),
        "sample_tokens": (*sample, "--max_new_tokens=0"),
        "sample_temperature": (*sample, "--temperature=-1"),
        "sample_top_p": (*sample, "--top_p=1.5"),
        # An environment option the config file does not set is still an override (a grid's
        # variants set them): the turn limit, here.
        "written": (*SMALL_EVAL, f"--output={out}", "--transcripts=3",
                    "--config.env.options.max_steps=6"),
    }
    results = dict(zip(argv, run_module_jobs(*argv.values())))
    return dict(results, tmp=tmp, corrupt=corrupt, a_file=a_file, out=out)


def test_evaluate_rejects_bad_checkpoints_and_outputs_in_one_line(jobs):
    corrupt, a_file = jobs["corrupt"], jobs["a_file"]
    missing, broken, not_saved, under_file, in_proc, negative = (jobs[f"eval_{name}"] for name in (
        "missing", "broken", "not_saved", "under_file", "in_proc", "negative"))
    _assert_one_line_error(missing, "--checkpoint", "'/nonexistent' is neither a preset",
                           "an existing checkpoint directory", "nor a .gguf file")
    assert "--model" not in missing.stderr
    _assert_one_line_error(broken, "--checkpoint", str(corrupt))
    # not read as a Hugging Face directory (its config.json is the experiment's)
    _assert_one_line_error(not_saved, "--checkpoint", "no complete checkpoint under",
                           "has not finished a save")
    # Both fail before the policy is loaded or evaluated (nothing on stdout).
    _assert_one_line_error(under_file, f"--output={a_file}/eval.json", "not a writable directory")
    _assert_one_line_error(in_proc, "--output=/proc/jaxtree_eval.json", "not a writable directory")
    _assert_one_line_error(negative, "--transcripts")


def test_sample_rejects_bad_flags_and_models_in_one_line(jobs):
    corrupt = jobs["corrupt"]
    missing, broken, samples, tokens, temperature, top_p = (jobs[f"sample_{name}"] for name in (
        "missing", "broken", "samples", "tokens", "temperature", "top_p"))
    _assert_one_line_error(missing, "--model", "neither a preset")
    _assert_one_line_error(broken, "--model", str(corrupt))
    _assert_one_line_error(samples, "--num_samples=0", "at least 1")
    _assert_one_line_error(tokens, "--max_new_tokens=0", "at least 1")
    _assert_one_line_error(temperature, "--temperature", "-1.0 is not non-negative")
    _assert_one_line_error(top_p, "--top_p", "1.5 is not in (0, 1]")


def _episodes_cells(stdout: str) -> list[str]:
    """The `episodes` column of the printed table."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in stdout.splitlines()
            if line.startswith("| ")]
    column = rows[0].index("episodes")
    return [row[column] for row in rows[1:]]


def test_evaluate_writes_results_and_transcripts_or_says_why_not(tmp_path, jobs):
    out, written = jobs["out"], jobs["written"]
    # Where the results go without --output: nowhere for a read-only checkpoint directory (/proc
    # stays read-only for root, which the tests run as) and for a preset (not ./eval.json).
    check = start_job("-c", "from launch.evaluate import output_path; "
                      f"print(output_path('/proc', None)); print(output_path('tiny', None)); "
                      f"print(output_path({str(tmp_path)!r}, None))")
    assert written.returncode == 0, written.stderr
    assert _episodes_cells(written.stdout) == ["4", "4", "4"]
    report = json.loads(out.read_text())
    assert set(report["rows"]) == {"policy", "oracle", "random"}
    assert report["rows"]["oracle"]["success_rate"] == 1.0
    assert report["rows"]["policy"]["episodes"] == 4 and report["eval"]["transcripts"] == 3
    assert report["env"]["options"]["max_steps"] == 6
    assert all(row["mean_turns"] <= 6 for row in report["rows"].values())
    with open(out.parent / "transcripts.jsonl") as f:
        assert len(f.readlines()) == 3
    assert (out.parent / "transcripts.txt").read_text().count("=== task ") == 3

    (check,) = wait_jobs(check)
    assert check.returncode == 0, check.stderr
    assert check.stdout.splitlines() == ["(None, '/proc is not writable')",
                                         "(None, \"'tiny' is not a checkpoint directory\")",
                                         f"({str(tmp_path / 'eval.json')!r}, None)"]


def test_free_form_overrides_are_split_from_the_flags_and_parsed_as_literals():
    from launch.common import free_form_value, split_free_form_overrides
    argv = ["job", "--config=x.py", "--config.env.options.oracle=mcts",
            "--config.env.eval_options.opponent=random", "--config.env.options.size=5",
            "--config.train.steps=3", "--config.env.options=bad"]
    rest, overrides = split_free_form_overrides(argv)
    assert rest == ["job", "--config=x.py", "--config.train.steps=3", "--config.env.options=bad"]
    assert overrides == [("env.options", "oracle", "mcts"),
                         ("env.eval_options", "opponent", "random"),
                         ("env.options", "size", "5")]
    assert [free_form_value(t) for t in ("mcts", "5", "0.5", "True", "(1, 2)")] == \
        ["mcts", 5, 0.5, True, (1, 2)]

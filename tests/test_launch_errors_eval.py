"""launch.evaluate and launch.sample: user errors end the job in one line (exit status 2), and
evaluate writes its results and transcripts where it can (and says so where it cannot); sample's
cap of --max_new_tokens to the model's context is checked by tests/test_launch.py's run.

Jobs that only fail run together, forked from one process that imported their libraries: each
is mostly Python imports.
"""

import json
import os

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


def test_evaluate_rejects_bad_checkpoints_and_outputs_in_one_line(tmp_path):
    corrupt = tmp_path / "corrupt"  # a directory without config.json or checkpoints
    corrupt.mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    unfinished = tmp_path / "unfinished"  # a job's workdir before its first save
    (unfinished / "checkpoints").mkdir(parents=True)
    (unfinished / "config.json").write_text('{"sft": {"steps": 40}}')
    missing, broken, not_saved, under_file, in_proc, negative = run_module_jobs(
        (*SMALL_EVAL, "--checkpoint=/nonexistent"),
        (*SMALL_EVAL, f"--checkpoint={corrupt}"),
        (*SMALL_EVAL, f"--checkpoint={unfinished}"),
        (*SMALL_EVAL, f"--output={a_file}/eval.json"),
        (*SMALL_EVAL, "--output=/proc/jaxtree_eval.json"),
        (*SMALL_EVAL, "--transcripts=-1"))
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


def test_sample_rejects_bad_flags_and_models_in_one_line(tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    sample = ("-m", "launch.sample")
    missing, broken, samples, tokens, temperature, top_p = run_module_jobs(
        (*sample, f"--model={tmp_path / 'missing'}"),
        (*sample, f"--model={corrupt}"),
        (*sample, "--num_samples=0"),
        (*sample, "--max_new_tokens=0"),
        (*sample, "--temperature=-1"),
        (*sample, "--top_p=1.5"))
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


def test_evaluate_writes_results_and_transcripts_or_says_why_not(tmp_path):
    out = tmp_path / "out" / "eval.json"
    # Where the results go without --output: nowhere for a read-only checkpoint directory (/proc
    # stays read-only for root, which the tests run as) and for a preset (not ./eval.json).
    check = start_job("-c", "from launch.evaluate import output_path; "
                      f"print(output_path('/proc', None)); print(output_path('tiny', None)); "
                      f"print(output_path({str(tmp_path)!r}, None))")
    # An environment option the config file does not set is still an override (a grid's
    # variants set them): the turn limit, here.
    (written,) = wait_jobs(start_job(*SMALL_EVAL, f"--output={out}", "--transcripts=3",
                                     "--config.env.options.max_steps=6"))
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

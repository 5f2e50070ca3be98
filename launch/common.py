"""What the launch jobs share: one-line errors (bad flags, config values and paths with exit
status 2; faults such as a corrupt checkpoint or a diverged run with status 1), config files found
from any directory, a quiet log unless `--verbosity` asks for more, and compiled programs kept
across jobs (`use_compilation_cache`)."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import sys
from typing import Any, Callable

from jaxtree.checkpoints import CheckpointCorruptError, DiskFullError
from jaxtree.utils import NO_SPACE_TEXT
from jaxtree.config import ConfigError
from jaxtree.experiment import moved_message
from jaxtree.train.trainer import TrainingDiverged
from jaxtree.train.workdir import WorkdirError, WorkdirVanished

# Exit status of a job stopped by a user error (a bad flag, config value or path): absl's, for
# usage errors.
USAGE_ERROR = 2
# Exit status of a job stopped by a fault it cannot repair (a corrupt checkpoint, a diverged run).
FAULT = 1

# JAX's persistent compilation cache for every job: where ($JAXTREE_COMPILATION_CACHE; "off"
# disables it; JAX's own JAX_COMPILATION_CACHE_DIR, when set, is used instead) and its size, beyond
# which the least recently used programs are deleted.
COMPILATION_CACHE_ENV = "JAXTREE_COMPILATION_CACHE"
COMPILATION_CACHE_MAX_BYTES = 8 * 1024**3

# Where `--config=configs/x.py` is also looked for when it is not found from the current
# directory: the source tree the `launch` package was installed from (pip install -e .).
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fail(message: str, status: int = USAGE_ERROR) -> None:
    """Ends the job with a one-line message on stderr (no traceback, no usage text); status 2
    for a user error, 1 for a fault.

    The process ends at once (`os._exit`): by then the job's files are closed (their `finally`
    blocks ran as the error rose) and the workdir lock goes with the process, while an orderly
    interpreter shutdown could still print library noise after the message (TensorStore's
    orphaned reads after a failed restore report themselves during finalisation)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(status)


def load_named_policy(flag: str, load: Callable[[], Any]) -> Any:
    """`load()` (a policy named by `flag`); an unknown name or an unusable directory ends the
    job in one line naming the flag. A ConfigError (named by its config path) and a damaged
    jaxtree checkpoint (a fault, status 1) go on to run_app, which reports them in one line."""
    try:
        return load()
    except (ConfigError, CheckpointCorruptError):
        raise
    except (ValueError, FileNotFoundError) as e:
        fail(f"{flag}: {e}")


def resolve_config_path(value: str) -> str:
    """`--config`'s file: as given when it exists, else the same relative path under the source
    tree, or a name in its configs/ directory (`frozen_lake_grpo` or `frozen_lake_grpo.py`).
    config_flags' `path:argument` suffix is kept. Fails in one line naming where it looked."""
    path, colon, argument = value.partition(":")
    candidates = [path, os.path.join(SOURCE_ROOT, path),
                  os.path.join(SOURCE_ROOT, "configs", path),
                  os.path.join(SOURCE_ROOT, "configs", path + ".py")]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate + colon + argument
    fail(f"--config={value}: no such config file (looked in {os.getcwd()} and "
         f"{os.path.join(SOURCE_ROOT, 'configs')})")


def _resolve_config_flag(argv: list[str]) -> list[str]:
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            argv[i] = "--config=" + resolve_config_path(arg[len("--config="):])
        elif arg == "--config" and i + 1 < len(argv):
            argv[i + 1] = resolve_config_path(argv[i + 1])
    return argv


# Free-form dict fields of the config (an environment's constructor options): their keys are the
# environment's, not the schema's, so an override may name a key the config file did not set.
FREE_FORM_FIELDS = ("env.options", "env.eval_options")


def split_free_form_overrides(argv: list[str]) -> tuple[list[str], list[tuple[str, str, str]]]:
    """(argv without them, [(field, key, text)]) for the `--config.<free-form field>.<key>=text`
    overrides, which config_flags would refuse for a key the config file does not set."""
    rest, overrides = [], []
    for arg in argv:
        name, equals, text = arg.partition("=")
        field = next((f for f in FREE_FORM_FIELDS if name.startswith(f"--config.{f}.")), None)
        key = name[len(f"--config.{field}."):] if field else ""
        if field and equals and key and "." not in key:
            overrides.append((field, key, text))
        else:
            rest.append(arg)
    return rest, overrides


def free_form_value(text: str) -> Any:
    """A Python literal when the text is one (`100`, `True`, `0.5`, `(1, 2)`), else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def apply_free_form_overrides(config, overrides: list[tuple[str, str, str]]) -> None:
    """Sets each (field, key, text) override on the loaded config, in place. The value replaces
    the config file's whatever its type (ConfigDict would refuse `size=abc` over `size=4` with
    a TypeError): the environment's own check then names the option and what it expects."""
    for field, key, text in overrides:
        section = config
        for part in field.split("."):
            section = section[part]
        with contextlib.ExitStack() as stack:
            for guard in ("unlocked", "ignore_type"):
                if hasattr(section, guard):
                    stack.enter_context(getattr(section, guard)())
            section[key] = free_form_value(text)


def _override_error(argv: list[str], message: str) -> str:
    """The message of a failed flag parse, made specific: a `--config.x.y` override of the old
    flat layout is named with its new place, an unknown field by its config path."""
    paths = [arg[len("--config."):].split("=", 1)[0] for arg in argv
             if arg.startswith("--config.")]
    for path in paths:
        parts = path.split(".")
        for end in range(len(parts), 0, -1):
            moved = moved_message(".".join(parts[:end]))
            if moved:
                return f"config.{'.'.join(parts[:end])} {moved}"
    quoted = re.match(r"^\W*(\w+)\W*(.*)$", message)
    if quoted:
        key, rest = quoted.groups()
        unknown = [path for path in paths if f".{key}." in f".{path}."]
        if unknown:
            return f"config.{unknown[0]}: unknown field" + (f" ({rest})" if rest else "")
    return f"invalid command-line flag or config override: {message}"


def _unquoted(text: str) -> str:
    """`text` without one pair of quotes that wraps all of it (absl quotes some messages whole);
    a quote that only ends the text is part of it (`base 10: 'abc'`)."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _parse_message(error: Exception) -> str:
    """One line of a flag-parse failure: config_flags wraps an error raised by a config file's
    `get_config()` with the file's whole traceback, whose last line is the error itself."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = lines[-1] if len(lines) > 1 and "Traceback" in str(error) else " ".join(lines)
    return _unquoted(text).replace("\\n", " ").replace("\\'", "'")


def check_utf8_arguments(argv: list[str]) -> None:
    """Ends the job in one line naming the flag when an argument is not valid UTF-8: Python
    keeps such bytes as lone surrogates, which fail only when the text is first encoded (a
    prompt's tokenization, a judge URL's request), possibly after a whole warm start."""
    for arg in argv[1:]:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as e:
            name = arg.split("=", 1)[0] if arg.startswith("-") else "argument"
            raw = arg.encode("utf-8", "surrogateescape")
            fail(f"{name}: not valid UTF-8 (byte {raw[e.start:e.start + 1].hex(' ')} at "
                 f"position {e.start})")


def check_config_file(argv: list[str], parse_error: Exception | None = None) -> None:
    """Ends the job in one line naming `--config`'s file when it does not give a config:
    config_flags keeps a file that failed to load (a missing sibling config, a bad import) as a
    placeholder that raises only when first read, wraps an error of `get_config()` in the
    file's traceback, and accepts whatever `get_config()` returns (a dict, an int)."""
    from absl import flags

    given = next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")), None)
    if given is None or "config" not in flags.FLAGS:
        return
    if parse_error is not None and "Error whilst parsing config file" in str(parse_error):
        fail(f"--config={given}: the config file does not load: {_parse_message(parse_error)}")
    value = flags.FLAGS["config"].value
    if parse_error is not None:  # the parse may have stopped before or while loading the file
        try:
            value = flags.FLAGS["config"].parser.parse(given)
        except Exception as e:  # noqa: BLE001 - whatever the file raises, report it in a line
            fail(f"--config={given}: the config file does not load: {type(e).__name__}: "
                 f"{_parse_message(e)}")
    error = getattr(value, "_error", None) if type(value).__name__ == "_ErrorConfig" else None
    if error is not None:
        reason = [line for line in str(error).strip().splitlines() if line.strip()]
        fail(f"--config={given}: the config file does not load: "
             f"{reason[-1].strip() if reason else type(error).__name__}")
    if value is not None and not callable(getattr(value, "to_dict", None)):
        fail(f"--config={given}: get_config() returned a value of type {type(value).__name__}, not an "
             "ml_collections.ConfigDict")


def _quiet_orbax(record) -> bool:
    """Drops orbax's routine warnings (one 'Skipping merge of OCDBT checkpoints' per save on a
    single host) and its error logs of a full disk (a traceback per item and thread, ~800 lines;
    the save raises DiskFullError, reported in one line); its other errors still show."""
    if "orbax" not in record.pathname:
        return True
    if record.levelno < 40:
        return False
    return not any(text in record.getMessage() for text in NO_SPACE_TEXT)


def quiet_logs() -> None:
    """Library INFO logs hidden (JAX's 'Unable to initialize backend', orbax's ~100 lines per
    checkpoint), orbax's routine warnings too; errors still show."""
    from absl import logging

    logging.set_verbosity(logging.WARNING)
    logging.get_absl_logger().addFilter(_quiet_orbax)


def default_compilation_cache() -> str:
    """~/.cache/jaxtree/xla, beside the local model folder (~/.cache/jaxtree/models)."""
    return os.path.join(os.path.expanduser("~"), ".cache", "jaxtree", "xla")


def use_compilation_cache() -> str | None:
    """Turns on JAX's persistent compilation cache for this job; returns its directory (None:
    turned off with $JAXTREE_COMPILATION_CACHE=off, or a directory that cannot be created or
    written, said in one line on stderr; the job goes on compiling).

    Every program that took JAX's threshold (1 s) or more to compile is written there and later
    jobs load it instead of compiling it again: the same executable, so the same numbers (the
    key covers the program, the compile options, XLA_FLAGS and the JAX version). On a CPU most
    of a short job is compilation, and a SmolLM2 training run recompiles its rollout, update and
    evaluation programs for every new length bucket, minutes each (docs/benchmarks.md, "Compiled
    programs kept across jobs"): the runs of a comparison grid share all of them. The directory
    is capped at COMPILATION_CACHE_MAX_BYTES, least recently used programs deleted first."""
    import jax

    if jax.config.jax_compilation_cache_dir:  # JAX_COMPILATION_CACHE_DIR: the user's choice
        return jax.config.jax_compilation_cache_dir
    where = os.environ.get(COMPILATION_CACHE_ENV, "") or default_compilation_cache()
    if where.lower() in ("off", "0", "none", "false"):
        return None
    where = os.path.abspath(os.path.expanduser(where))
    try:
        os.makedirs(where, exist_ok=True)
        if not os.access(where, os.W_OK):
            raise PermissionError("not writable")
    except OSError as e:  # a bad $JAXTREE_COMPILATION_CACHE or a read-only home: say so, go on
        print(f"note: compiled programs are not kept: cannot use {where} as the compilation "
              f"cache ({e.strerror or e}); set {COMPILATION_CACHE_ENV} to a writable directory "
              f"or to off", file=sys.stderr)
        return None
    jax.config.update("jax_compilation_cache_dir", where)
    if jax.config.jax_compilation_cache_max_size == -1:  # unlimited unless the user chose
        jax.config.update("jax_compilation_cache_max_size", COMPILATION_CACHE_MAX_BYTES)
    return where


def run_app(main, compilation_cache: bool = True) -> None:
    """`absl.app.run(main)` where every user error ends the job with one line and exit status
    2: a bad `--config.x.y=...` override (unknown field, wrong type; fields of the old flat
    layout are named with their new place), an invalid config value (ConfigError), a missing
    file or checkpoint (FileNotFoundError), an unusable or busy workdir (WorkdirError); and a
    fault with one line and status 1 (a corrupt checkpoint, a diverged run). Library INFO logs
    (orbax's ~100 lines per checkpoint) are hidden unless `--verbosity` / `-v` is given.
    Compiled programs persist across jobs (`use_compilation_cache`) unless
    `compilation_cache` is false (the benchmarks, which time compilation too)."""
    from absl import app, flags

    def parse(argv):
        check_utf8_arguments(argv)
        argv, free_form = split_free_form_overrides(_resolve_config_flag(argv))
        if free_form:  # config_flags reads its overrides from sys.argv as well
            sys.argv = [a for a in sys.argv if a in argv or not a.startswith("--config.")]
        try:
            parsed = flags.FLAGS(argv)
        except Exception as e:  # noqa: BLE001 - any parse failure is the user's flag, report it
            check_config_file(argv, e)  # a config file that does not load is named as such
            fail(_override_error(argv, _parse_message(e)))
        check_config_file(argv)
        if free_form:
            if "config" not in flags.FLAGS or flags.FLAGS["config"].value is None:
                fail(f"--config.{free_form[0][0]}.{free_form[0][1]} needs --config")
            apply_free_form_overrides(flags.FLAGS["config"].value, free_form)
        if not flags.FLAGS["verbosity"].present:
            quiet_logs()
        return parsed

    def guarded(argv):
        if compilation_cache:
            use_compilation_cache()
        try:
            return main(argv)
        except (ConfigError, FileNotFoundError, WorkdirError) as e:
            fail(str(e))
        except (CheckpointCorruptError, TrainingDiverged, DiskFullError, WorkdirVanished) as e:
            fail(str(e), FAULT)

    app.run(guarded, flags_parser=parse)

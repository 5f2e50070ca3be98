"""Runs a test script in a Python process of its own with 8 fake CPU devices.

The device count is fixed when JAX initialises, so a multi-device check cannot run inside the test
process (which already has one CPU device): the subprocess gets XLA_FLAGS with 8 host devices (and
the test session's other XLA flags).
"""

import os

from toy_run import run_module_jobs

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def run_script(script: str, success_marker: str, timeout: int = 600, args=()) -> str:
    """Runs `script` (formatted with `tests=TESTS_DIR`; `args` in its sys.argv[1:]), asserts it
    exits 0 and prints `success_marker`; returns its stdout."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags.strip())
    proc, = run_module_jobs((("-c", script.format(tests=TESTS_DIR), *args), env),
                            timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert success_marker in proc.stdout
    return proc.stdout

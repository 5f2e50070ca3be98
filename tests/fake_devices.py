"""Runs a test script in a fresh Python process with 8 fake CPU devices.

The device count is fixed when JAX initialises, so a multi-device check cannot run inside the test
process (which already has one CPU device); the script sets XLA_FLAGS itself before importing JAX.
"""

import os
import subprocess
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def run_script(script: str, success_marker: str, timeout: int = 600) -> str:
    """Runs `script` (formatted with `tests=TESTS_DIR`), asserts it exits 0 and prints
    `success_marker`; returns its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", script.format(tests=TESTS_DIR)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert success_marker in proc.stdout
    return proc.stdout

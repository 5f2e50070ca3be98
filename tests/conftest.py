"""Test set-up: CPU only, float32 matmuls at full precision, shared tiny models."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

from jaxtree import models  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end checks (CI runs them at small size)")


@pytest.fixture(scope="session")
def tiny():
    """(config, params) of the tiny preset, random init."""
    config = models.get_preset("tiny")
    return config, models.init_params(config, jax.random.key(0))

"""Fixtures the engine tests share."""

import pytest

from jetflow_bench.engine.target import TargetRunner
from tests.helpers.random_models import random_model


@pytest.fixture(scope="module")
def runner():
    return TargetRunner(random_model("qwen3", seed=1), None, "random-qwen3")

"""Code that runs inside Ray worker processes for tests/sweep/test_ray_executor.py (workers import it by name)."""

from __future__ import annotations

import os

ARMED = "JFBENCH_TEST_KILL_ARMED"  # env var: a file; while it exists, the next worker past its 3rd batch dies
KILL_AFTER = 3  # timed decodes: the first round's third slot (AR, 2 arms, the A/A copy), mid-group


def kill_once_mid_group() -> None:
    """Worker setup hook: the first worker to decode a timed batch (its 3rd or later) while the armed
    file exists removes the file and exits at once, as a killed process would, mid-group."""
    from jetflow_bench.sweep import driver

    decode, decoded = driver.decode_batch, []

    def decode_then_maybe_die(*args, **kwargs):
        batch = decode(*args, **kwargs)
        decoded.append(batch.index)
        if len(decoded) >= KILL_AFTER:
            try:
                os.unlink(os.environ[ARMED])  # only one worker can remove it
            except (KeyError, FileNotFoundError):
                return batch
            os._exit(1)
        return batch

    driver.decode_batch = decode_then_maybe_die

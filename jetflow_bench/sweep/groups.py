"""Pairing groups: the cells of a grid that must be timed in one process to be paired.

A speed-up divides an arm's decode time by the AR baseline's; both must see the same load, so
the baseline and every arm of one suite × batch size × temperature (× serving load level, for a
cell that has one: arms are paired with plain decoding at the same load) are timed in one session,
interleaved. A group is the unit a sweep schedules (locally, or as one task of a cluster
executor), and the unit inside which speed-ups are paired.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from jetflow_bench.sweep.grid import Cell

GROUP_KEYS = ("suite", "batch_size", "temperature", "load")  # every repeat of these shares one group


@dataclass(frozen=True)
class PairingGroup:
    suite: str
    batch_size: int
    temperature: float
    load: str  # "" = no serving load
    cells: tuple[Cell, ...]  # in the grid's run order: every repeat's AR baseline and arms

    @property
    def group_id(self) -> str:
        """File-name-safe and unique within a grid: gsm8k__bs4 (+ __T1 when sampled, + __Lpoisson-2 under a load)."""
        sampled = [f"T{self.temperature:g}"] if self.temperature else []
        loaded = ["L" + re.sub(r"[^A-Za-z0-9_.-]+", "-", self.load)] if self.load else []
        return "__".join([re.sub(r"[^A-Za-z0-9_.-]+", "-", self.suite), f"bs{self.batch_size}", *sampled, *loaded])

    def label(self) -> str:
        sampled = f" T={self.temperature:g}" if self.temperature else ""
        loaded = f" load={self.load}" if self.load else ""
        return f"{self.suite} bs={self.batch_size}{sampled}{loaded}"


def group_key(cell: Cell) -> tuple[str, int, float, str]:
    return cell.suite, cell.batch_size, cell.temperature, cell.load


def pairing_groups(grid: Iterable[Cell]) -> list[PairingGroup]:
    """The grid's cells grouped by suite × batch size × temperature × load, groups and cells in run order."""
    members: dict[tuple[str, int, float, str], list[Cell]] = {}
    for cell in grid:
        members.setdefault(group_key(cell), []).append(cell)
    return [PairingGroup(*key, tuple(cells)) for key, cells in members.items()]

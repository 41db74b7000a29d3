"""The one progress-bar layout every long command uses (on stderr, so stdout stays for results)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def progress_bar(console: Console, description: str, *middle: ProgressColumn) -> Progress:
    """description | bar | done/total | <middle columns> | elapsed | ETA remaining."""
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        *middle,
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )

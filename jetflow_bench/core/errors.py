"""The one error type users see.

Anything the user can fix (a bad flag, a missing file, a checkpoint for another model) is raised as
`JfbenchError` with a message that names the bad input and the fix; the CLI prints it as one line on
stderr and exits with code 2. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


class JfbenchError(Exception):
    """A user-facing error: one line that names the input and says how to fix it."""

    exit_code = 2


def one_line(message: str) -> str:
    """``message`` with every non-printable character escaped (a user's value may hold a newline or
    a record separator), so an error stays exactly one line on stderr."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)


def writable_folder(folder: Path, flag: str) -> Path:
    """``folder``, created if needed; a `JfbenchError` naming it (and ``flag``) when it cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise JfbenchError(
            f"{flag} {folder}: cannot write there ({err.strerror or err}): choose a folder you can write"
        ) from None
    return folder

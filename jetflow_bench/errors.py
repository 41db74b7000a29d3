"""The one error type users see.

Anything the user can fix (a bad flag, a missing file, a checkpoint for another model) is raised as
`JfbenchError` with a message that names the bad input and the fix; the CLI prints it as one line on
stderr and exits with code 2. Everything else is a bug and keeps its traceback.
"""


class JfbenchError(Exception):
    """A user-facing error: one line that names the input and says how to fix it."""

    exit_code = 2

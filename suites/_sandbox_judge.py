"""The judge of `suites.sandbox`: run a program's tests in a process the program never enters.

Run as a script by path::

    python -I -B _sandbox_judge.py REQUESTS_FD REPLIES_FD RESULT_FD      (the tests on stdin)

The program runs in another process (`_sandbox_child`); this one binds the program's top-level
names to `Remote` stand-ins, executes the tests, and writes the verdict — one JSON object — to
``RESULT_FD``, which only it and the parent hold. Every value a test sees comes back from the
program as plain data rebuilt here from built-in types (`_sandbox_wire`), so the program decides
what its functions return and nothing else: not how results compare, not whether an assert ran,
not what this process reports. The process makes itself non-dumpable first, so a program running
as the same user cannot open its ``/proc`` entries (memory, descriptors) or attach to it.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sandbox_wire as wire  # noqa: E402 - found next to this script, run with -I

del sys.path[0]

PR_SET_DUMPABLE = 4  # prctl(2)
_NOT_STDLIB = object()  # a module of the program's that is not the standard library's: not bound


class ChannelBroken(BaseException):
    """The program's process stopped answering in the protocol; nothing after this can pass.

    A BaseException, so that a test's ``except Exception`` cannot swallow it.
    """


class RemoteError(Exception):
    """An exception the program raised whose type is not a built-in one."""


def remote_exception(name: str, message: str) -> Exception:
    """The built-in exception ``name`` (ValueError, ...) with ``message``, else a `RemoteError`."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message)
        except TypeError:  # e.g. UnicodeDecodeError takes five arguments
            pass
    return RemoteError(f"{name}: {message}")


class Channel:
    """Requests to the program's process and its replies, decoded into built-in values."""

    def __init__(self, requests: Any, replies: Any) -> None:
        self.requests, self.replies = requests, replies
        self.broken: str | None = None  # why the channel failed, once it has

    def fail(self, why: str) -> ChannelBroken:
        self.broken = self.broken or why
        return ChannelBroken(self.broken)

    def receive(self, expected: str) -> Any:
        try:
            reply = wire.receive(self.replies)
            if reply is None:
                raise self.fail("the program's process ended or closed its channel before its tests finished")
            raised = reply[0] == "raise" and len(reply) == 3 and all(isinstance(x, str) for x in reply[1:])
            if not raised and (reply[0] != expected or len(reply) != 2):
                raise wire.ProtocolError(f"expected {expected!r}, got {str(reply)[:80]}")
            value = None if raised else wire.decode(reply[1], lambda i, t, truth: Remote(self, i, t, truth), _module)
        except (OSError, wire.ProtocolError) as err:
            raise self.fail(f"the program's process broke the protocol: {err}") from None
        if raised:  # outside the try: a remote OSError is the program's, not a broken channel
            raise remote_exception(reply[1], reply[2])
        return value

    def ask(self, request: list) -> Any:
        if self.broken:
            raise ChannelBroken(self.broken)
        try:
            wire.send(self.requests, request)
        except OSError:
            raise self.fail("the program's process ended before its tests finished") from None
        return self.receive("ok")

    def encode(self, value: Any) -> list:
        def handle(v: Any) -> list:
            if isinstance(v, Remote) and v._channel is self:
                return ["h", v._id, v._type, v._truth]
            raise TypeError(f"a test cannot pass a {type(v).__name__} to the program")

        return wire.encode(value, handle)


def _module(name: str) -> Any:
    """A module the program imported, imported here too when it is the standard library's."""
    if name.partition(".")[0] in sys.stdlib_module_names:
        return importlib.import_module(name)
    return _NOT_STDLIB


class Remote:
    """A stand-in for one object in the program's process: call it, get and set its attributes.

    It compares equal only to a stand-in for the same object, so a test's comparison never runs
    code of the program's; its truth value is the one the program process sent with it (the
    program could as well have returned that bool).
    """

    __slots__ = ("_channel", "_id", "_truth", "_type")

    def __init__(self, channel: Channel, handle: int, type_name: str, truth: bool | None) -> None:
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_id", handle)
        object.__setattr__(self, "_type", type_name)
        object.__setattr__(self, "_truth", truth)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        channel = self._channel
        encoded = [[k, channel.encode(v)] for k, v in kwargs.items()]
        return channel.ask(["call", self._id, [channel.encode(a) for a in args], encoded])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._channel.ask(["get", self._id, name])

    def __setattr__(self, name: str, value: Any) -> None:
        self._channel.ask(["set", self._id, name, self._channel.encode(value)])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Remote) and other._channel is self._channel and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __bool__(self) -> bool:
        if self._truth is None:
            raise TypeError(f"a {self._type} from the program has no truth value")
        return self._truth

    def __repr__(self) -> str:
        return f"<{self._type} in the program's process>"


def judge(channel: Channel, tests: str) -> dict[str, str]:
    """Execute ``tests`` against the program's names; the verdict with a one-line detail."""
    try:
        names = channel.receive("ready")
        if not isinstance(names, dict) or not all(isinstance(k, str) for k in names):
            raise channel.fail("the program's process sent no table of names")
        namespace = {"__name__": "__main__", **{k: v for k, v in names.items() if v is not _NOT_STDLIB}}
        exec(compile(tests, "tests.py", "exec"), namespace)
    except ChannelBroken:
        pass
    except MemoryError as err:
        return {"status": "memory", "detail": f"MemoryError: {err}"}
    except BaseException as err:  # noqa: BLE001 - any failure of the program or its tests
        return {"status": "failed", "detail": f"{type(err).__name__}: {str(err)[:500]}"}
    if channel.broken:  # even if a test swallowed the error
        return {"status": "lost", "detail": channel.broken}
    return {"status": "passed", "detail": ""}


def _not_dumpable() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the user namespace is the only shield
        pass


def main() -> None:
    _not_dumpable()
    requests_fd, replies_fd, result_fd = (int(a) for a in sys.argv[1:4])
    tests = sys.stdin.read()
    channel = Channel(os.fdopen(requests_fd, "wb"), os.fdopen(replies_fd, "rb"))
    verdict = judge(channel, tests)
    os.write(result_fd, json.dumps(verdict).encode())
    os._exit(0)  # at once: the program's process is not waited for


if __name__ == "__main__":
    main()

"""The program's side of `suites.sandbox`: run one untrusted program under limits, then answer calls.

Run as a script by path::

    python -I -B _sandbox_child.py PROGRAM_FILE TIMEOUT_S MEMORY_MB REQUESTS_FD REPLIES_FD

with the throw-away directory as working directory; it imports only the standard library (and
``_sandbox_wire`` next to it). This process never decides whether the program passed — it holds
nothing the verdict depends on. It executes the program, replies ``ready`` with the program's
top-level names, then serves the judge's requests (``call``, ``get``, ``set``) on the program's
objects until the judge closes the pipe. Whatever the program does to this process (exit early,
patch builtins, forge replies) it can only change the values the judge's tests see.

Why an audit hook: unlike monkeypatching ``open`` or ``socket``, a hook cannot be removed, and it
sees every file, process, signal and network operation that Python code can start. It contains
careless or hostile output (no writes outside the directory, no new processes, no signals, no
sockets, no ``ctypes``, no access to other processes' ``/proc`` entries); it is not what keeps the
verdict honest, and code that gets past it (see `suites.sandbox`'s out-of-scope list) is contained
only by the limits, the user + network namespace and the file system's permissions.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import resource
import sys

MEMORY_ERROR_EXIT = 3  # the parent reads this exit code as "ran out of its memory limit"
FILE_SIZE_LIMIT = 16 * 2**20  # bytes a program may write to one file (its output file included)

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# Events whose leading path arguments must stay inside the working directory.
_PATH_EVENTS = {
    "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1, "os.truncate": 1,
    "os.utime": 1, "os.rename": 2, "os.link": 2, "os.symlink": 2, "shutil.rmtree": 1,
    "shutil.copyfile": 2, "shutil.copytree": 2, "shutil.move": 2, "os.setxattr": 1, "os.removexattr": 1,
}  # fmt: skip
# Events no benchmark program needs: new processes, signals, network, raising our limits, ctypes.
_BLOCKED_EVENTS = {
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn", "resource.setrlimit", "resource.prlimit",
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "webbrowser.open", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
}  # fmt: skip


def set_limits(timeout_s: float, memory_mb: int) -> None:
    """Address space, CPU seconds (a backstop for the parent's wall clock), file size, no core dumps."""
    memory = memory_mb * 2**20
    cpu = math.ceil(timeout_s) + 1
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _other_process_entry(real: str) -> bool:
    """``/proc/<pid>/...`` (``/proc/self`` resolves to one): memory, descriptors of any process."""
    parts = real.split(os.sep)
    return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit()


def install_guard(root: str) -> None:
    """Refuse writes outside ``root``, ``/proc/<pid>``, processes, signals, network, ctypes."""
    prefix = root.rstrip(os.sep) + os.sep

    def check_path(event: str, path: object, writing: bool) -> None:
        if isinstance(path, int) or path is None:  # an already open descriptor
            return
        real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        if _other_process_entry(real):
            raise PermissionError(f"sandbox: {event} of a process's /proc entry is not allowed: {real}")
        if writing and real != root and not real.startswith(prefix) and real != os.devnull:
            raise PermissionError(f"sandbox: {event} outside the working directory: {real}")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writing = (mode is not None and any(c in mode for c in "wax+")) or bool(flags & _WRITE_FLAGS)
            check_path(event, path, writing)
        elif event in _PATH_EVENTS:
            for path in args[: _PATH_EVENTS[event]]:
                check_path(event, path, True)
        elif event in _BLOCKED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


def serve(source: str, requests_fd: int, replies_fd: int) -> None:
    """Execute ``source``, reply ``ready`` (or how it failed), then answer requests until EOF."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _sandbox_wire as wire

    del sys.path[0]
    requests, replies = os.fdopen(requests_fd, "rb"), os.fdopen(replies_fd, "wb")
    objects: list[object] = []  # handle i -> the object the judge refers to (kept alive, so ids stay unique)
    handles: dict[int, int] = {}  # id(object) -> its handle: one object, one handle

    def handle(value: object) -> list:
        if id(value) not in handles:
            handles[id(value)] = len(objects)
            objects.append(value)
        try:
            truth: bool | None = bool(value)  # `assert re.match(...)`: a Match's truth is plain data
        except Exception:  # noqa: BLE001 - no truth value (e.g. an array): the judge refuses bool()
            truth = None
        return ["h", handles[id(value)], type(value).__name__, truth]

    def answer(compute, ready: bool = False) -> None:  # noqa: ANN001 - a thunk
        try:
            value = compute()
            message = ["ready" if ready else "ok", wire.encode(value, handle)]
        except BaseException as err:  # noqa: BLE001 - whatever the program raised goes to the judge
            message = ["raise", type(err).__name__, str(err)[:500]]
        _flush()  # the program's output so far, before the judge may end this process
        try:
            wire.send(replies, message)
        except MemoryError:
            _exit(MEMORY_ERROR_EXIT)
        except (OSError, ValueError):  # the judge is gone, or a value json cannot write
            _exit(1)

    def argument(value: list) -> object:
        return wire.decode(value, lambda i, _, __: objects[i], importlib.import_module)

    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": __builtins__}

    def load() -> dict[str, object]:
        exec(compile(source, "program.py", "exec"), namespace)
        return {k: v for k, v in namespace.items() if not k.startswith("__")}

    answer(load, ready=True)
    while (request := wire.receive(requests)) is not None:
        op, target = request[0], objects[request[1]]
        if op == "call":
            args = [argument(a) for a in request[2]]
            kwargs = {str(k): argument(v) for k, v in request[3]}
            answer(lambda: target(*args, **kwargs))  # noqa: B023 - called at once
        elif op == "get":
            answer(lambda: getattr(target, request[2]))  # noqa: B023
        elif op == "set":
            value = argument(request[3])
            answer(lambda: setattr(target, request[2], value))  # noqa: B023
        else:
            raise wire.ProtocolError(f"unknown request {op!r}")


def _flush() -> None:
    for stream in (sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(AttributeError, OSError, ValueError):  # closed or replaced by the program
            stream.flush()  # type: ignore[union-attr]


def _exit(code: int) -> None:
    _flush()
    os._exit(code)


def main() -> None:
    program, timeout_s, memory_mb = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    requests_fd, replies_fd = int(sys.argv[4]), int(sys.argv[5])
    with open(program, encoding="utf-8") as f:
        source = f.read()
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the program reads nothing
    set_limits(timeout_s, memory_mb)
    install_guard(os.path.realpath(os.getcwd()))
    try:
        serve(source, requests_fd, replies_fd)
    except MemoryError:
        _exit(MEMORY_ERROR_EXIT)
    _exit(0)


if __name__ == "__main__":
    main()

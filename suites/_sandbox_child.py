"""The child side of `suites.sandbox`: run one untrusted program under limits, then report.

Run as a script by path (``python -I -B _sandbox_child.py TIMEOUT_S MEMORY_MB``) with the throw-away
directory as working directory; it imports only the standard library. stdin carries a one-line nonce
and then the program. Only a program that runs to its end makes the child print the nonce, so neither
``sys.exit(0)`` nor ``os._exit(0)`` halfway through the tests can pass for success.

Why an audit hook: unlike monkeypatching ``open`` or ``socket``, a hook cannot be removed by the
program, and it sees every file, process and network operation that Python code can start. It is a
guard against careless model output, not a jail for hostile code (ctypes can still reach libc); the
parent adds a network namespace when ``unshare`` works.
"""

from __future__ import annotations

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
# Events no benchmark program needs: new processes, signals, network, raising our limits.
_BLOCKED_EVENTS = {
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "pty.spawn", "resource.setrlimit", "socket.connect", "socket.bind",
    "socket.sendto", "socket.sendmsg", "socket.getaddrinfo", "socket.gethostbyname", "webbrowser.open",
}  # fmt: skip


def set_limits(timeout_s: float, memory_mb: int) -> None:
    """Address space, CPU seconds (a backstop for the parent's wall clock), file size, no core dumps."""
    memory = memory_mb * 2**20
    cpu = math.ceil(timeout_s) + 1
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def install_guard(root: str) -> None:
    """Refuse writes outside ``root``, new processes and network use, for the rest of the process."""
    prefix = root.rstrip(os.sep) + os.sep

    def check_path(event: str, path: object) -> None:
        if isinstance(path, int) or path is None:  # an already open descriptor
            return
        real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        if real != root and not real.startswith(prefix) and real != os.devnull:
            raise PermissionError(f"sandbox: {event} outside the working directory: {real}")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writing = (mode is not None and any(c in mode for c in "wax+")) or bool(flags & _WRITE_FLAGS)
            if writing:
                check_path(event, path)
        elif event in _PATH_EVENTS:
            for path in args[: _PATH_EVENTS[event]]:
                check_path(event, path)
        elif event in _BLOCKED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


def _fail(message: str, exit_code: int) -> None:
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)
    os._exit(exit_code)


def main() -> None:
    timeout_s, memory_mb = float(sys.argv[1]), int(sys.argv[2])
    nonce = sys.stdin.readline().strip()
    source = sys.stdin.read()
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the program must not read what we were sent
    set_limits(timeout_s, memory_mb)
    install_guard(os.path.realpath(os.getcwd()))
    try:
        exec(compile(source, "program.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except MemoryError:
        _fail("MemoryError: the program exceeded its memory limit", MEMORY_ERROR_EXIT)
    except SystemExit as exit_:
        _fail(f"SystemExit({exit_.code!r}) before the tests finished", 1)
    except BaseException as err:  # any failure of the program or its tests
        _fail(f"{type(err).__name__}: {str(err)[:500]}", 1)
    sys.stdout.flush()
    os.write(1, f"\n{nonce}\n".encode())  # fd 1 directly: the program may have replaced sys.stdout
    os._exit(0)


if __name__ == "__main__":
    main()

"""The `jfbench` command line: this module only wires command groups together.

Each command group lives in its own module and registers itself on ``app`` (or on a sub-app it adds).
User errors (`JfbenchError`) become one line on stderr and exit code 2, and so do click's usage
errors (`jetflow_bench.cli.usage`); set ``JFBENCH_DEBUG=1`` to see the traceback instead. Ctrl-C
is one line too (exit code 130), saying that the same command resumes and what it keeps.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Callable

import typer

from jetflow_bench.core.errors import JfbenchError, one_line

app = typer.Typer(
    name="jfbench",
    help="Benchmark and ablate speculative-decoding drafters (AR baseline, ngram, EAGLE, DFlash-T, JetFlow).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# Command-group modules; importing one adds its commands to `app`.
COMMAND_MODULES: tuple[str, ...] = ("target_cmd", "suites_cmd", "sweep_cmd", "ablate_cmd", "show_cmd", "bench_cmd", "report_cmd", "check_cmd", "train_cmd", "demo_cmd", "project_cmd",
                                     "kernels_cmd", "eval_cmd", "vllm_cmd", "export_cmd", "claims_cmd", "compare_cmd", "curves_cmd")


# What an interrupted command keeps, for its one line ("3 cells kept"): a command that resumes
# registers a function saying so once it knows where it writes (`grid_options.run_and_report`).
KEPT_ON_INTERRUPT: list[Callable[[], str]] = []


class Interrupted(BaseException):
    """Ctrl-C, raised by jfbench's own SIGINT handler: click turns a KeyboardInterrupt into a blank
    line and an Abort, and ``except Exception`` blocks must not swallow it either."""


def _interrupted(signum: int, frame: object) -> None:
    raise Interrupted


def _register_commands() -> None:
    from jetflow_bench.cli.helptext import use_plain_help

    for module in COMMAND_MODULES:
        importlib.import_module(f"jetflow_bench.cli.{module}")
    use_plain_help(app)


def main() -> None:
    """Console-script entry point."""
    # jfbench shows its own progress on stderr; the libraries' tqdm bars ("Writing model shards",
    # dataset splits) would interleave with it. Read when they are first imported, so set first.
    for flag in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ.setdefault(flag, "1")
    _register_commands()
    previous = signal.signal(signal.SIGINT, _interrupted)
    try:
        code = app(standalone_mode=False, prog_name="jfbench")  # non-standalone click *returns* typer.Exit / Ctrl-C (130) codes
    except Interrupted:
        kept = "".join(f"; {say()}" for say in KEPT_ON_INTERRUPT)
        print(f"interrupted — run the same command to resume{kept}", file=sys.stderr)
        sys.exit(130)
    except JfbenchError as err:
        if os.environ.get("JFBENCH_DEBUG"):
            raise
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as err:  # click usage errors arrive here in non-standalone mode
        from jetflow_bench.cli.usage import is_usage_error, usage_lines

        if not is_usage_error(err) or os.environ.get("JFBENCH_DEBUG"):
            raise
        print("\n".join(one_line(line) if line.startswith("error: ") else line for line in usage_lines(err, sys.argv[1:])),
              file=sys.stderr)
        sys.exit(2)
    finally:
        signal.signal(signal.SIGINT, previous)
        KEPT_ON_INTERRUPT.clear()
    if isinstance(code, int) and code:
        sys.exit(code)

"""python -m bench: run sweeps, read and compare their results, and run the suite's checks.

Each command is a module of this package with an `add_parser(sub)` that declares its
flags and the function that runs it; the list below is their order in `--help`.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from bench.cli import anatomy, answer, check, compare, fit, instructions, listing, probe_comm, report, run
from bench.cli.common import UsageError

COMMANDS = (run, listing, anatomy, answer, report, probe_comm, fit, compare, instructions, check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parabench", description="Which data-parallel strategy, at which batch "
                                     "size, at what cost: one training workload under every strategy.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


# What parabench imports beyond the standard library: the dependencies of pyproject.toml (module:
# package). nvidia-ml-py is left out: without it GPU facts come from torch.
NEEDED = {"torch": "torch", "numpy": "numpy", "pandas": "pandas", "matplotlib": "matplotlib", "psutil": "psutil",
          "rich": "rich", "tabulate": "tabulate", "markdown": "markdown"}


def missing_packages() -> list[str]:
    """The packages of NEEDED this Python cannot import (found without importing them)."""
    import importlib.util

    return [package for module, package in NEEDED.items() if importlib.util.find_spec(module) is None]


def main(argv: list[str] | None = None) -> int:
    # A terminal or pipe that cannot show a character (PYTHONIOENCODING=ascii, a C locale) gets it
    # escaped: a non-ASCII path in a message is never a traceback after the work is done.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    missing = missing_packages()
    if missing:  # before any command: one line, not an import error in the middle of a sweep
        # A bare `pip install torch` brings a CUDA build of gigabytes to a CPU host: torch comes from `make setup`.
        fix = (f"{sys.executable} -m pip install {' '.join(missing)}, or " if "torch" not in missing else "") + \
            "`make setup` (.venv with all of them, torch's CPU build where there is no GPU)"
        venv = Path(".venv/bin/parabench")
        if venv.exists():  # setup ran here: the newcomer typed `python -m bench` outside the venv
            fix = (f"this folder's .venv has them: `. .venv/bin/activate` first, or run {venv} "
                   f"{' '.join(sys.argv[1:] if argv is None else argv)}").rstrip()
        print(f"parabench: error: this Python ({sys.executable}) lacks {', '.join(missing)}: {fix}", file=sys.stderr)
        return 2
    from strategies import PluginError

    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (UsageError, PluginError) as exc:
        print(f"parabench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a command without its own clean-up: one line, not a traceback
        print("parabench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output left early (`answer --json | head -1`): what it did not read
        # is not wanted. Later writes, the interpreter's last flush included, go nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE

"""The strategy registry: every module in this folder is imported and registers its strategies.

Adding a strategy is adding a file here with a `@register`ed `Strategy` subclass: no list
to edit. Strategies kept elsewhere (the test-only ones under tests/strategies/) are found
through PARABENCH_STRATEGY_PATH, a list of folders; workers inherit it.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path

from bench.core.discovery import import_modules
from strategies.base import Placement, Strategy, TrainStep, WorkerContext

_REGISTRY: dict[str, Strategy] = {}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# What a strategy claims about itself is its own word: one built on another registered strategy
# (docs/extending.md's MyZero on DDP) does not inherit these. Inherited, they would make it compile
# or capture steps its own code was never checked under, run Apex levels it may not wire, take
# ddp's place as the reference, or share ddp's place and colour in every table and figure. Claims
# from a class that is not registered (dp.py's FromDeviceZero, a shared base) are inherited.
OWN_CLAIMS = ("executions", "apex_levels", "apex_unavailable", "baseline", "reference", "order", "colour")


class PluginError(ImportError):
    """A strategy file from PARABENCH_STRATEGY_PATH that cannot be loaded; the message names it."""



def register(cls: type[Strategy]) -> type[Strategy]:
    """Add a strategy; a second strategy of the same name (a plug-in naming itself `ddp`) is
    refused, naming both files: one of them would silently measure in the other's place."""
    registered = {type(s) for s in _REGISTRY.values()}
    for claim in OWN_CLAIMS:
        owner = next(k for k in cls.__mro__ if claim in vars(k))
        if owner is not cls and owner in registered:
            setattr(cls, claim, getattr(Strategy, claim))
    if not NAME.fullmatch(str(cls.name)):
        # A name is shown in tables, headings and a web page, and keys every row: plain words only.
        raise PluginError(f"strategy {str(cls.name)[:40]!r} of {_file_of(cls)}: a strategy's name is letters, digits, "
                          "'.', '_' and '-', starting with a letter or digit: rename it")
    wrong = cls().declaration_error()
    if wrong:
        raise PluginError(f"strategy {cls.name!r} of {_file_of(cls)}: {wrong}")
    taken = _REGISTRY.get(cls.name)
    if taken is not None and _file_of(type(taken)) != _file_of(cls):
        raise PluginError(f"strategy {cls.name!r} of {_file_of(cls)} has the name of the strategy in "
                          f"{_file_of(type(taken))}: give it a name of its own")
    for role in ("baseline", "reference"):
        holder = next((s for s in _REGISTRY.values() if getattr(s, role) and s.name != cls.name), None)
        if getattr(cls, role) and holder is not None:
            raise PluginError(f"strategy {cls.name!r} of {_file_of(cls)} claims {role} = True, which "
                              f"{holder.name!r} holds: there is one {role}; leave the flag out")
    _REGISTRY[cls.name] = cls()
    return cls


def _file_of(cls: type) -> str:
    try:
        return str(Path(inspect.getfile(cls)).resolve())
    except (TypeError, OSError):
        return cls.__module__


def _extra_folders() -> list[Path]:
    return [Path(p) for p in os.environ.get("PARABENCH_STRATEGY_PATH", "").split(os.pathsep) if p]


def _load() -> None:
    if not import_modules(__name__, __path__):
        return
    for folder in _extra_folders():
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            spec = importlib.util.spec_from_file_location(f"parabench_extra_strategies.{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # as an import would: its classes know their file
            try:
                spec.loader.exec_module(module)
            except PluginError:
                raise
            except Exception as exc:  # the plug-in's own error, with its file: not a traceback through ours
                raise PluginError(f"strategy plug-in {path} (PARABENCH_STRATEGY_PATH) does not load: "
                                  f"{type(exc).__name__}: "
                                  f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from exc


def names() -> list[str]:
    """Every strategy, in report order."""
    _load()
    return sorted(_REGISTRY, key=lambda n: (_REGISTRY[n].order, n))


def get(name: str) -> Strategy:
    _load()
    strategy = _REGISTRY.get(name)
    if strategy is None:
        raise KeyError(f"unknown strategy {name!r}: choose from {', '.join(names())}")
    return strategy


def info(name: str) -> Strategy | None:
    """The strategy's declaration, or None for a name this checkout does not know (a results
    file refuses such a row when it is read: bench/cases/results.py)."""
    _load()
    return _REGISTRY.get(name)


def baseline() -> str:
    """The one-device strategy that speed-ups are measured against."""
    found = [n for n in names() if _REGISTRY[n].baseline]
    return found[0] if found else "single"


def threaded() -> list[str]:
    """The strategies whose replicas run in threads (cuDNN autotuning is off for them by default)."""
    return [n for n in names() if _REGISTRY[n].replicas_in_threads]


def reference() -> str:
    """The process-per-device strategy that DataParallel-style strategies are set against."""
    found = [n for n in names() if _REGISTRY[n].reference]
    return found[0] if found else "ddp"


__all__ = ["Placement", "Strategy", "TrainStep", "WorkerContext", "register", "names", "get", "info", "baseline",
           "reference", "threaded"]

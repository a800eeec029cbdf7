"""The strategy registry: one module per strategy, each registering one instance."""
from __future__ import annotations

import importlib
import os

from strategies.base import Placement, Strategy, TrainStep, WorkerContext

_MODULES = ("single", "dp", "dp_fn", "dp_manual", "allreduce_scratch", "ddp", "mxnet_gluon", "faulty")
_REGISTRY: dict[str, Strategy] = {}
_loaded = False


def register(cls: type[Strategy]) -> type[Strategy]:
    _REGISTRY[cls.name] = cls()
    return cls


def _load() -> None:
    # A flag, not "registry empty": importing one strategy module directly registers it alone.
    global _loaded
    if not _loaded:
        for module in _MODULES:
            importlib.import_module(f"strategies.{module}")
        _loaded = True


def _test_strategies_enabled() -> bool:
    return os.environ.get("PARABENCH_TEST_STRATEGIES") == "1"


def names(include_hidden: bool = False) -> list[str]:
    """Strategies a user can pick, in the order they are reported (test-only ones too
    with include_hidden, where PARABENCH_TEST_STRATEGIES=1 enables them)."""
    _load()
    show_hidden = include_hidden and _test_strategies_enabled()
    return [n for n, s in _REGISTRY.items() if show_hidden or not s.hidden]


def get(name: str) -> Strategy:
    _load()
    strategy = _REGISTRY.get(name)
    if strategy is None or (strategy.hidden and not _test_strategies_enabled()):
        raise KeyError(f"unknown strategy {name!r}: choose from {', '.join(names())}")
    return strategy


__all__ = ["Placement", "Strategy", "TrainStep", "WorkerContext", "register", "names", "get"]

"""Registries fill themselves by importing the modules of their package, so that adding a
strategy or a workload is adding a file, with no list to edit."""
from __future__ import annotations

import importlib
import pkgutil

_imported: set[str] = set()


def import_modules(package: str, path) -> bool:
    """Import every module of `package` (its `__path__`) but the private ones (`_name.py`),
    once; True the first time. A flag, not "registry empty": importing one module directly
    registers it alone."""
    if package in _imported:
        return False
    _imported.add(package)
    for module in pkgutil.iter_modules(path):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")
    return True

"""The sources of models that are not built in: `PREFIX:NAME` on the command line; the
`Source` class and its registry (`SOURCES`), and the sources themselves (timm, torchvision).

Adding a source is adding one `register_source(Source(...))` here: its prefix, the
package it needs (checked without importing it) and a resolver that, in the worker,
gives the model's factory, input shape, number of classes and a summary (None where the
model itself says: bench/workloads/resolve.py probes it on the meta device).
"""
from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from typing import Callable

from bench.workloads import WorkloadError


@dataclass(frozen=True)
class Source:
    """Models named `PREFIX:NAME`: `resolve(NAME)` (in the worker) gives (factory,
    input_shape or None, num_classes or None, summary). `package` must be importable."""

    prefix: str
    package: str
    install: str  # what to run where the package is missing
    resolve: Callable[[str], tuple]
    summary: str = ""

    def installed(self) -> bool:
        return importlib.util.find_spec(self.package) is not None  # no import: torch-free

    def version(self) -> str:
        from importlib import metadata

        try:
            return metadata.version(self.package)
        except metadata.PackageNotFoundError:
            return ""


SOURCES: dict[str, Source] = {}


def register_source(source: Source) -> Source:
    SOURCES[source.prefix] = source
    return source


# torchvision without its compiled image operators (the CPU build's 0.16.2, which timm imports too)
# warns at import that torchvision.io cannot decode images: no model here reads an image.
warnings.filterwarnings("ignore", message="Failed to load image Python extension", category=UserWarning)


def _timm(name: str) -> tuple:
    import timm

    if not timm.is_model(name):
        raise WorkloadError(f"timm has no model {name!r} (timm.list_models() lists them)")
    try:  # the input size the model was made for (timm >= 0.9)
        from timm.models import get_pretrained_cfg

        config = get_pretrained_cfg(name)
        shape = tuple(config.input_size) if config is not None and config.input_size else None
    except Exception:  # noqa: BLE001 - older timm: 3x224x224
        shape = None
    return (lambda: timm.create_model(name)), shape, None, f"timm {name}"


def _torchvision(name: str) -> tuple:
    from torchvision import models

    if name not in models.list_models():
        raise WorkloadError(f"torchvision has no model {name!r} (torchvision.models.list_models() lists them)")
    shape, classes = None, None
    try:  # the input size and classes of its published weights, where it has some
        weights = models.get_model_weights(name).DEFAULT
        crop = getattr(weights.transforms, "keywords", {}).get("crop_size")
        shape = (3, *((crop, crop) if isinstance(crop, int) else crop)) if crop else None
        classes = len(weights.meta["categories"]) if weights.meta.get("categories") else None
    except Exception:  # noqa: BLE001 - no weights: the defaults (3x224x224, output width)
        pass
    return (lambda: models.get_model(name, weights=None)), shape, classes, f"torchvision.models.{name}"


# A plain `pip install timm` (it needs torchvision) may replace the torch that is there with a CUDA
# build of gigabytes: `make setup-models` installs both beside it (the Makefile says how).
INSTALL = "make setup-models (both, beside the torch of .venv: a plain `pip install` may replace that torch)"
register_source(Source("timm", "timm", INSTALL, _timm, "timm.create_model(NAME), random weights"))
register_source(Source("torchvision", "torchvision", INSTALL, _torchvision,
                       "torchvision.models.get_model(NAME), random weights"))

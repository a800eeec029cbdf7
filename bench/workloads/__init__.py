"""Workloads: the models the suite trains, each with its data (bench/workloads/data.py): images
with classes, or sequences of token ids for a language model, and the unit throughput counts.

A model name on the command line is one of:

- a built-in workload, registered by a module in this folder (`register(Workload(...))`);
  every module here is imported when the registry is first asked, so adding one is adding
  one file. ResNet-18 (`resnet18`, `resnet18-small`) is the reference workload, the same
  network in every strategy and in MXNet (resnet18.py); `vit-large` is the one whose
  model state is large enough for sharding to matter (vit.py); `gpt2-124m`, `gpt2-350m` and
  `gpt2-1.5b` are language models of nanoGPT's shape (gpt.py);
- `PREFIX:NAME` for a registered source (sources.py: `timm:NAME`, `torchvision:NAME`);
- `package.module:factory`: the user's own code, a callable that returns the model, or a
  dict (or object) with `model` and optionally `input_shape` and `num_classes` (images), or
  `vocab_size` and `seq_len` (a language model), `loss`, `blocks` (see `from_factory_result`).

Importing this package loads no torch, and neither does checking a name
(`check_name`), nor naming its source (`source_of`), nor `probe`, which resolves names
that are not built in in a process of its own: the sweep's parent stays light.
Resolving such a name (`get_workload`) imports its package or module; building a model
or data loads torch; both happen in the worker (or in `probe`'s process).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from bench.core.discovery import import_modules
from bench.workloads.data import Data, Images, from_facts

if TYPE_CHECKING:
    import torch
    from torch import nn


class WorkloadError(LookupError):
    """A model name that cannot be used; the message is one line that names the fix."""


@dataclass(frozen=True)
class Workload:
    """One model with its data (bench/workloads/data.py): everything a strategy needs to build the same job."""

    name: str
    data: Data  # what one row of the batch is, how the synthetic rows are made, what throughput counts
    factory: Callable[[], "nn.Module"]  # builds the model from torch's (seeded) random state
    summary: str = ""
    source: str = "built-in"  # where the model comes from, recorded in every row
    # The arguments of the same network in MXNet Gluon (strategies/gluon/models.py), or None
    # where MXNet has no such network.
    mxnet: dict | None = None
    # The modules that sharding strategies (FSDP2) wrap on their own: class names (every
    # outermost module of those classes), or a callable model -> modules; None: the
    # repeated blocks found by `repeated_blocks`.
    blocks: tuple[str, ...] | Callable[["nn.Module"], list] | None = None
    # The training loss, loss(output, targets) -> scalar; None: the data's own (cross-entropy over
    # the classes, or over the vocabulary at every position).
    loss: Callable | None = field(default=None, compare=False)
    order: int = 50  # where it is listed: the reference workload first (`names`)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One row's shape: (C, H, W) for an image, (T,) for a sequence of token ids."""
        return self.data.shape

    @property
    def num_classes(self) -> int:
        """The classes of an image, the vocabulary of a language model."""
        return self.data.classes

    def build(self, seed: int = 0) -> nn.Module:
        """The model with weights that depend on `seed` alone (identical in every strategy)."""
        import torch

        with torch.random.fork_rng(devices=[]), default_dtype_kept():
            torch.manual_seed(seed)
            return self.factory()

    def criterion(self) -> Callable:
        """The loss the training step takes (the same in every strategy)."""
        return self.loss if self.loss is not None else self.data.loss()

    def synthetic_batch(self, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed random batch on the CPU; the first rows are the same for any `batch`."""
        return self.synthetic_rows(0, batch, seed)

    def synthetic_rows(self, start: int, stop: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows [start, stop) of the fixed random global batch, built without the others:
        each rank of a multi-process job makes only its own shard; any slice equals that slice
        of a larger batch (bench/workloads/data.py)."""
        return self.data.rows(start, stop, seed)


_REGISTRY: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    _REGISTRY[workload.name] = workload
    return workload


def _load() -> None:
    import_modules(__name__, __path__)


def names() -> list[str]:
    """Every built-in workload: by `order` (the reference ResNet-18 first), then as registered."""
    _load()
    return sorted(_REGISTRY, key=lambda n: _REGISTRY[n].order)


def builtin(name: str) -> Workload | None:
    """The built-in workload of that name, or None (torch-free)."""
    _load()
    return _REGISTRY.get(name)


# --- sources: where a model that is not built in comes from ---------------------------


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


_MODULE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def _split(name: str) -> tuple[str, str] | None:
    left, sep, right = name.partition(":")
    return (left, right) if sep else None


def check_name(name: str) -> None:
    """Raise WorkloadError (one line) if `name` cannot name a workload; imports nothing.
    A registered prefix wins over a module of the same name (`timm:x` is timm's model x)."""
    _load()
    if name in _REGISTRY:
        return
    parts = _split(name)
    if parts is None:
        raise WorkloadError(f"unknown model {name!r}: choose from {', '.join(names())}, "
                            f"{', '.join(p + ':NAME' for p in SOURCES)} or package.module:factory")
    left, right = parts
    if left in SOURCES:
        source = SOURCES[left]
        if not right:
            raise WorkloadError(f"model {name!r} names no {left} model: write {left}:NAME")
        if not source.installed():
            raise WorkloadError(f"model {name!r} needs {source.package}, which is not installed: {source.install}")
        return
    if not (_MODULE.match(left) and _MODULE.match(right)):
        raise WorkloadError(f"model {name!r} is neither built in ({', '.join(names())}) nor "
                            f"{'|'.join(SOURCES)}:NAME nor package.module:factory")
    if importlib.util.find_spec(left.split(".")[0]) is None:  # the top package only: nothing imported
        raise WorkloadError(f"model {name!r}: no module named {left.split('.')[0]!r}: "
                            f"put its folder on PYTHONPATH (the workers import it from there)")


def source_of(name: str) -> str:
    """Where the model comes from, for the row (torch-free): 'built-in', 'timm 1.0.15',
    'module mymodels' and so on; '' for a name that names nothing."""
    _load()
    if name in _REGISTRY:
        return _REGISTRY[name].source
    parts = _split(name)
    if parts is None:
        return ""
    if parts[0] in SOURCES:
        source = SOURCES[parts[0]]
        return f"{source.package} {source.version()}".strip()
    return f"module {parts[0]}"


def probe(names: list[str], timeout_s: float = 300) -> dict[str, dict]:
    """Resolve the names that are not built in, in a process of their own (as a worker
    would: the repository and PYTHONPATH on its path), so that the caller imports neither
    torch nor the user's module: {name: facts}; WorkloadError (one line) for the first name
    that cannot be built, or when resolving takes over `timeout_s` (the sweep's
    --startup-timeout: a factory that loads weights may take long). Costs that process's
    torch import, only where such names are given. The answer comes in a file of its own,
    never on stdout, where the user's code may print anything (a line without a newline
    too); the process dies with the caller, SIGKILL included."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from bench.core.imports import ROOT, pythonpath
    from bench.core.lifetime import SCRATCH_PREFIX, end_processes_in, kill_with_parent, lock_folder

    _load()
    others = [n for n in dict.fromkeys(names) if n not in _REGISTRY]
    if not others:
        return {}
    # A folder the next sweep removes should this process be killed while the factory resolves,
    # with whatever the factory left running there (its TMPDIR: bench/core/lifetime.py end_processes_in).
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}probe-") as folder:
        env = {**os.environ, "PYTHONPATH": pythonpath(), "TMPDIR": folder}
        live = lock_folder(folder)
        try:
            answer = os.path.join(folder, "answer.jsonl")
            # Its output goes to a file and the wait is for the process, not for the end of its
            # output: a helper process the factory starts holds pipes open, never a file. In a
            # process group of its own, so that such helpers end with it.
            with open(os.path.join(folder, "output.txt"), "w+", errors="replace") as output:
                dies_with_us = functools.partial(kill_with_parent, os.getpid())
                proc = subprocess.Popen([sys.executable, "-m", "bench.workloads._probe", answer, *others], cwd=ROOT,
                                        env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                        start_new_session=True, preexec_fn=dies_with_us)
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    raise WorkloadError(f"resolving {', '.join(others)} took over {timeout_s:g} s: give its factory "
                                        f"more time with a larger --startup-timeout") from None
                finally:
                    _end_group(proc)
                    end_processes_in(folder)  # a helper that left the probe's tree still carries its TMPDIR
                output.seek(0)
                printed = output.read()
            try:
                with open(answer) as fh:
                    lines = fh.read().splitlines()
            except OSError:
                lines = []
        finally:
            os.close(live)
    found = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("name") in others:
            found[entry["name"]] = entry
    for name in others:
        if name in found and "error" not in found[name]:
            _PROBED[name] = found[name]
        if name not in found:
            output = printed.strip().splitlines()
            tail = output[-1][-300:] if output else "no output"
            raise WorkloadError(f"model {name!r}: resolving it failed (exit {proc.returncode}): {tail}")
        if "error" in found[name]:
            raise WorkloadError(found[name]["error"])
    return found


def _end_group(proc) -> None:
    """SIGKILL the probe's process group (the probe, and what it started and left behind), and
    its descendants in sessions of their own, which the group does not reach; reap it."""
    import os
    import signal

    import psutil

    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for child in descendants:
        try:
            child.kill()
        except psutil.Error:
            pass
    proc.wait()


@functools.lru_cache(maxsize=None)
def get_workload(name: str) -> Workload:
    """The workload of any model name; a name that is not built in is resolved here (its
    package or module imported, its model probed once on the meta device)."""
    _load()
    if name in _REGISTRY:
        return _REGISTRY[name]
    check_name(name)
    left, right = _split(name)
    if left in SOURCES:
        factory, shape, classes, summary = SOURCES[left].resolve(right)
        return _described(name, factory, {"input_shape": shape, "num_classes": classes}, summary=summary,
                          source=source_of(name))
    return _from_module(name, left, right)


def data_of(name: str) -> Data | None:
    """The data of a model name, torch-free: a built-in workload's, or what `probe` found for
    another name in this process; None where neither knows it."""
    _load()
    if name in _REGISTRY:
        return _REGISTRY[name].data
    found = _PROBED.get(name)
    return from_facts(found) if found and "error" not in found else None


def data_or_images(name: str) -> Data:
    """The data of a model name (`data_of`), or, where it is not known here, images of 3x224x224 in
    1000 classes: what every row written before the data had a kind was."""
    return data_of(name) or Images((3, 224, 224), 1000)


# What `probe` found of each name that is not built in, in this process (its data among it).
_PROBED: dict[str, dict] = {}


def _from_module(name: str, module_name: str, attr: str) -> Workload:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module: any failure is this model's
        raise WorkloadError(f"model {name!r}: importing {module_name} failed: {type(exc).__name__}: {exc}") from exc
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise WorkloadError(f"model {name!r}: {module_name} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise WorkloadError(f"model {name!r}: {module_name}.{attr} is not callable (it must return a model)")
    declared = _probe(name, target)
    return _described(name, lambda: from_factory_result(target(), name)["model"], declared, probe=declared["model"],
                      source=source_of(name),
                      summary=declared.get("summary") or (target.__doc__ or "").strip().split("\n")[0],
                      loss=declared.get("loss"), blocks=declared.get("blocks"))


def _probe(name: str, factory: Callable) -> dict:
    """What the factory declares, from one call on the meta device (no memory, whatever
    the model's size), or on the CPU where the factory needs real tensors; a model whose
    parameters are not float32 is refused (the precisions start from float32 parameters)."""
    import torch

    try:
        with torch.device("meta"), default_dtype_kept():
            return _float32(name, from_factory_result(factory(), name))
    except WorkloadError:
        raise
    except Exception:  # noqa: BLE001 - e.g. a factory that loads weights: try for real
        pass
    try:
        with default_dtype_kept():
            return _float32(name, from_factory_result(factory(), name))
    except WorkloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is this model's
        raise WorkloadError(f"model {name!r}: its factory failed: {type(exc).__name__}: {exc}") from exc


class default_dtype_kept:
    """torch's default dtype as it was before a factory ran: one that sets it (float64) must not
    change the dtype of the data, nor of anything built after it in the process."""

    def __enter__(self):
        import torch

        self.dtype = torch.get_default_dtype()

    def __exit__(self, *exc):
        import torch

        torch.set_default_dtype(self.dtype)


def _float32(name: str, declared: dict) -> dict:
    """The declaration, where its model's floating-point parameters are float32; WorkloadError (one
    line, naming the fix) otherwise: every precision here (fp32, autocast, Apex) trains float32
    parameters, and a row would call a float64 step fp32."""
    import torch

    other = sorted({str(p.dtype).replace("torch.", "") for p in declared["model"].parameters()
                    if p.is_floating_point() and p.dtype != torch.float32})
    if other:
        raise WorkloadError(f"model {name!r} has {', '.join(other)} parameters: the precisions (fp32, amp-*) train "
                            "float32 ones; build it in float32 (do not change torch's default dtype or call "
                            ".double() in the factory)")
    return declared


# What a factory may declare beside its model.
DECLARED = ("model", "input_shape", "num_classes", "vocab_size", "seq_len", "loss", "blocks", "summary")


def from_factory_result(result: Any, name: str = "") -> dict:
    """A user factory's result as a dict: an nn.Module alone, or a dict or object with
    `model` and optionally, for a model of images, `input_shape` (C, H, W: default 3x224x224)
    and `num_classes` (default: the model's output width); for a language model, `vocab_size`
    and `seq_len` (the model takes (batch, seq_len) token ids and returns (batch, seq_len,
    vocabulary) logits); and for either `loss` (default cross-entropy, over every position for a
    language model), `blocks` (the modules FSDP2 wraps: class names or a callable; default the
    repeated blocks). `name`, the model's name, is for the message where the result is none of these."""
    from torch import nn

    if isinstance(result, nn.Module):
        return {"model": result}
    declared = result if isinstance(result, dict) else {
        k: getattr(result, k) for k in DECLARED if hasattr(result, k)}
    if not isinstance(declared.get("model"), nn.Module):
        got = type(result).__name__ if not isinstance(result, (dict, type(None), bool, int, float, str)) \
            else f"{type(result).__name__} {_shown(result)}"
        if isinstance(result, dict) or declared:
            got += f" whose 'model' is {type(declared.get('model')).__name__}"
        raise WorkloadError(f"{f'model {name!r}: ' if name else ''}its factory returned {got}: it must return an "
                            f"nn.Module, or a dict or object whose 'model' is one")
    tokens = [k for k in ("vocab_size", "seq_len") if declared.get(k) is not None]
    if len(tokens) == 1:
        missing = ({"vocab_size", "seq_len"} - set(tokens)).pop()
        raise WorkloadError(f"{f'model {name!r}: ' if name else ''}its factory declares {tokens[0]} without {missing}: "
                            "a language model declares both")
    if tokens and declared.get("input_shape") is not None:
        raise WorkloadError(f"{f'model {name!r}: ' if name else ''}its factory declares input_shape and a vocabulary: "
                            "images declare input_shape and num_classes, a language model vocab_size and seq_len")
    return declared


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _described(name, factory, declared: dict, probe=None, **fields) -> Workload:
    """The workload of what a factory or source declares: a language model where it declares a
    vocabulary and a sequence length, else images of its input shape (default 3x224x224) with
    its class count (default the model's output width, from one forward on the meta device: no
    memory, no arithmetic), the output's shape checked against what the loss takes."""
    import torch

    if declared.get("vocab_size") is not None:
        data = from_facts(declared)
        if not (data.vocab_size >= 2 and data.seq_len >= 1):
            raise WorkloadError(f"model {name!r}: vocab_size {data.vocab_size} and seq_len {data.seq_len}: a language "
                                f"model has a vocabulary of 2 or more and sequences of 1 or more tokens")
    else:
        shape = tuple(int(d) for d in (declared.get("input_shape") or (3, 224, 224)))
        data = Images(shape, int(declared["num_classes"]) if declared.get("num_classes") is not None else 0)
    if data.kind == "images" and data.classes:
        return Workload(name, data, factory, **{k: v for k, v in fields.items() if v is not None})
    try:
        with torch.device("meta"):
            model = probe.to("meta") if probe is not None else factory()
            out = model(data.example(2)[0])
    except Exception as exc:  # noqa: BLE001 - the model's own code
        if data.kind == "tokens":  # declared in full: a model that cannot run on meta is checked when it runs
            return Workload(name, data, factory, **{k: v for k, v in fields.items() if v is not None})
        raise WorkloadError(f"model {name!r}: a forward pass on a {'x'.join(map(str, data.shape))} input failed "
                            f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}): "
                            "declare input_shape and num_classes") from exc
    wrong = data.check_output(out)  # a shape the loss cannot take (a Hugging Face model's output object...)
    if wrong:
        raise WorkloadError(f"model {name!r} {wrong}")
    if data.kind == "images":
        data = Images(data.shape, int(out.shape[-1]))
    return Workload(name, data, factory, **{k: v for k, v in fields.items() if v is not None})

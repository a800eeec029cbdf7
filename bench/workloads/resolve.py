"""Model names that are not built in (bench/workloads/__init__.py's docstring says which
there are): checking one without importing it (`check_name`), naming where it comes from
(`source_of`), and resolving it into a Workload (`resolved`, which `get_workload` asks): a
source's model (bench/workloads/sources.py) or a user's factory, whose result
(`from_factory_result`) is probed once on the meta device. Checking and naming are torch-free;
resolving imports the user's module or package, and torch.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any, Callable

from bench.workloads import Workload, WorkloadError, builtin, default_dtype_kept, names
from bench.workloads.data import Images, from_facts
from bench.workloads.sources import SOURCES

_MODULE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def _split(name: str) -> tuple[str, str] | None:
    left, sep, right = name.partition(":")
    return (left, right) if sep else None


def check_name(name: str) -> None:
    """Raise WorkloadError (one line) if `name` cannot name a workload; imports nothing.
    A registered prefix wins over a module of the same name (`timm:x` is timm's model x)."""
    if builtin(name) is not None:
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
    workload = builtin(name)
    if workload is not None:
        return workload.source
    parts = _split(name)
    if parts is None:
        return ""
    if parts[0] in SOURCES:
        source = SOURCES[parts[0]]
        return f"{source.package} {source.version()}".strip()
    return f"module {parts[0]}"


def resolved(name: str) -> Workload:
    """The workload of a name that is not built in (`get_workload` keeps it): its package or
    module imported, its model probed once on the meta device."""
    check_name(name)
    left, right = _split(name)
    if left in SOURCES:
        factory, shape, classes, summary = SOURCES[left].resolve(right)
        return _described(name, factory, {"input_shape": shape, "num_classes": classes}, summary=summary,
                          source=source_of(name))
    return _from_module(name, left, right)


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

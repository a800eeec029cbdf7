"""Model facts: parameter counts and FLOPs per image of the workloads, and how model names resolve."""
import os

import pytest
import torch

from bench.workloads import get_workload
from bench.workloads.facts import training_flops_per_item


def n_params(name):
    return sum(p.numel() for p in get_workload(name).build().parameters())


def test_resnet18_has_the_standard_parameter_count():
    assert n_params("resnet18") == 11_689_512


def test_resnet18_small_parameter_count():
    # Same body as resnet18; 1-channel 3x3 stem (576 weights, not 9408) and a 10-class head.
    assert n_params("resnet18-small") == 11_689_512 - 9408 + 576 - (513 * 1000) + (513 * 10)
    assert n_params("resnet18-small") == 11_172_810


@pytest.mark.parametrize("name, gflop", [("resnet18", 10.648), ("resnet18-small", 2.734)])
def test_training_flops_per_item(name, gflop):
    assert training_flops_per_item(name) / 1e9 == pytest.approx(gflop, rel=1e-3)


@pytest.mark.parametrize("name, shape, classes", [("resnet18", (3, 224, 224), 1000),
                                                  ("resnet18-small", (1, 28, 28), 10)])
def test_output_shape_and_stem(name, shape, classes):
    workload = get_workload(name)
    model = workload.build()
    x, _ = workload.synthetic_batch(2)
    assert x.shape == (2, *shape)
    assert model(x).shape == (2, classes)
    if name == "resnet18-small":
        assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
        assert isinstance(model.maxpool, torch.nn.Identity)


def test_same_seed_same_weights_and_data():
    a, b, c = (get_workload("resnet18-small").build(seed=s) for s in (0, 0, 1))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.conv1.weight, c.conv1.weight)
    small, large = get_workload("resnet18-small").synthetic_batch(4), get_workload("resnet18-small").synthetic_batch(8)
    assert torch.equal(small[0], large[0][:4]) and torch.equal(small[1], large[1][:4])


def test_rows_are_fresh_copies_of_the_cached_blocks():
    """A worker reuses the blocks of rows across cases: what one case does to its batch
    (in-place normalisation, pinning) never reaches the next case's."""
    w = get_workload("resnet18-small")
    x, y = w.synthetic_rows(0, 64)
    expected_x, expected_y = x.clone(), y.clone()
    x.zero_(), y.zero_()
    again_x, again_y = w.synthetic_rows(0, 64)
    assert torch.equal(again_x, expected_x) and torch.equal(again_y, expected_y)


# --- the workload where sharding matters: counted on the meta device, never built here ---

def test_vit_large_is_vit_large_sized_without_building_it():
    from bench.workloads.facts import facts

    found = facts("vit-large")  # meta tensors: no 1.2 GB of weights on this machine
    assert found["parameters"] == 304_326_632  # ViT-L/16 at 224 (timm's vit_large_patch16_224)
    # 3 x (2 x 197 tokens x the blocks' weights) plus attention: 369.0 GFLOP per image per step.
    assert found["flops_per_item"] / 1e9 == pytest.approx(369.02, rel=1e-3)
    workload = get_workload("vit-large")
    assert workload.input_shape == (3, 224, 224) and workload.num_classes == 1000 and workload.mxnet is None


def test_vit_tiny_is_the_same_builder_and_fsdp2_wraps_its_blocks():
    from bench.workloads.facts import shard_units, units_of
    from bench.workloads._vit import TransformerBlock

    workload = get_workload("bench.workloads.vit:tiny")
    model = workload.build()
    x, _ = workload.synthetic_batch(2)
    assert x.shape == (2, 3, 32, 32) and model(x).shape == (2, 10)
    units = shard_units(model, "bench.workloads.vit:tiny")
    assert len(units) == 2 and all(isinstance(u, TransformerBlock) for u in units)
    big = get_workload("vit-large")
    assert units_of(big, model) == units  # the declared block class, whatever the size


def test_repeated_blocks_are_found_without_knowing_the_model():
    from bench.workloads.facts import repeated_blocks, shard_units
    from bench.workloads._vit import TransformerBlock

    resnet = get_workload("resnet18-small").build()
    # ResNet: its four residual stages, the units FSDP2 has always sharded.
    assert repeated_blocks(resnet) == [resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4]
    assert shard_units(resnet, "resnet18-small") == repeated_blocks(resnet)
    vit = get_workload("bench.workloads.vit:tiny").build()
    assert [type(u) for u in repeated_blocks(vit)] == [TransformerBlock, TransformerBlock]
    assert shard_units(torch.nn.Linear(2, 2)) == []  # nothing repeated: FSDP2 wraps the root alone


# --- names: checked without torch, resolved in the worker ---------------------------------

@pytest.mark.parametrize("name, message", [
    ("vgg", "unknown model 'vgg': choose from resnet18-small, resnet18, vit-large, gpt2-124m, gpt2-350m, gpt2-1.5b, "
            "gpt-tiny, timm:NAME, torchvision:NAME or package.module:factory"),
    ("timm:", "names no timm model: write timm:NAME"),
    ("a b:c", "is neither built in"),
    ("no_such_package_here.models:build", "no module named 'no_such_package_here': put its folder on PYTHONPATH"),
])
def test_bad_names_fail_in_one_line(name, message):
    from bench.workloads import WorkloadError
    from bench.workloads.resolve import check_name

    with pytest.raises(WorkloadError) as exc:
        check_name(name)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("package", ["timm", "torchvision"])
def test_package_sources_say_how_to_install_where_missing(package):
    import importlib.util

    from bench.workloads import WorkloadError
    from bench.workloads.resolve import check_name

    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(WorkloadError) as exc:
        check_name(f"{package}:resnet18")
    assert str(exc.value) == (f"model '{package}:resnet18' needs {package}, which is not installed: make setup-models "
                              "(both, beside the torch of .venv: a plain `pip install` may replace that torch)")


@pytest.mark.parametrize("package, name, params", [("timm", "resnet18", 11_689_512),
                                                   ("torchvision", "resnet18", 11_689_512)])
def test_package_sources_resolve_where_installed(package, name, params):
    import importlib

    try:
        importlib.import_module(package)
    except Exception as exc:  # noqa: BLE001 - absent, or built for another torch (torchvision's CUDA wheel)
        # CI installs both (`make test` runs `make setup-models`) and requires this test to run.
        if os.environ.get("PARABENCH_REQUIRE_MODEL_SOURCES") == "1":
            raise AssertionError(f"PARABENCH_REQUIRE_MODEL_SOURCES is set but {package} does not import: "
                                 f"{type(exc).__name__}: {exc} (make setup-models)") from exc
        pytest.skip(f"{package} does not import here: {type(exc).__name__}: {exc}")
    from bench.workloads.resolve import source_of
    from bench.workloads.facts import facts, units_of

    workload = get_workload(f"{package}:{name}")
    assert workload.input_shape == (3, 224, 224) and workload.num_classes == 1000
    assert facts(f"{package}:{name}")["parameters"] == params
    assert source_of(f"{package}:{name}").startswith(f"{package} ")
    assert len(units_of(workload, workload.build())) >= 4  # its residual blocks or stages


def test_sources_are_named_without_torch():
    import subprocess
    import sys

    from tests.conftest import REPO

    code = ("import sys; from bench.workloads.resolve import check_name, source_of; "
            "check_name('resnet18'); check_name('json.decoder:JSONDecoder'); "
            "print(source_of('resnet18'), '|', source_of('json.decoder:JSONDecoder'), '|', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "built-in | module json.decoder | False", out.stderr


def test_a_factory_may_return_a_bare_model_or_declare_its_workload(tmp_path, monkeypatch):
    from bench.workloads import WorkloadError

    (tmp_path / "own_models.py").write_text(
        "import torch\n"
        "def bare():\n"
        "    '''A bare model: 3x224x224 input, classes from its output width.'''\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(7))\n"
        "def declared():\n"
        "    return {'model': torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)),\n"
        "            'input_shape': (3, 2, 2), 'num_classes': 3, 'loss': torch.nn.MultiMarginLoss()}\n"
        "def not_a_model():\n"
        "    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    bare = get_workload("own_models:bare")
    assert (bare.input_shape, bare.num_classes, bare.source) == ((3, 224, 224), 7, "module own_models")
    assert bare.summary.startswith("A bare model")
    from bench.workloads.facts import facts

    assert facts("own_models:bare")["parameters"] == 3 * 224 * 224 * 7 + 7  # counted once the lazy layer is built
    declared = get_workload("own_models:declared")
    assert (declared.input_shape, declared.num_classes) == ((3, 2, 2), 3)
    assert isinstance(declared.criterion(), torch.nn.MultiMarginLoss)
    with pytest.raises(WorkloadError, match="must return an nn.Module"):
        get_workload("own_models:not_a_model")
    with pytest.raises(WorkloadError, match="has no 'missing'"):
        get_workload("own_models:missing")


def test_mxnet_declines_workloads_it_lacks():
    import strategies

    gluon = strategies.get("mxnet-gluon")
    assert gluon.workload_unavailable_reason("resnet18") is None
    for name in ("vit-large", "timm:resnet18", "own_models:build"):
        assert (gluon.workload_unavailable_reason(name)
                == "MXNet has only the reference workload (resnet18-small, resnet18)")
    assert strategies.get("ddp").workload_unavailable_reason("vit-large") is None


FAKE_TIMM = '''
import torch
from . import models


def is_model(name):
    return name == "tiny_net"


def create_model(name):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
'''
FAKE_TIMM_MODELS = '''
from types import SimpleNamespace


def get_pretrained_cfg(name):
    return SimpleNamespace(input_size=(3, 16, 16))
'''
FAKE_TORCHVISION_MODELS = '''
import functools
import os
import torch
from types import SimpleNamespace


class ImageClassification:
    def __init__(self, crop_size):
        self.crop_size = crop_size


def list_models():
    return ["tiny_net"]


def get_model(name, weights=None):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 12 * 12, 6))


def get_model_weights(name):
    default = SimpleNamespace(transforms=functools.partial(ImageClassification, crop_size=12),
                              meta={"categories": list("abcdef")})
    return SimpleNamespace(DEFAULT=default)
'''


def test_package_sources_ask_the_package_for_shape_and_classes(tmp_path, monkeypatch):
    """The timm and torchvision resolvers against stand-ins with their API (the packages
    are not installed here: torchvision's wheels are built for CUDA torch)."""
    import importlib.util
    import sys

    from bench.workloads import WorkloadError

    if any(importlib.util.find_spec(p) for p in ("timm", "torchvision")):
        pytest.skip("the real packages are installed: test_package_sources_resolve_where_installed runs")
    for folder, files in {"timm": {"__init__.py": FAKE_TIMM, "models.py": FAKE_TIMM_MODELS},
                          "torchvision": {"__init__.py": "from . import models\n",
                                          "models.py": FAKE_TORCHVISION_MODELS}}.items():
        (tmp_path / folder).mkdir()
        for name, text in files.items():
            (tmp_path / folder / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for package in ("timm", "torchvision"):
        monkeypatch.delitem(sys.modules, package, raising=False)
    try:
        timm_net, tv_net = get_workload("timm:tiny_net"), get_workload("torchvision:tiny_net")
        assert (timm_net.input_shape, timm_net.num_classes) == ((3, 16, 16), 4)  # classes: the output width
        assert (tv_net.input_shape, tv_net.num_classes) == ((3, 12, 12), 6)  # from the weights' metadata
        assert tv_net.build()(tv_net.synthetic_batch(2)[0]).shape == (2, 6)
        for name in ("timm:nope", "torchvision:nope"):
            with pytest.raises(WorkloadError, match="has no model 'nope'"):
                get_workload(name)
    finally:
        for package in ("timm", "timm.models", "torchvision", "torchvision.models"):
            sys.modules.pop(package, None)
        get_workload.cache_clear()

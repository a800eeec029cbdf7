"""Model facts: parameter counts and FLOPs per image of both workloads."""
import pytest
import torch

from bench.workloads import get_workload, training_flops_per_image


def n_params(name):
    return sum(p.numel() for p in get_workload(name).build().parameters())


def test_resnet18_has_the_standard_parameter_count():
    assert n_params("resnet18") == 11_689_512


def test_resnet18_small_parameter_count():
    # Same body as resnet18; 1-channel 3x3 stem (576 weights, not 9408) and a 10-class head.
    assert n_params("resnet18-small") == 11_689_512 - 9408 + 576 - (513 * 1000) + (513 * 10)
    assert n_params("resnet18-small") == 11_172_810


@pytest.mark.parametrize("name, gflop", [("resnet18", 10.648), ("resnet18-small", 2.734)])
def test_training_flops_per_image(name, gflop):
    assert training_flops_per_image(name) / 1e9 == pytest.approx(gflop, rel=1e-3)


@pytest.mark.parametrize("name, shape, classes", [("resnet18", (3, 224, 224), 1000), ("resnet18-small", (1, 28, 28), 10)])
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

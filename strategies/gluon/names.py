"""PyTorch parameter names -> Gluon parameter paths (no framework imports: both sides use it)."""

# PyTorch BatchNorm names -> Gluon BatchNorm names.
_BN = {"weight": "gamma", "bias": "beta", "running_mean": "running_mean", "running_var": "running_var"}


def gluon_name(torch_name: str) -> str:
    """'layer1.0.bn1.weight' -> 'layer1.0.bn1.gamma'; conv and fc names are the same."""
    module, _, leaf = torch_name.rpartition(".")
    is_bn = module.split(".")[-1].startswith("bn") or (module.endswith(".1") and "downsample" in module)
    return f"{module}.{_BN[leaf] if is_bn else leaf}"

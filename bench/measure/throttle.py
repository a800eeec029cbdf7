"""How much of a case's timed trials its GPUs spent with their clocks held below what was asked,
for their power limit or their temperature.

NVML counts it per GPU (nvmlDeviceGetViolationStatus: nanoseconds since the driver loaded, for
each policy); the counters are read once before the trials and once after them, so the timed
steps run untouched. A share is the largest over the case's GPUs, of the trials' wall time.

The counters give time, not depth. On 2 of 4 H200s (results/reference/h200x4/throttle), a ddp run
read 93% of its trials' time as power-capped, while nvidia-smi, sampled beside it, showed SM clocks
of 1905-1980 MHz (of 1980) whenever its power-cap flag was up: at the 700 W limit the clocks dip,
mostly by a few percent. So a row keeps the power share as a fact, and only a temperature cap is
a caveat (bench/cases/caveats.py): that is the cooling, not the configuration, setting the speed.

Nothing is read where NVML (nvidia-ml-py) or the counter is missing: the shares are then None.
"""
from __future__ import annotations

import time

# The row's columns, and the NVML policy each counts.
POLICIES = {"power_capped_pct": "NVML_PERF_POLICY_POWER", "thermal_capped_pct": "NVML_PERF_POLICY_THERMAL"}


def _handles(devices) -> list:
    """NVML handles of the case's CUDA devices (torch maps CUDA_VISIBLE_DEVICES to NVML's indices)."""
    import torch

    try:
        return [torch.cuda._get_pynvml_handler(d) for d in dict.fromkeys(d for d in devices if d.type == "cuda")]
    except Exception:  # noqa: BLE001 - no nvidia-ml-py, or no driver: nothing to read
        return []


class ClockLimits:
    """The violation counters of the case's GPUs, read around its timed trials."""

    def __init__(self, devices):
        self.handles = _handles(devices)
        self._start: dict[str, list[int]] | None = None
        self._began = 0.0

    def _read(self) -> dict[str, list[int]] | None:
        if not self.handles:
            return None
        try:
            import pynvml

            return {column: [pynvml.nvmlDeviceGetViolationStatus(h, getattr(pynvml, policy)).violationTime
                             for h in self.handles] for column, policy in POLICIES.items()}
        except Exception:  # noqa: BLE001 - a driver or GPU without the counter
            return None

    def start(self) -> None:
        self._start, self._began = self._read(), time.perf_counter()

    def shares(self) -> dict[str, float | None]:
        """Each policy's share of the wall time since `start`, percent (None where not read)."""
        end, seconds = self._read(), time.perf_counter() - self._began
        if self._start is None or end is None or seconds <= 0:
            return dict.fromkeys(POLICIES)
        return {column: round(max(b - a for a, b in zip(self._start[column], end[column])) / 1e9 / seconds * 100, 2)
                for column in POLICIES}

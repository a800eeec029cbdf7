"""How much of a case's timed trials its GPUs spent with their clocks held below what was asked,
for their power limit or their temperature, and the power limit they ran under.

NVML counts it per GPU (nvmlDeviceGetViolationStatus: nanoseconds since the driver loaded, for
each policy); the counters are read once before the trials and once after them, so the timed
steps run untouched. A share is the largest over the case's GPUs, of the trials' wall time; the
counter moves in steps, so a GPU capped throughout can read a little over 100%.

The counters give time, not depth. On H200s a power cap was shallow in one run and deep at times
in another (docs/measuring.md): a ddp fp32 run read 93% of its trials' time as capped while
nvidia-smi showed 1905-1980 MHz of 1980 (results/reference/h200x4/throttle); during an amp-bf16
search the capped samples dipped to 1365 MHz (results/reference/h200x2/answer/smi-search-1.csv).
Either way the figure is the speed at that power limit, which the row records (`power_limit_w`)
so that runs under other limits are told apart; the share is shown beside the answer. Only a
temperature cap is a caveat (bench/cases/caveats.py): the cooling, not the machine's setting.

Nothing is read where NVML (nvidia-ml-py) or the counter is missing: the figures are then None.
"""
from __future__ import annotations

import time

# The row's columns, and the NVML policy each counts.
POLICIES = {"power_capped_pct": "NVML_PERF_POLICY_POWER", "thermal_capped_pct": "NVML_PERF_POLICY_THERMAL"}
# The lowest enforced power limit of the case's GPUs, watts.
POWER_LIMIT = "power_limit_w"


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

    def _power_limit_w(self) -> float | None:
        if not self.handles:
            return None
        try:
            import pynvml

            return min(pynvml.nvmlDeviceGetEnforcedPowerLimit(h) for h in self.handles) / 1000  # milliwatts
        except Exception:  # noqa: BLE001 - a GPU without a settable power limit
            return None

    def start(self) -> None:
        self._start, self._began = self._read(), time.perf_counter()

    def columns(self) -> dict[str, float | None]:
        """Each policy's share of the wall time since `start`, percent, and the power limit (None
        where not read)."""
        end, seconds = self._read(), time.perf_counter() - self._began
        limit = {POWER_LIMIT: self._power_limit_w()}
        if self._start is None or end is None or seconds <= 0:
            return dict.fromkeys(POLICIES) | limit
        return {column: round(max(b - a for a, b in zip(self._start[column], end[column])) / 1e9 / seconds * 100, 2)
                for column in POLICIES} | limit

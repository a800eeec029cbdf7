"""`bench fit`: memory per device and the largest batch per device that fits, at any device
count, measured on one device.

(The fake world of n it measures in, one process as rank 0 of n ranks whose collectives do
nothing, is a launcher: bench/engine/launchers.py `FakeWorld`.)

- `search`: the largest batch that fits, from probes of batch sizes;
- `worker`: the process that runs the probes, one model after another;
- `fit`: the parent side (plan, workers, the `*.fit.json` file, the sentences) and the fit
  held against real runs (`bench fit-check`).
"""

# The largest device count a fake world covers. Past it nothing a rank holds shrinks any further
# (every rank holds one row of each parameter of the workloads here), and it is past any
# data-parallel job run in one process group.
MAX_DEVICES = 65536

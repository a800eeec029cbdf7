"""Predicting beyond this host: data-parallel steps at device counts that were not measured,
and the memory and largest batch per device at any device count.

Time, in three parts, each in its own module:

- `probe` (`bench probe-comm`) times the collectives the strategies use (all-reduce,
  reduce-scatter, all-gather) over message sizes on the devices at hand, and `collectives`
  fits them with a latency + bandwidth (alpha-beta) model per collective and device count,
  in the bus-bandwidth convention of NCCL's tests;
- `timeline` reads a measured one-device case's profiler traces (`bench run --anatomy`):
  forward, backward, optimiser and the rest of the step, and when each gradient is ready
  during backward;
- `simulate` replays that step at n devices for DDP (bucketed all-reduce overlapped with
  backward), FSDP2 (per-unit all-gather and reduce-scatter, sharded update) and ZeRO-1
  (all-reduce, sharded update, parameter all-gather), with ring costs inside a host and a
  hierarchical cost across hosts, and gives images/s, scaling efficiency and memory per GPU.

`predict` turns results and a probe into prediction rows that name what they assume and
what they come from; `validate` sets them against measured cases at the same device count,
beside two predictors without a model (linear scaling, communication not hidden).

Memory: `fit` (`bench fit`) measures it, rank 0 of a fake world of n on one device, and
`search` finds the largest batch per device that fits.

Nothing here edits the results or the traces it reads.
"""

# The largest device count a prediction or a fake world covers. Past it nothing a rank holds
# shrinks any further (every rank holds one row of each parameter of the workloads here), and
# it is past any data-parallel job run in one process group.
MAX_DEVICES = 65536

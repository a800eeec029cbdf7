"""Predicting beyond this host: data-parallel steps at device counts that were not measured.

Three parts, each in its own module:

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
what they come from; `validate` sets them against measured cases at the same device count.
Nothing here edits the results or the traces it reads.
"""

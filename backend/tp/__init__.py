"""Tensor parallel: the worker side of a worker group, and what both sides share.

The group itself (launch, READY, monitor, calls, stop) is ``backend.engines.worker_group``.

- ``protocol``: what both sides agree on — message framing, the worker config (the whole
  settings, sent once), environment names, and the one table of error kinds;
- ``processes``: pids, signals, log tails;
- ``worker``: the torchrun program's entry point, in named phases, each a module: ``rank_process``
  (log, heartbeat, parent watch), ``distributed`` (init distributed), ``loading`` (load sharded,
  shard report, warm up), ``job_loop`` (serve) with ``rank0_server`` (rank 0's socket) and
  ``collectives`` (the control group's broadcasts and gathers);
- ``cpu_shim``: the one documented patch that lets diffusers' TP run on a CPU mesh (tests, CPU demos).
"""

"""The ranks' side of a worker group (a tensor-parallel group, or one replica): the torchrun program.

The app's side (launch, READY, monitor, calls, stop) and the wire both speak are ``backend.launch``.

- ``worker``: the torchrun program's entry point and manual, in named phases, each a module:
  ``rank_process`` (log, heartbeat, parent watch), ``distributed`` (init distributed), ``loading``
  (load sharded, shard report, warm up), ``job_loop`` (serve) with ``rank0_server`` (rank 0's
  socket) and ``collectives`` (the control group's broadcasts and gathers);
- ``cpu_shim``: the one documented patch that lets diffusers' TP run on a CPU mesh (tests, CPU demos).
"""

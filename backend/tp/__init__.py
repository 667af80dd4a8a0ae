"""Tensor parallel: the worker group as an engine.

- ``group``: the engine the manager uses for mode "tp" — degree check and NeuronCore plan, launch,
  READY (with each rank's shard report), monitor, calls, stop;
- ``protocol``: what both sides agree on — message framing, the worker config (the whole
  settings, sent once), environment names, and the one table of error kinds;
- ``processes``: pids, signals, log tails;
- ``worker``: the torchrun program, in named phases (init distributed, load sharded, warm up, serve);
- ``cpu_shim``: the one documented patch that lets diffusers' TP run on a CPU mesh (tests, CPU demos).
"""

"""The ranks' side of a worker group (a tensor-parallel group, or one replica): the torchrun program.

``worker`` is its entry point and manual; ``job_loop`` serves the jobs, ``rank0_server`` is rank 0's
socket, ``collectives`` the control group's broadcasts and gathers; ``cpu_shim`` is the one patch
that lets diffusers' TP run on a CPU mesh. The app's side and the wire are ``backend.launch``.
"""

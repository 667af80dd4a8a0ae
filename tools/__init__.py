"""Operational helpers shared by the benchmarks, the tests and people: start the app as a process
and wait for it (``app_process``), keep the CPU busy on purpose (``cpu_load``)."""

"""The NeuronCore list notation of ``NEURON_RT_VISIBLE_CORES`` ("3", "0-3", "0,2-3"): read, written,
checked against an instance's size. A foundation: it imports nothing of the project."""

from __future__ import annotations

NO_CORES = "none"  # --neuron-cores none: the app claims no NeuronCore; every core may go to its engines


def parse_cores(text: str) -> list[int]:
    """The cores of a NEURON_RT_VISIBLE_CORES value; ValueError naming the bad part."""
    cores: list[int] = []
    parts = [p.strip() for p in str(text).split(",")]
    if not text or not str(text).strip() or any(not p for p in parts):
        raise ValueError(f"expected NeuronCore indices like 3, 0-3 or 0,2, got {text!r}")
    for part in parts:
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"expected NeuronCore indices like 3, 0-3 or 0,2, got {text!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"bad NeuronCore range {part!r} in {text!r}")
        cores.extend(range(first, last + 1))
    if len(set(cores)) != len(cores):
        raise ValueError(f"NeuronCore listed twice in {text!r}")
    return cores


def format_cores(cores: list[int]) -> str:
    """The shortest NEURON_RT_VISIBLE_CORES value for ``cores`` ("0-3", "1,3")."""
    cores = sorted(cores)
    if len(cores) > 1 and cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def check_on_instance(app_cores: str, logical: int | None) -> list[int]:
    """The app's cores, parsed ([] for ``none``); ValueError naming ``--neuron-cores`` for a core the
    instance (of ``logical`` cores; None: unknown) does not have."""
    if app_cores == NO_CORES:
        return []
    cores = parse_cores(app_cores)
    if logical is not None and max(cores) >= logical:
        raise ValueError(f"--neuron-cores {app_cores}: the instance has NeuronCores 0-{logical - 1}")
    return cores

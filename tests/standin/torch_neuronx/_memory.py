"""Byte accounting for ``torch.neuron.memory_allocated`` / ``max_memory_allocated``, and a core's capacity.

The stand-in counts the bytes of live "neuron" storages, which live in host memory. Past the core's
capacity an allocation fails as TorchNeuron's caching allocator fails it, in its words
(``NeuronCachingAllocator.cpp`` 82-88: ``captures/torchneuron/attention.json``). The capacity is what
``get_device_properties(...).total_memory`` reports: the ``NEURON_STANDIN_HBM_BYTES`` knob (scaled for
the tiny test models), else the chip's HBM shared among its logical cores (``captures/hardware/hbm.json``).
None of it is a Trainium memory figure: fragmentation, the runtime's own buffers and NEFFs are not counted.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from pathlib import Path

CAPACITY_VAR = "NEURON_STANDIN_HBM_BYTES"
OOM = "NRT allocation failed for size {size} (OOM)"
_lock = threading.RLock()  # re-entrant: a __del__ may run while this thread holds it
_allocated = 0
_peak = 0


class HostBlock:
    """Owns the host memory behind one "neuron" storage; counts its bytes while it lives.

    Attached to the storage's Python object, which PyTorch keeps alive as long as the storage
    itself lives (storage PyObject preservation), so views made in C++ keep the memory too.
    """

    __slots__ = ("storage", "nbytes")

    def __init__(self, storage) -> None:
        global _allocated, _peak
        self.storage, self.nbytes = storage, 0
        nbytes = int(storage.nbytes())
        with _lock:
            if _allocated + nbytes > capacity():
                raise RuntimeError(OOM.format(size=nbytes))
            self.nbytes = nbytes
            _allocated += nbytes
            _peak = max(_peak, _allocated)

    def __del__(self) -> None:
        global _allocated
        try:
            with _lock:
                _allocated -= self.nbytes
        except Exception:  # interpreter shutdown
            pass


def allocated() -> int:
    return _allocated


def peak() -> int:
    return _peak


def reset_peak() -> None:
    global _peak
    with _lock:
        _peak = _allocated


@functools.lru_cache(maxsize=1)
def _chips() -> dict:
    return json.loads((Path(__file__).resolve().parents[1] / "captures" / "hardware" / "hbm.json").read_text())["chips"]


def capacity() -> int:
    """One logical core's memory, in bytes (the knob, else the captured chip's share)."""
    knob = os.environ.get(CAPACITY_VAR)
    if knob:
        return int(knob)
    from . import _runtime

    chip = _chips()[_runtime.platform_target()]
    return chip["hbm_gib"] * 2**30 * _runtime.lnc() // chip["physical_cores"]

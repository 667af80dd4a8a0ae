"""Byte accounting for ``torch.neuron.memory_allocated`` / ``max_memory_allocated``.

Best effort, and honest about it: the stand-in counts the bytes of live "neuron" storages, which
live in host memory. Nothing here says anything about Trainium HBM (capacity, fragmentation,
allocator caching); a number from the stand-in is never a Trainium memory figure.
"""

from __future__ import annotations

import threading

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
        self.storage = storage
        self.nbytes = int(storage.nbytes())
        with _lock:
            _allocated += self.nbytes
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

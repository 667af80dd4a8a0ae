"""What the stand-in's ``neuron-monitor`` (``tests/standin/bin/neuron-monitor``) reads of this process.

The real tool asks each Neuron runtime for its counters; the stand-in's runtime lives inside each
process, so each process publishes its own at every ``torch.neuron.synchronize`` (the end of a run, as
TorchNeuron's own tests read op tracking after one) into ``<NEURON_STANDIN_STATE_DIR>/monitor/<pid>.json``:
the cores it claimed, the bytes of its live device tensors (``_memory.allocated``: host bytes, never a
Trainium figure) and how many synchronizes it has made. Written whole (a temporary file, then a rename).
"""

from __future__ import annotations

import json
import os

from . import _memory, _runtime

_synchronized = 0


def publish(cores: tuple[int, ...]) -> None:
    global _synchronized
    _synchronized += 1
    folder = _runtime.state_dir() / "monitor"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{os.getpid()}.json"
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps({"pid": os.getpid(), "cores": list(cores), "allocated": _memory.allocated(),
                                "synchronized": _synchronized}))
    os.replace(temp, path)


def register() -> None:
    """``torch.neuron.synchronize`` publishes after it returns."""
    import torch

    device_module = torch.neuron
    synchronize = device_module.synchronize

    def synchronize_and_publish(device=None) -> None:
        synchronize(device)
        publish(_runtime.ensure_started())

    device_module.synchronize = synchronize_and_publish

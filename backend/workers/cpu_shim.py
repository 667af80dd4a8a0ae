"""The one place that lets diffusers' tensor parallelism run on a CPU mesh (tests and CPU demos).

diffusers 0.42.1 shards a model inside ``from_pretrained(..., parallel_config=...)`` and refuses a
CPU mesh twice: ``ModelMixin._resolve_parallel_config`` takes ``rank % torch.accelerator.device_count()``
(0 on a CPU-only build: ZeroDivisionError), and ``hooks.tensor_parallel._SUPPORTED_TP_DEVICES`` lists
only cuda/neuron/tpu/xpu. ``cpu_tensor_parallel()`` patches both for the load only, and refuses to
run for any other device, so it is never active on Neuron. The TP forward (DTensor over gloo) needs
no help.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def cpu_tensor_parallel(device_kind: str) -> Iterator[None]:
    if device_kind != "cpu":
        raise RuntimeError(f"the CPU tensor-parallel shim must not be used on {device_kind!r}")
    import torch
    from diffusers.hooks import tensor_parallel

    supported = tensor_parallel._SUPPORTED_TP_DEVICES
    real_count = torch.accelerator.device_count
    tensor_parallel._SUPPORTED_TP_DEVICES = tuple(supported) + ("cpu",)
    if real_count() == 0:
        torch.accelerator.device_count = lambda: 1
    try:
        yield
    finally:
        tensor_parallel._SUPPORTED_TP_DEVICES = supported
        torch.accelerator.device_count = real_count

"""``torch_neuronx.utils`` (stand-in): the chip target and logical-core setting that key every NEFF.

TorchNeuron (``torch_neuronx/utils.py``, ``csrc/core/utils/PlatformUtils.cpp``): the instance
family comes from the runtime (``nrt_get_instance_info``) and maps to a compiler target (trn2 for
trn2/trn2n/trn2u, trn3 for trn3/trn3u, trn1 for trn1/trn1n/inf2); the LNC is
``NEURON_LOGICAL_NC_CONFIG`` if set, else the family's default (2 on trn2/trn3). Both are in every
NEFF key (``tests/standin/captures/torchneuron/neff_cache.json``).
"""

from __future__ import annotations

from . import _runtime


def get_platform_target() -> str:
    return _runtime.platform_target()


def get_lnc_setting() -> str:
    return str(_runtime.lnc())

"""Which path each attention takes on Neuron: TorchNeuron's NKI flash kernel, or its fallback, which
materialises the whole B x H x L x S score matrix on the NeuronCore.

The rule is TorchNeuron's own, captured with its source lines in
``tests/standin/captures/torchneuron/attention.json`` (the stand-in enforces the same):

- On a "neuron" tensor, ``scaled_dot_product_attention`` always goes to the overrideable fused op
  (``SdpBackendSelection.cpp`` 27-49).
- Eager: the NKI kernel when query and key lengths are multiples of 512, the head size at most 128,
  no bias and no dropout (``scaled_dot_product_fused_attention.py`` 37-57); else the MLIR fallback,
  whose logits are float32 (``mixed_precision=True``: ``torch_mlir/ops/scaled_dot_product_attention.py``
  35-57, 168-178).
- Compiled (the "neuron" backend): the query length a multiple of 128, the key length of 512 (the
  tile sizes it tries), the head size at most 128, no bias or dropout, and ``TORCH_NEURONX_ENABLE_NKI_SDPA``
  not off (``decompositions.py`` 360-385; ``settings.py`` 21-35); else a decomposition whose scores
  are the query's dtype (``decompositions.py`` 280-296). The backend's docstring says "seqlen % 2048";
  its code does not.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Mapping

SEQ_MULTIPLE = 512
COMPILED_Q_MULTIPLE = 128
MAX_HEAD_DIM = 128
NKI_SWITCH = "TORCH_NEURONX_ENABLE_NKI_SDPA"
EAGER_SCORE_BYTES = 4  # the MLIR fallback's float32 logits


def neuron_installed() -> bool:
    return importlib.util.find_spec("torch_neuronx") is not None


def expects_neuron(device: str) -> bool:
    """Whether ``--device`` will resolve to Neuron, asked before torch loads (the page's presets)."""
    return device == "neuron" or (device == "auto" and neuron_installed())


def nki_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """The compiled path's switch, read as TorchNeuron's ``_getenv_bool`` reads it (unset: on)."""
    value = (os.environ if environ is None else environ).get(NKI_SWITCH)
    return value is None or value.lower() in ("1", "true", "yes")


@dataclasses.dataclass(frozen=True)
class Attention:
    """One attention call of a run: (batch, heads, query length, key length, head size)."""

    name: str
    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    compiled: bool  # inside a graph of the "neuron" torch.compile backend (else eager)
    bias: bool = False  # an attention mask (the text encoder's padding mask)

    def why_slow(self, environ: Mapping[str, str] | None = None) -> str | None:
        """Why the NKI kernel refuses this call (None: it takes the fast path)."""
        if self.bias:
            return "an attention mask (the NKI kernel takes no bias)"
        if self.head_dim > MAX_HEAD_DIM:
            return f"head size {self.head_dim} > {MAX_HEAD_DIM}"
        if self.compiled and not nki_enabled(environ):
            return f"{NKI_SWITCH} is off"
        if self.compiled and self.q_len % COMPILED_Q_MULTIPLE:
            return f"query length {self.q_len} is not a multiple of {COMPILED_Q_MULTIPLE}"
        for what, length in (("query", self.q_len), ("key", self.kv_len)):
            if length % SEQ_MULTIPLE and (what == "key" or not self.compiled):
                return f"{what} length {length} is not a multiple of {SEQ_MULTIPLE}"
        return None

    def score_bytes(self, dtype_bytes: int, environ: Mapping[str, str] | None = None) -> int:
        """The score matrix the fallback materialises (0 on the fast path)."""
        if self.why_slow(environ) is None:
            return 0
        per = dtype_bytes if self.compiled else EAGER_SCORE_BYTES
        return self.batch * self.heads * self.q_len * self.kv_len * per

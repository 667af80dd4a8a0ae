"""``scaled_dot_product_attention`` on the stand-in's "neuron" device, by TorchNeuron's rule
(``tests/standin/captures/torchneuron/attention.json``, each step with its source lines).

- A 4-D call goes to ``_scaled_dot_product_fused_attention_overrideable`` (``SdpBackendSelection.cpp``);
  anything else to PyTorch's math path.
- That op takes the NKI flash kernel when the captured rule allows (eager:
  ``scaled_dot_product_fused_attention.py`` 37-57; inside a compiled graph: ``decompositions.py``
  360-385, with ``TORCH_NEURONX_ENABLE_NKI_SDPA``): the output is computed in tiles on the host and
  no score matrix is allocated on the device. Its kernel is built through TorchNeuron's Python
  compile path, as an NKI kernel is.
- Otherwise the fallback allocates the whole B x H x L x S score matrix on the device — float32 in
  eager mode (the MLIR kernel's ``mixed_precision=True``), the query's dtype in a compiled graph — so
  the core's capacity (``_memory``) fails it in TorchNeuron's words when it does not fit.

``paths()`` lists which path each call took (stand-in only, for tests). What this cannot say: the
real kernels' speed or numerics.
"""

from __future__ import annotations

import os
import threading

import torch
import torch.nn.functional as F

from . import _device, _neff_cache, _runtime

NKI_SWITCH = "TORCH_NEURONX_ENABLE_NKI_SDPA"
_FUSED = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
_paths: list[dict] = []
_paths_lock = threading.Lock()
_libraries: list = []


def paths() -> list[dict]:
    with _paths_lock:
        return list(_paths)


def _why_not_nki(query, key, value, bias, dropout_p: float, compiled: bool) -> str | None:
    """None when the NKI kernel takes the call, else the captured condition that refuses it."""
    _, _, q_len, head_dim = query.shape
    kv_len = key.shape[-2]
    if key.shape != value.shape or not query.dtype == key.dtype == value.dtype:
        return "shapes or dtypes differ"
    if bias is not None:
        return "bias"
    if dropout_p > 0:
        return "dropout"
    if head_dim > 128:
        return "head_dim > 128"
    if compiled:
        switch = os.environ.get(NKI_SWITCH)
        if switch is not None and switch.lower() not in ("1", "true", "yes"):
            return f"{NKI_SWITCH} off"
        if q_len % 128 or kv_len % 512:
            return "L % 128 or S % 512"
    elif q_len % 512 or kv_len % 512:
        return "seq % 512"
    return None


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return torch.ops.aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal,
                                                                 scale=scale, enable_gqa=enable_gqa)[0]
    if key.shape[1] != query.shape[1]:  # grouped-query attention: the kernels repeat K and V
        repeat = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
    return _FUSED(query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]


def _fused(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
           scale=None):
    _runtime.ensure_started()
    compiled = _device.in_compiled_graph()
    why = _why_not_nki(query, key, value, attn_bias, dropout_p, compiled)
    batch, heads, q_len, head_dim = query.shape
    kv_len = key.shape[-2]
    with _paths_lock:
        _paths.append({"nki": why is None, "why": why, "compiled": compiled,
                       "shape": [batch, heads, q_len, kv_len, head_dim]})
    if not compiled:
        name = "aten::_scaled_dot_product_fused_attention_overrideable"
        _device._track(_device._executed_ops, name)
        signature = _device._signature(_FUSED, (query, key, value), {"path": "nki" if why is None else "mlir"})
        _neff_cache.lookup_or_compile(signature, kind="eager", python_path=why is None)
    q, k, v = (_device.host_alias(t) for t in (query, key, value))
    scale = scale if scale is not None else head_dim ** -0.5
    if why is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
        lse = torch.empty(0)
    else:
        dtype = query.dtype if compiled else torch.float32
        scores = torch.empty((batch, heads, q_len, kv_len), dtype=dtype, device=query.device)  # counted: may OOM
        logits = _device.host_alias(scores)
        torch.matmul(q.to(dtype), k.to(dtype).transpose(-2, -1), out=logits)
        logits.mul_(scale)
        if is_causal:
            logits.masked_fill_(torch.ones(q_len, kv_len, dtype=torch.bool).triu(1), float("-inf"))
        elif attn_bias is not None:
            bias = _device.host_alias(attn_bias) if attn_bias.device.type == "neuron" else attn_bias
            logits.masked_fill_(~bias, float("-inf")) if bias.dtype == torch.bool else logits.add_(bias)
        lse = torch.logsumexp(logits, dim=-1).float()
        logits.sub_(lse.to(dtype).unsqueeze(-1)).exp_()
        out = torch.matmul(logits.to(query.dtype), v)
        del scores
    empty = _device.adopt(torch.empty(0, dtype=torch.int64))
    return (_device.adopt(out.contiguous()), _device.adopt(lse.contiguous()), None, None, q_len, kv_len, empty,
            _device.adopt(torch.empty(0, dtype=torch.int64)), None)


def register() -> None:
    library = torch.library.Library("aten", "IMPL")
    library.impl("scaled_dot_product_attention", _sdpa, "PrivateUse1")
    library.impl("_scaled_dot_product_fused_attention_overrideable", _fused, "PrivateUse1")
    _libraries.append(library)

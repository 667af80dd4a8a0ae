"""Proof that tensor parallelism shards the weights, at FLUX.2-klein-4B's attention geometry.

"TP image == one-process image" would also hold if every rank loaded the whole transformer, so
these tests read what each rank reports at READY: which weights are DTensor shards, their global
and local shapes, and the rank's parameter bytes. The transformer has the real model's attention
geometry (24 heads of 128, hidden 3072) with reduced depth (one double and one single block),
mlp_ratio 1 and random weights; the text encoder and VAE are the embedded tiny ones.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from backend.errors import InvalidRequest
from backend.serving.manager import Manager
from tests.conftest import ROOT, make_settings

pytestmark = pytest.mark.slow
HEADS, HEAD_DIM = 24, 128


@pytest.fixture(scope="module")
def geometry_model(tmp_path_factory):
    import torch
    from diffusers import Flux2Transformer2DModel

    folder = tmp_path_factory.mktemp("klein-geometry") / "model"
    shutil.copytree(ROOT / "assets" / "tiny-flux2-klein", folder)
    tiny = json.loads((folder / "transformer" / "config.json").read_text())
    torch.manual_seed(0)
    transformer = Flux2Transformer2DModel(
        patch_size=1, in_channels=tiny["in_channels"], num_layers=1, num_single_layers=1,
        attention_head_dim=HEAD_DIM, num_attention_heads=HEADS, joint_attention_dim=tiny["joint_attention_dim"],
        timestep_guidance_channels=256, mlp_ratio=1.0, axes_dims_rope=(32, 32, 32, 32), rope_theta=2000,
        guidance_embeds=False)
    shutil.rmtree(folder / "transformer")
    transformer.save_pretrained(folder / "transformer")
    return str(folder)


@pytest.fixture(scope="module")
def mgr(geometry_model, tmp_path_factory):
    manager = Manager(make_settings(tmp_path_factory.mktemp("geometry"), model=geometry_model,
                                    tp_stall_timeout=120.0))
    manager.start()
    yield manager
    manager.close()


def _request(mgr, mode):
    return mgr.validate("a red circle", 64, 64, steps=1, seed=3, mode=mode)


def test_a_degree_that_does_not_divide_24_heads_is_refused_naming_the_valid_ones(mgr):
    with pytest.raises(InvalidRequest, match="5 does not divide the model's 24 attention heads; "
                                             "use one of 1, 2, 3, 4, 6, 8, 12, 24"):
        mgr.start_engine("tensor-parallel", 5)
    assert mgr.engines["tensor-parallel"].group is None  # nothing was started


def test_each_rank_holds_one_nth_of_every_sharded_weight_and_the_image_matches_one_rank(mgr):
    reference = np.asarray(mgr.generate(_request(mgr, "eager"))[0], dtype=np.int16)
    whole = {name: tuple(p.shape) for name, p in mgr.engine.pipe.transformer.named_parameters()}
    whole_bytes = sum(p.numel() * p.element_size() for p in mgr.engine.pipe.transformer.parameters())
    try:
        # An odd split (8 of the 24 heads a rank); the even one, at degree 2, is test_tp's group
        # (the embedded model's heads), whose image is checked against one process there.
        for degree in (3,):
            mgr.start_engine("tensor-parallel", degree, wait=True)
            tp = mgr.status().tp
            # As a string: pytest would shorten a dict's repr, and with it the reason and the logs.
            assert tp["state"] == "ready", f"{tp['state']}: {tp.get('error')}\n{mgr.engine_logs('tensor-parallel', 60)}"
            image, record = mgr.generate(_request(mgr, "tp"))
            assert record.world_size == degree
            diff = int(np.abs(np.asarray(image, dtype=np.int16) - reference).max())
            assert diff <= 2, (degree, diff)
            ranks = tp["ranks"]
            assert sorted(r["rank"] for r in ranks) == list(range(degree))
            sharded_global = 0
            for report in ranks:
                assert report["sharded"], report
                for weight in report["sharded"]:
                    dim = weight["dim"]
                    assert tuple(weight["global_shape"]) == whole[weight["name"]]
                    expected = list(weight["global_shape"])
                    expected[dim] //= degree
                    assert weight["local_shape"] == expected, (degree, weight)
                # Every attention and MLP projection of both blocks is sharded (the plan's 14 linears).
                assert {w["name"].rsplit(".", 1)[0] for w in report["sharded"]} >= {
                    "transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_out.0",
                    "transformer_blocks.0.ff.linear_in", "single_transformer_blocks.0.attn.to_qkv_mlp_proj"}
                assert report["transformer_bytes"] == report["sharded_bytes"] + report["replicated_bytes"]
                sharded_global += report["sharded_bytes"]
            replicated = {r["replicated_bytes"] for r in ranks}
            assert len(replicated) == 1  # the same replicated weights (modulation, norms, embedders) on each
            # Shards add up to the whole, and one rank's shards are 1/N of it: the weights were split.
            assert ranks[0]["sharded_bytes"] * degree == sharded_global
            assert sharded_global + replicated.pop() == whole_bytes
            per_rank = ranks[0]["transformer_bytes"] / whole_bytes
            assert per_rank < 1 / degree + ranks[0]["replicated_bytes"] / whole_bytes + 0.01
    finally:
        mgr.stop_engine("tensor-parallel")

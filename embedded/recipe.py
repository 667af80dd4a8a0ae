"""The embedded models: tiny FLUX.2-klein pipelines, built offline.

No machine here reaches a model hub, so the app ships pipelines made of the *same* classes as
FLUX.2-klein-4B (``Flux2KleinPipeline`` with ``Flux2Transformer2DModel``, ``AutoencoderKLFlux2``,
``Qwen3ForCausalLM``, ``Qwen2TokenizerFast``, ``FlowMatchEulerDiscreteScheduler``) with tiny widths.
They are saved with ``save_pretrained`` and loaded back through the ordinary
``Flux2KleinPipeline.from_pretrained`` path, exactly like the real model:

- ``assets/scenes-flux2-klein`` (``--model embedded``, the default): trained on the procedural scene
  set of ``embedded.scenes`` to draw what a prompt from that grammar says, e.g. "a red circle on
  the left, on a sky gradient", in 4 steps (agreement on held-out prompts: ``python -m bench --only
  P9``), and to edit a reference image: the first phases (``embedded.training``: the VAE, the text
  encoder's last layers, a first transformer), the kinds phase (``embedded.kinds_training``: a fresh
  transformer that draws each shape's kind, at 64-token prompts) and the edit phase
  (``embedded.edit_training``).
- ``assets/tiny-flux2-klein`` (``--model embedded-random``): random weights, smallest and fastest;
  every image is noise. For tests and benchmarks that only need the shapes and the timings.

Constraints that make it work with the pipeline's *default* call arguments (see DESIGN.md):
- the text encoder has >= 27 layers (default ``text_encoder_out_layers=(9, 18, 27)``) and
  ``joint_attention_dim = 3 * hidden_size`` (three hidden states are concatenated);
- ``transformer.in_channels = 4 * vae.latent_channels`` (2x2 latent patches are packed);
- the VAE has 4 blocks so that ``vae_scale_factor`` is 8 like the real model;
- a byte-level tokenizer (256 byte tokens + Qwen's special tokens) never yields an unknown id.

``TinyFluxConfig`` also describes the larger random-weight configs the benchmarks build, up to the
real block counts of FLUX.2-klein-4B.

Rebuild the committed folders with ``python -m embedded assets/tiny-flux2-klein`` (random)
and ``python -m embedded train`` (trained; a progress bar per phase, about three and a half hours
on two CPU cores; ``--help`` lists the step counts and the seed; ``train-kinds`` and ``train-edits``
run the later phases alone on a folder).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from embedded import EMBEDDED_MODEL_DIR, SCENES_MODEL_DIR, scenes  # noqa: E402 - the folders the recipe writes

_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# A small Qwen-style chat template: honours add_generation_prompt and enable_thinking=False the way
# the real Qwen3 template does, which is all Flux2KleinPipeline asks of it.
_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


@dataclasses.dataclass(frozen=True)
class TinyFluxConfig:
    """Geometry of a random-weight FLUX.2-klein pipeline. Defaults are the embedded model."""

    seed: int = 0
    # text encoder (Qwen3): >= 27 layers so hidden state 27 exists
    text_hidden_size: int = 32
    text_layers: int = 27
    text_heads: int = 2
    text_kv_heads: int = 1
    text_intermediate: int = 64
    text_head_dim: int | None = None  # default: hidden size / heads
    # transformer: heads must be divisible by the TP degrees we test (2, 4)
    num_layers: int = 1
    num_single_layers: int = 1
    attention_head_dim: int = 16
    num_attention_heads: int = 4
    rope_theta: float = 2000.0
    timestep_guidance_channels: int = 32
    # VAE: 4 blocks -> vae_scale_factor 8
    vae_block_out_channels: tuple[int, ...] = (16, 16, 32, 32)
    vae_layers_per_block: int = 1
    vae_norm_groups: int = 8
    latent_channels: int = 4
    vae_mid_attention: bool = False
    # words the tokenizer holds whole (besides every byte): the scene grammar's, for the trained model
    vocab_words: tuple[str, ...] = ()

    @property
    def joint_attention_dim(self) -> int:
        return 3 * self.text_hidden_size


def _byte_level_tokenizer(words: tuple[str, ...] = ()):
    """A byte-level BPE tokenizer. Every byte is a token, so no text yields an unknown id; each of
    ``words`` preceded by a space (and at the start of the text) is also one token, built by a chain
    of BPE merges the way a real BPE vocabulary holds whole common words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import Qwen2TokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    merges: list[tuple[str, str]] = []
    # "\u0120" is the byte-level alphabet's space. Every merge after a space ranks before every merge
    # without one, so a word's chain is never cut by the bare chain of another ("an" in "triangle").
    for text in ["\u0120" + word for word in words] + list(words):
        piece = text[0]
        for ch in text[1:]:
            if (piece, ch) not in merges:
                merges.append((piece, ch))
            piece += ch
            vocab.setdefault(piece, len(vocab))
    for tok in _SPECIAL_TOKENS:
        vocab[tok] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|im_end|>",
        unk_token=None,
        pad_token="<|endoftext|>",
        additional_special_tokens=_SPECIAL_TOKENS[1:],
        model_max_length=512,
    )
    tokenizer.chat_template = _CHAT_TEMPLATE
    return tokenizer


# FLUX.2-klein-4B's transformer and VAE geometry (public configs), for realistic random-weight
# benchmarks. The text encoder keeps the real output width (3 x 2560 = joint_attention_dim) but is a
# narrow stand-in, so its own cost is not what such a benchmark measures.
KLEIN_4B_GEOMETRY = TinyFluxConfig(
    text_hidden_size=2560, text_layers=27, text_heads=1, text_kv_heads=1, text_head_dim=128,
    text_intermediate=64, num_layers=5, num_single_layers=20, attention_head_dim=128, num_attention_heads=24,
    timestep_guidance_channels=256, vae_block_out_channels=(128, 256, 512, 512), vae_layers_per_block=2,
    vae_norm_groups=32, latent_channels=32, vae_mid_attention=True,
)


# The trained embedded model: a little wider and deeper than the random one (quality), still 4 heads
# (tensor-parallel tests shard them over 2 and 4 ranks). Its VAE normalises with one group: with a
# group per channel or two, GroupNorm removes each channel's mean, which is the colour of a flat
# region, and the autoencoder never learns colours.
SCENES_GEOMETRY = TinyFluxConfig(num_layers=1, num_single_layers=2, attention_head_dim=32, rope_theta=100.0,
                                 vae_norm_groups=1,
                                 vocab_words=scenes.WORDS + ("user", "assistant"))


def build_pipeline(cfg: TinyFluxConfig = TinyFluxConfig(), device: str = "cpu", dtype=None):
    """Build a random-weight Flux2KleinPipeline deterministically from ``cfg``.

    Weights are created directly on ``device`` (a 4B-parameter transformer initialises in seconds on
    a GPU, minutes on a CPU) and cast to ``dtype`` if given; the default is CPU float32."""
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = _byte_level_tokenizer(tuple(cfg.vocab_words))
    text_config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.text_hidden_size,
        num_hidden_layers=cfg.text_layers,
        num_attention_heads=cfg.text_heads,
        num_key_value_heads=cfg.text_kv_heads,
        head_dim=cfg.text_head_dim or cfg.text_hidden_size // cfg.text_heads,
        intermediate_size=cfg.text_intermediate,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    rope_axis = cfg.attention_head_dim // 4
    n_blocks = len(cfg.vae_block_out_channels)
    with torch.device(device):
        torch.manual_seed(cfg.seed)
        text_encoder = Qwen3ForCausalLM(text_config).eval()
        torch.manual_seed(cfg.seed + 1)
        transformer = Flux2Transformer2DModel(
            patch_size=1,
            in_channels=4 * cfg.latent_channels,
            num_layers=cfg.num_layers,
            num_single_layers=cfg.num_single_layers,
            attention_head_dim=cfg.attention_head_dim,
            num_attention_heads=cfg.num_attention_heads,
            joint_attention_dim=cfg.joint_attention_dim,
            timestep_guidance_channels=cfg.timestep_guidance_channels,
            mlp_ratio=3.0,
            axes_dims_rope=(rope_axis,) * 4,
            rope_theta=cfg.rope_theta,
            guidance_embeds=False,
        ).eval()
        torch.manual_seed(cfg.seed + 2)
        vae = AutoencoderKLFlux2(
            down_block_types=("DownEncoderBlock2D",) * n_blocks,
            up_block_types=("UpDecoderBlock2D",) * n_blocks,
            block_out_channels=cfg.vae_block_out_channels,
            layers_per_block=cfg.vae_layers_per_block,
            latent_channels=cfg.latent_channels,
            norm_num_groups=cfg.vae_norm_groups,
            mid_block_add_attention=cfg.vae_mid_attention,
        ).eval()
    if dtype is not None:
        for module in (text_encoder, transformer, vae):
            module.to(dtype)

    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True)
    return Flux2KleinPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        is_distilled=True,
    )


def save_pipeline(dest: Path, cfg: TinyFluxConfig = TinyFluxConfig()) -> Path:
    """Build the pipeline for ``cfg`` and save it as an ordinary diffusers folder at ``dest``."""
    dest = Path(dest)
    pipe = build_pipeline(cfg)
    pipe.save_pretrained(dest, safe_serialization=True)
    (dest / "tiny_config.json").write_text(
        json.dumps(dataclasses.asdict(cfg), indent=2, sort_keys=True) + "\n"
    )
    return dest


# What the trained folder says of itself to the app (backend.models.card reads it): the ~1 MP
# presets' aspect ratios at the ~256x256 pixels it was trained at, the largest trained image, the
# grammar its prompts are read in (embedded.grammar), and the size the page starts at.
CARD_FILE = "neuron_studio.json"
SCENES_CARD = {"preset_scale": 256, "trained_pixels": 256 * 256, "prompt_grammar": "scenes", "start": "256x256"}


def train_and_save(dest: Path, train_cfg=None, cfg: TinyFluxConfig = SCENES_GEOMETRY, edit_cfgs=None,
                   kinds_cfgs=None) -> dict:
    """Build ``cfg`` from its seed, train it on the scene set (``embedded.training``), replace its
    transformer by one that learns the kinds (``embedded.kinds_training``, the rounds ``kinds_cfgs``)
    and teach that to edit (``embedded.edit_training``, the rounds ``edit_cfgs``), save it at
    ``dest``; returns timings. Rounds of 0 steps are skipped (a folder for the later commands)."""
    from embedded import edit_training, kinds_training
    from embedded import training as scene_training

    train_cfg = train_cfg or scene_training.TrainConfig()
    edit_cfgs = edit_training.rounds(seed=train_cfg.seed) if edit_cfgs is None else edit_cfgs
    kinds_cfgs = kinds_training.rounds(seed=train_cfg.seed) if kinds_cfgs is None else kinds_cfgs
    dest = Path(dest)
    pipe = build_pipeline(dataclasses.replace(cfg, seed=train_cfg.seed))
    timings = scene_training.train(pipe, train_cfg)
    timings.update(kinds_training.train_rounds(pipe, [c for c in kinds_cfgs if c.steps]))
    timings.update(edit_training.train_rounds(pipe, edit_cfgs))
    timings["total"] = sum(v for k, v in timings.items() if k != "total")
    pipe.save_pretrained(dest, safe_serialization=True)
    _save_records(pipe, dest, cfg, train_cfg, kinds_cfgs, edit_cfgs, timings)
    return timings


def _done(record: dict, key: str) -> list[dict]:
    return [r for r in record.get(key, []) if r.get("steps")]


def _load_folder(source: Path):
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(source)
    cfg = TinyFluxConfig(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in json.loads((source / "tiny_config.json").read_text()).items()})
    return pipe, cfg


def _save_transformer(pipe, source: Path, dest: Path) -> None:
    """Only the transformer is rewritten (the later phases train nothing else); the other components
    are copied as they are when ``dest`` is elsewhere."""
    import shutil

    if dest.resolve() != source.resolve():
        shutil.copytree(source, dest, dirs_exist_ok=True)
    pipe.transformer.save_pretrained(dest / "transformer", safe_serialization=True)
    # loaded from a folder, the transformer names it in its config: not what it was trained from
    config_file = dest / "transformer" / "config.json"
    config = json.loads(config_file.read_text())
    if config.pop("_name_or_path", None) is not None:
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def train_kinds_and_save(source: Path, dest: Path, kinds_cfgs) -> dict:
    """The kinds phase alone (``python -m embedded train-kinds``): load ``source`` (a folder ``python -m
    embedded train --kinds-steps 0 --edit-steps 0`` wrote: its first phases done), replace its
    transformer and train it in the rounds ``kinds_cfgs``, save it at ``dest``. The same as the whole
    recipe's phase: the folder keeps the weights' exact bits."""
    from embedded import kinds_training

    source, dest = Path(source), Path(dest)
    before = json.loads((source / "training.json").read_text())
    if _done(before, "kinds_rounds") or _done(before, "edit_rounds"):
        raise ValueError(f"{source} has been through the kinds or edit phase already: run the kinds phase on a "
                         "folder that `python -m embedded train --kinds-steps 0 --edit-steps 0` wrote")
    pipe, cfg = _load_folder(source)
    new = kinds_training.train_rounds(pipe, kinds_cfgs)
    timings = {**{k: v * 60 for k, v in before["minutes"].items() if k not in ("total", "edit_data", "edits")}, **new}
    timings["total"] = sum(v for k, v in timings.items() if k != "total")
    _save_transformer(pipe, source, dest)
    _save_records(pipe, dest, cfg, before["train_config"], kinds_cfgs, [], timings)
    return timings


def train_edits_and_save(source: Path, dest: Path, edit_cfgs, first: int = 0) -> dict:
    """The edit phase alone: load the trained folder ``source`` (its earlier phases done), train it to
    edit, save it at ``dest`` (``python -m embedded train-edits``). The same as the whole recipe's last
    phase: the folder keeps the weights' exact bits.

    ``first`` > 0 goes on from a folder that holds the first ``first`` rounds of ``edit_cfgs``
    already (``--from-round``: round N again from the folder committed after round N-1); the folder
    must record exactly those rounds, and the one saved records all of ``edit_cfgs``."""
    from embedded import edit_training

    source, dest = Path(source), Path(dest)
    before = json.loads((source / "training.json").read_text())
    done = _done(before, "edit_rounds")
    if not 0 <= first < len(edit_cfgs):
        raise ValueError(f"the edit phase has rounds 1 to {len(edit_cfgs)}: there is no round {first + 1}")
    if not first and done:
        raise ValueError(f"{source} has been trained to edit already: run the edit phase on a folder that "
                         "`python -m embedded train-kinds` wrote (or go on from the round after "
                         f"its last: --from-round {len(done) + 1})")
    if first and len(done) != first:
        raise ValueError(f"{source} holds {len(done)} edit round(s); round {first + 1} goes on from a folder "
                         f"that holds the {first} before it")
    # a field recorded before it existed had its default's value then
    defaults = json.loads(json.dumps(dataclasses.asdict(edit_training.EditConfig())))
    for i, (recorded, cfg) in enumerate(zip(done, edit_cfgs[:first]), 1):
        wanted = json.loads(json.dumps(dataclasses.asdict(cfg)))
        differ = sorted(k for k, v in wanted.items() if recorded.get(k, defaults[k]) != v)
        if differ:
            raise ValueError(f"{source}'s edit round {i} is not this recipe's round {i} (it differs in "
                             f"{', '.join(differ)})")
    pipe, cfg = _load_folder(source)
    new = edit_training.train_rounds(pipe, edit_cfgs[first:])
    timings = {k: v * 60 for k, v in before["minutes"].items() if k != "total"}
    if not first:  # a base folder's own edit minutes, if any, are of no round
        timings = {k: v for k, v in timings.items() if k not in ("edit_data", "edits")}
    timings = {**timings, **{k: timings.get(k, 0.0) + v for k, v in new.items()}}
    timings["total"] = sum(v for k, v in timings.items() if k != "total")
    _save_transformer(pipe, source, dest)
    _save_records(pipe, dest, cfg, before["train_config"], before.get("kinds_rounds", []), edit_cfgs, timings)
    return timings


def _save_records(pipe, dest: Path, cfg: TinyFluxConfig, train_cfg, kinds_cfgs, edit_cfgs, timings: dict) -> None:
    """What the folder says of its geometry (tiny_config.json), its training and itself to the app."""
    # grown by the edit phase, or the kinds phase's fresh transformer
    cfg = dataclasses.replace(cfg, num_single_layers=len(pipe.transformer.single_transformer_blocks))
    def as_dict(c) -> dict:
        return c if isinstance(c, dict) else dataclasses.asdict(c)

    train_cfg, kinds, edits = as_dict(train_cfg), [as_dict(c) for c in kinds_cfgs], [as_dict(c) for c in edit_cfgs]
    (dest / "tiny_config.json").write_text(
        json.dumps(dataclasses.asdict(dataclasses.replace(cfg, seed=train_cfg["seed"])), indent=2, sort_keys=True)
        + "\n")
    (dest / "training.json").write_text(json.dumps(
        {"train_config": train_cfg, "kinds_rounds": kinds, "edit_rounds": edits,
         "minutes": {k: round(v / 60, 2) for k, v in timings.items()},
         "torch_threads": torch.get_num_threads()}, indent=2, sort_keys=True) + "\n")
    # the prompt length the last phase that trained the transformer read its prompts at
    trained = [c for c in kinds + edits if c.get("steps")]
    tokens = trained[-1].get("prompt_tokens") if trained else None
    (dest / CARD_FILE).write_text(json.dumps({**SCENES_CARD, **({"prompt_tokens": tokens} if tokens else {})},
                                             indent=2) + "\n")


def _render_flags(parser: argparse.ArgumentParser, each: str) -> None:
    """--no-jitter and --outline-weight: how the training renders are drawn and weighed, in every
    ``each`` (phase or round) when given, else as each one's own config says."""
    parser.add_argument("--no-jitter", dest="jitter", action="store_const", const=False, default=None,
                        help=f"render each caption's shapes exactly at their place and size, in every {each} "
                             f"(default: each {each}'s own; the first phases jitter them a little)")
    parser.add_argument("--outline-weight", type=float, default=None,
                        help=f"extra loss weight where a shape's kind shows (scenes.outline_pixels), in every {each} "
                             f"(default: each {each}'s own; 0 in the first phases)")


def _train_main(argv: list[str]) -> None:
    from embedded import edit_training, kinds_training
    from embedded.training import TrainConfig

    defaults = TrainConfig()
    parser = argparse.ArgumentParser(prog="python -m embedded train",
                                     description="Train the embedded model on the procedural scene set: the first "
                                                 "phases, the kinds phase, the edit phase.")
    parser.add_argument("dest", type=Path, nargs="?", default=SCENES_MODEL_DIR)
    for field in ("seed", "threads", "vae_steps", "steps", "finetune_steps", "captions", "batch"):
        parser.add_argument("--" + field.replace("_", "-"), type=int, default=getattr(defaults, field),
                            help="of the first phases" if field != "seed" else "of every phase (rounds offset it)")
    parser.add_argument("--kinds-steps", type=int, default=None,
                        help="steps of each round of the kinds phase (default: each round's own; 0: no kinds phase)")
    parser.add_argument("--edit-steps", type=int, default=None,
                        help="steps of each round of the edit phase (default: each round's own; 0: no edit phase)")
    _render_flags(parser, "phase")
    args = parser.parse_args(argv)
    overrides = {f: getattr(args, f) for f in ("seed", "threads", "vae_steps", "steps", "finetune_steps", "captions",
                                                "batch", "jitter", "outline_weight") if getattr(args, f) is not None}
    given = {f: getattr(args, f) for f in ("jitter", "outline_weight") if getattr(args, f) is not None}
    kinds = given if args.kinds_steps is None else {**given, "steps": args.kinds_steps}
    edits = given if args.edit_steps is None else {**given, "steps": args.edit_steps}
    train_and_save(args.dest, dataclasses.replace(defaults, **overrides),
                   kinds_cfgs=kinds_training.rounds(seed=args.seed, **kinds),
                   edit_cfgs=edit_training.rounds(seed=args.seed, **edits))
    print(args.dest)


def _train_kinds_main(argv: list[str]) -> None:
    from embedded.kinds_training import rounds

    parser = argparse.ArgumentParser(prog="python -m embedded train-kinds",
                                     description="Only the kinds phase: a fresh transformer on a folder's first "
                                                 "phases' VAE and text encoder, learning to draw each shape's kind.")
    parser.add_argument("source", type=Path,
                        help="a folder `python -m embedded train --kinds-steps 0 --edit-steps 0` wrote")
    parser.add_argument("--dest", type=Path, default=None, help="where to save (default: over the source)")
    parser.add_argument("--seed", type=int, default=0, help="the first round's (the others follow it)")
    for field in ("threads", "steps", "captions", "batch"):
        parser.add_argument("--" + field, type=int, default=None, help="of each round (default: its own)")
    args = parser.parse_args(argv)
    given = {f: getattr(args, f) for f in ("threads", "steps", "captions", "batch") if getattr(args, f) is not None}
    try:
        train_kinds_and_save(args.source, args.dest or args.source, rounds(seed=args.seed, **given))
    except ValueError as exc:
        parser.error(str(exc))
    print(args.dest or args.source)


def _train_edits_main(argv: list[str]) -> None:
    from embedded.edit_training import rounds

    parser = argparse.ArgumentParser(prog="python -m embedded train-edits",
                                     description="Only the last phase: teach a trained scene model to edit.")
    parser.add_argument("source", type=Path, help="a folder `python -m embedded train-kinds` wrote")
    parser.add_argument("--dest", type=Path, default=None, help="where to save (default: over the source)")
    parser.add_argument("--seed", type=int, default=0, help="offsets every round's own seed")
    for field in ("threads", "steps", "pairs", "batch"):
        parser.add_argument("--" + field, type=int, default=None, help="of each round (default: its own)")
    parser.add_argument("--from-round", type=int, default=1, metavar="N",
                        help="go on from a folder that holds rounds 1 to N-1 (e.g. one committed after round N-1) "
                             "and run rounds N to the last (default: 1)")
    parser.add_argument("--to-round", type=int, default=None, metavar="M",
                        help="stop after round M (default: the last); with --from-round M, round M alone")
    _render_flags(parser, "round")
    args = parser.parse_args(argv)
    given = {f: getattr(args, f) for f in ("threads", "steps", "pairs", "batch", "jitter", "outline_weight")
             if getattr(args, f) is not None}
    cfgs = rounds(seed=args.seed, **given)
    if args.to_round is not None and not args.from_round <= args.to_round <= len(cfgs):
        parser.error(f"--to-round must be from --from-round ({args.from_round}) to {len(cfgs)}")
    try:
        train_edits_and_save(args.source, args.dest or args.source, cfgs[:args.to_round], first=args.from_round - 1)
    except ValueError as exc:
        parser.error(str(exc))
    print(args.dest or args.source)


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        return _train_main(argv[1:])
    if argv[:1] == ["train-edits"]:
        return _train_edits_main(argv[1:])
    if argv[:1] == ["train-kinds"]:
        return _train_kinds_main(argv[1:])
    parser = argparse.ArgumentParser(
        description="Write the random-weight embedded FLUX.2-klein pipeline "
                    "(`python -m embedded train` trains the scene model instead).")
    parser.add_argument("dest", type=Path, nargs="?", default=EMBEDDED_MODEL_DIR)
    args = parser.parse_args(argv)
    print(save_pipeline(args.dest))


if __name__ == "__main__":
    main()

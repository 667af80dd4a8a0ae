"""The embedded FLUX.2-klein models: what lets the app run offline, on a CPU, with the real pipeline classes.

- ``embedded.recipe``: the tiny pipeline's geometry and byte-level tokenizer, built from a seed
  (``python -m embedded`` rebuilds ``assets/tiny-flux2-klein`` bit for bit);
- ``embedded.scenes``: the procedural scene grammar the trained model draws, and the judge that
  decides from pixels whether an image agrees with its caption;
- ``embedded.components`` and ``embedded.training``: the training on that grammar
  (``python -m embedded train`` writes ``assets/scenes-flux2-klein``).

The serving code (``backend/``) takes from here only the two folders below and, when the
random-weight folder is missing, ``recipe.save_pipeline`` to build it; it never imports the
training modules. Importing this package imports nothing heavy.
"""

from pathlib import Path

_ASSETS = Path(__file__).resolve().parent.parent / "assets"
EMBEDDED_MODEL_DIR = _ASSETS / "tiny-flux2-klein"  # random weights: --model embedded-random
SCENES_MODEL_DIR = _ASSETS / "scenes-flux2-klein"  # trained on embedded.scenes: --model embedded (default)

"""Neuron Studio's benchmarks (``python -m bench``; the method is in ``bench/stats.py``)."""

from embedded import EMBEDDED_MODEL_DIR

# Every row measures the random-weight tiny model unless it says otherwise: the figures are about the
# app (overhead, compiles, caches, memory growth, start-up), and pinning the model keeps them
# comparable whichever model is the app's default. A local folder, loaded by from_pretrained.
BENCH_MODEL = str(EMBEDDED_MODEL_DIR)

"""Neuron Studio's benchmarks (``python -m bench``; the method is in ``bench/stats.py``).

Where things are: ``suite`` (the ``python -m bench`` command: which rows, in what order, and the
saved result), ``table`` (the printed table; ``report`` writes the docs' section from a saved run),
``rows`` (how a row is built and judged) and ``harness`` (how a row runs the app). The rows by
topic: ``latency`` (P1, P2, P8), ``memory_shapes`` (P3), ``tp_transport`` (P4), ``warmup`` (P5,
P7, P10), ``startup`` (P6, with its floor ``bare_gradio``), ``agreement`` (P9), ``room`` (P11, P14),
``editing`` (P12), ``api`` (P13),
``cluster`` (P15: the Ray Serve engine on a local Ray cluster).
``hardening`` (``python -m bench.hardening``) prints the figures of ``bad_input``, ``traffic``,
``faults``, ``foreign_files`` and ``room.replica_killed``. Scripts of their own: ``compare`` (two
runs side by side), ``gpu_realistic`` (a CUDA GPU at realistic size), ``idle`` (an idle app's
CPU). Imports go one way, from the commands down to the shared
layers ``rows``, ``harness``, ``table`` and ``stats``, which import nothing above them.
"""

from pathlib import Path

from embedded import EMBEDDED_MODEL_DIR

ROOT = Path(__file__).resolve().parent.parent  # the repository
RESULTS = ROOT / "bench" / "results"  # saved runs: <date>-cpu.json, <date>-<device>-realistic.json

# Every row measures the random-weight tiny model unless it says otherwise: the figures are about the
# app (overhead, compiles, caches, memory growth, start-up), and pinning the model keeps them
# comparable whichever model is the app's default. A local folder, loaded by from_pretrained.
BENCH_MODEL = str(EMBEDDED_MODEL_DIR)

"""Why a worker group died, from what torch's launcher leaves in the group's run dir.

- Each rank's torchelastic **error file** (``TORCHELASTIC_ERROR_FILE``, which torchrun sets per rank
  under ``--log-dir``; ``<run dir>/torchrun/<run id>/attempt_<n>/<local rank>/error.json``), written
  by torch's ``ErrorHandler``: on a rank's uncaught exception (``backend.workers.worker`` runs under
  torch's ``record``) and by a rank that ends itself after a failed request (``RankEnding``).
- torchrun's **failure summary** in its log (torch's ``ChildFailedError``), for a rank ended by a
  signal: it writes no error file, and only the launcher, its parent, learns its exit code.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal

from backend.launch.protocol import RankEnding


def rank_failures(run_dir: str | None) -> dict[int, str]:
    """{rank: the exception it ended with, as its error file says}."""
    found = {}
    for path in glob.glob(os.path.join(run_dir or "", "torchrun", "*", "attempt_*", "*", "error.json")):
        try:
            with open(path, encoding="utf-8") as handle:
                message = json.load(handle).get("message")
            rank = int(os.path.basename(os.path.dirname(path)))
        except (OSError, ValueError, AttributeError):
            continue
        found[rank] = str(message.get("message") if isinstance(message, dict) else message)
    return found


def exit_codes(log_text: str) -> list[tuple[int, int]]:
    """(rank, exit code) of the ranks that failed, from torchrun's failure summary (negative: the
    signal that ended it)."""
    failed = re.findall(r"rank\s*:\s*(\d+).*?\n.*?exitcode\s*:\s*(-?\d+)", log_text) or \
        re.findall(r"rank: (\d+) \(local_rank: \d+\)\s+exitcode\s*:\s*(-?\d+)", log_text)
    return [(int(rank), int(code)) for rank, code in failed]


def ended_itself(run_dir: str | None) -> bool:
    """Whether a rank left on purpose (its error file says ``RankEnding``)."""
    return any(message.startswith(RankEnding.__name__ + ":") for message in rank_failures(run_dir).values())


def death_reason(run_dir: str | None, log_text: str, code: int) -> str:
    """One line for the page: each failed rank and what it died of (its error file's exception, or
    the signal or status torchrun reports), else torchrun's own last error line."""
    failures, parts = rank_failures(run_dir), []
    ending = RankEnding.__name__ + ": "
    for rank, message in sorted(failures.items())[:4]:
        line = message.splitlines()[0]
        parts.append(f"rank {rank} ended itself after a failed request ({line.removeprefix(ending)[:300]})"
                     if line.startswith(ending) else f"rank {rank} failed: {line[:300]}")
    for rank, exitcode in exit_codes(log_text)[:4]:
        if rank not in failures:
            how = f"signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"status {exitcode}"
            parts.append(f"rank {rank} exited with {how}")
    if not parts:
        errors = [line.strip() for line in log_text.splitlines()
                  if re.search(r"error|Error|refused|in use", line) and "Traceback" not in line]
        parts.append(f"torchrun exited with status {code}" + (f": {errors[-1][:300]}" if errors else ""))
    return "; ".join(parts) + " — the group is down"

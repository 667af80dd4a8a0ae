"""Gradio's temporary folder: a private one (0700) of the app's own, made before Gradio is imported
(several of its modules read ``GRADIO_TEMP_DIR`` at import), removed at exit; at the next start, what a
killed run left behind. No gradio here.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import stat
import tempfile

TEMP_PREFIX = "neuron-studio-gradio-"


def own_temp_dir() -> str | None:
    """The folder made, which the caller removes at exit; None when GRADIO_TEMP_DIR names the user's own.
    Its name holds this process's pid, so that the next start removes what a killed run left."""
    if os.environ.get("GRADIO_TEMP_DIR"):
        return None
    remove_dead_runs_folders(tempfile.gettempdir())
    made = os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-")
    return made


def remove_dead_runs_folders(root: str) -> list[str]:
    """Remove ``neuron-studio-gradio-<pid>-<random>`` folders owned by this user whose pid is not running
    (a SIGKILL leaves its folder behind); nothing else. Returns the folders removed."""
    import psutil

    removed = []
    for path in glob.glob(os.path.join(glob.escape(root), TEMP_PREFIX + "*")):
        pid_text, _, rest = os.path.basename(path).removeprefix(TEMP_PREFIX).partition("-")
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if (pid_text.isdigit() and rest and stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
                and not psutil.pid_exists(int(pid_text))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def is_upload(path) -> bool:
    """Whether ``path`` is a file in Gradio's upload folder: a path an event names is the caller's word,
    and a file elsewhere on the server is never read on its say."""
    folder = os.environ.get("GRADIO_TEMP_DIR", "")
    if not path or not folder:
        return False
    target, root = os.path.realpath(str(path)), os.path.realpath(folder)
    return os.path.commonpath([target, root]) == root and target != root and os.path.isfile(target)


def discard_upload(path) -> bool:
    """Delete an upload the app has read, only in its own temporary folder (``own_temp_dir``); True if deleted."""
    folder = os.environ.get("GRADIO_TEMP_DIR", "")
    if not os.path.basename(folder).startswith(f"{TEMP_PREFIX}{os.getpid()}-") or not is_upload(path):
        return False
    target = os.path.realpath(str(path))
    try:
        os.unlink(target)
    except OSError:
        return False
    parent = os.path.dirname(target)  # Gradio keeps each upload in a folder of its own
    if parent != os.path.realpath(folder):
        with contextlib.suppress(OSError):
            os.rmdir(parent)
    return True

#!/usr/bin/env bash
# The project's Python 3.12+ check: runs the non-slow test suite under another Python than the default.
# TorchNeuron (Neuron SDK 2.33, torch-neuronx 2.13.x) ships only for Python 3.12, 3.13 and 3.14, so the
# project must pass its tests there too, not only on the machine's default Python.
#
# Usage: tools/test_python.sh 3.12 [pytest args...]
#   Finds that Python through pyenv (`pyenv prefix 3.12`, else $PYENV_ROOT/versions/3.12*, else python3.12
#   on PATH), makes or reuses a venv at ${VENV_DIR:-$HOME/.cache/neuron-studio-venvs/py3.12}, installs
#   requirements-dev.txt into it (again only when a requirements file changed, or with REINSTALL=1), and
#   runs `python -m pytest -q -m "not slow" [pytest args...]` from the repo root with
#   GRADIO_ANALYTICS_ENABLED=False. A later -m in the args replaces "not slow".
# Example: tools/test_python.sh 3.12 -p no:cacheprovider tests/backend
#
# The first install is several GB: on Python 3.12+ pip takes PyPI's CUDA build of torch (it runs on the
# CPU). Where the CPU index is reachable, PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu gets
# the smaller CPU build instead.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
ver="$1"
shift
if [[ ! "$ver" =~ ^3\.[0-9]+(\.[0-9]+)?$ ]]; then
  echo "test_python.sh: '$ver' is not a Python version like 3.12 or 3.12.1" >&2
  exit 2
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# --- the interpreter --------------------------------------------------------------------------------
find_python() {
  local prefix candidate
  if command -v pyenv >/dev/null 2>&1 && prefix="$(pyenv prefix "$ver" 2>/dev/null)" \
      && [[ -x "$prefix/bin/python" ]]; then
    echo "$prefix/bin/python"
    return
  fi
  # The newest installed patch release of that version (3.12 -> versions/3.12.1, not 3.120).
  candidate="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$ver" "${PYENV_ROOT:-$HOME/.pyenv}/versions/$ver".* \
                 2>/dev/null | grep -E "/$ver(\.[0-9]+)?$" | sort -V | tail -n 1 || true)"
  if [[ -n "$candidate" && -x "$candidate/bin/python" ]]; then
    echo "$candidate/bin/python"
    return
  fi
  if command -v "python$ver" >/dev/null 2>&1; then
    command -v "python$ver"
    return
  fi
  return 1
}

if ! python="$(find_python)"; then
  echo "test_python.sh: no Python $ver found (pyenv prefix $ver, ${PYENV_ROOT:-$HOME/.pyenv}/versions/$ver*," \
       "python$ver on PATH); install it, e.g. 'pyenv install $ver'" >&2
  exit 1
fi
# The interpreter must be the version asked for (a prefix: 3.12 matches 3.12.1).
found="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
if [[ "$found" != "$ver" && "$found" != "$ver".* ]]; then
  echo "test_python.sh: $python is Python $found, not $ver" >&2
  exit 1
fi

# --- the venv ---------------------------------------------------------------------------------------
venv="${VENV_DIR:-$HOME/.cache/neuron-studio-venvs/py$ver}"
venv_python="$venv/bin/python"
if [[ -x "$venv_python" ]]; then
  have="$("$venv_python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || echo broken)"
  if [[ "$have" != "$ver" && "$have" != "$ver".* ]]; then
    echo "test_python.sh: $venv holds Python $have, not $ver; remove it or set VENV_DIR" >&2
    exit 1
  fi
  echo "test_python.sh: reusing $venv (Python $have)"
else
  echo "test_python.sh: creating $venv with $python (Python $found)"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv_python" -m pip install -q --upgrade pip
fi

# --- the requirements -------------------------------------------------------------------------------
# Installed again only when requirements.txt or requirements-dev.txt changed since the last install.
stamp="$venv/.neuron-studio-requirements"
want="$(cat "$repo/requirements.txt" "$repo/requirements-dev.txt" | sha256sum | cut -d' ' -f1)"
if [[ "${REINSTALL:-0}" == 1 || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  pip_args=(-q)
  # A local wheel directory (a CPU torch build, where one is kept) is used like .ci/run does.
  if [[ -d /opt/wheels ]]; then pip_args+=(--find-links /opt/wheels); fi
  echo "test_python.sh: installing requirements-dev.txt into $venv"
  "$venv_python" -m pip install "${pip_args[@]}" -r "$repo/requirements-dev.txt"
  echo "$want" > "$stamp"
fi
"$venv_python" -c 'import sys, torch, diffusers, transformers, gradio, numpy
print("test_python.sh: Python %s, torch %s, diffusers %s, transformers %s, gradio %s, numpy %s" % (
    sys.version.split()[0], torch.__version__, diffusers.__version__, transformers.__version__,
    gradio.__version__, numpy.__version__))'

# --- the tests --------------------------------------------------------------------------------------
cd "$repo"
export GRADIO_ANALYTICS_ENABLED=False
exec "$venv_python" -m pytest -q -m "not slow" "$@"

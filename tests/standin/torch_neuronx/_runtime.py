"""The simulated Neuron Runtime: the instance's NeuronCores, which ones this process sees, and the
exclusive per-process claim taken when the runtime starts.

Rules enforced, from the Neuron Runtime configuration guide (2.33),
https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/neuron-runtime/guides/configuration-guide.html
and the runtime environment variable reference,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/api/nrt-env-var-reference.html:

- "By default, Neuron Runtime initializes all the cores present in the system and reserves them for
  the current process." With ``NEURON_RT_VISIBLE_CORES`` unset, a process that starts its runtime
  claims every core of the instance.
- "Once a NeuronCore is reserved for a process, it cannot be used by another process at all, until
  the process reserving that NeuronCore is terminated." A claim is an ``fcntl.flock`` on
  ``<state dir>/nc<N>.lock`` (holder pid written inside), released by the kernel when the process
  exits. A second live process asking for a held core fails, naming the core and the holder pid.
- ``NEURON_RT_VISIBLE_CORES`` ("3", "0-3", "0,2") limits the cores a process reserves; it is read
  when the runtime starts, so setting it afterwards changes nothing. Text that is not a core list,
  or a core the instance does not have, is an error.
- The runtime starts at the first device use (an allocation or a copy to "neuron"), not at import
  and not on ``torch.neuron.device_count()``.
- The runtime cannot be re-initialised in a forked child: a child forked after its parent started
  the runtime fails on its first device use (use spawn or a fresh process).

Logical NeuronCores ("Logical NeuronCore configuration",
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/logical-neuroncore-config.html;
the Neuron-LS user guide's Trn2 table, columns "NEURON CORES" and "LOGICAL NC",
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-sys-tools/neuron-ls.html):

- "Every Trainium2 device contains eight physical NeuronCore-v3" (Trainium3 likewise 8). The
  runtime groups ``NEURON_LOGICAL_NC_CONFIG`` physical cores into one logical core; the SDK supports
  a degree of 1 or 2 ("Using Logical NeuronCores (LNC) with NKI", 2.33), and 2 is the Trn2/Trn3
  default. Any other value stops the runtime from starting.
- Everything a process sees counts *logical* cores: ``NEURON_RT_VISIBLE_CORES`` indexes them and
  ``torch.neuron.device_count()`` counts them. A trn2.3xlarge (one device) shows 4 at LNC=2, 8 at
  LNC=1; a trn2.48xlarge (16 devices) 64 at LNC=2.
- ``neuron-ls`` (``tests/standin/bin``) prints the instance to any user, in the formats captured on
  real instances (``tests/standin/captures/neuron-ls``).

Stand-in-only knobs (the app never reads them): ``NEURON_STANDIN_DEVICES`` = Trainium devices
(chips) of the simulated instance (default 1: a trn2.3xlarge, 8 physical cores, 4 logical at the
default LNC=2); ``NEURON_STANDIN_STATE_DIR`` = where the claim files live (default
``<tempdir>/neuron-standin-<uid>``).
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
import time
from pathlib import Path

DEVICES_VAR = "NEURON_STANDIN_DEVICES"
STATE_DIR_VAR = "NEURON_STANDIN_STATE_DIR"
VISIBLE_CORES_VAR = "NEURON_RT_VISIBLE_CORES"
LNC_VAR = "NEURON_LOGICAL_NC_CONFIG"
PHYSICAL_CORES_PER_DEVICE = 8  # Trainium2 and Trainium3
DEFAULT_LNC = 2  # the Trn2/Trn3 default

_TOKEN = re.compile(r"^(\d+)(?:-(\d+))?$")


class NeuronRuntimeError(RuntimeError):
    """The simulated Neuron Runtime refused to start or to serve this process."""


_lock = threading.RLock()
_claimed: tuple[int, ...] | None = None  # cores this process reserved; None = runtime not started
_claim_files: list[int] = []  # open fds holding the flocks (kept open until exit)
_started_by_parent: int | None = None  # set in a child forked after its parent started the runtime
_started_for_process_group = False  # the runtime was started by init_process_group, not by device use


def devices() -> int:
    text = os.environ.get(DEVICES_VAR, "1")
    try:
        count = int(text)
    except ValueError:
        raise NeuronRuntimeError(f"{DEVICES_VAR}={text!r} is not a number of Neuron devices") from None
    if count < 0:
        raise NeuronRuntimeError(f"{DEVICES_VAR}={text!r} must be >= 0")
    return count


def physical_cores() -> int:
    """Physical NeuronCores of the instance (what the driver's sysfs ``core_count`` files add up to)."""
    return devices() * PHYSICAL_CORES_PER_DEVICE


def lnc() -> int:
    """Physical cores per logical core: ``NEURON_LOGICAL_NC_CONFIG``, 1 or 2 (default 2)."""
    text = os.environ.get(LNC_VAR, "").strip() or str(DEFAULT_LNC)
    if text not in ("1", "2"):
        raise NeuronRuntimeError(
            f"{LNC_VAR}={text!r} is not a supported logical NeuronCore configuration: "
            f"Trainium2/Trainium3 support 1 or 2 physical NeuronCores per logical NeuronCore")
    return int(text)


INSTANCE_VAR = "NEURON_STANDIN_INSTANCE"
# TorchNeuron's family -> compiler target table (PlatformUtils.cpp), for the families it runs on.
_TARGETS = {"trn2": "trn2", "trn2n": "trn2", "trn2u": "trn2", "trn3": "trn3", "trn3u": "trn3"}
_INSTANCE_BY_DEVICES = {1: "trn2.3xlarge", 16: "trn2.48xlarge"}
# HBM per Trainium device, as neuron-ls reports it (Trainium2: four 24 GB banks; Trainium3: 144 GiB).
HBM_BYTES = {"trn2": 96 * 2**30, "trn3": 144 * 2**30}


def instance_type() -> str:
    """The simulated instance type (``NEURON_STANDIN_INSTANCE``, else by device count)."""
    return os.environ.get(INSTANCE_VAR) or _INSTANCE_BY_DEVICES.get(devices(), f"trn2.standin-{devices()}-devices")


def platform_target() -> str:
    family = instance_type().split(".")[0]
    if family not in _TARGETS:
        raise NeuronRuntimeError(f"Unknown instance type: {family}. Supported types: inf1, trn1, trn1n, inf2, "
                                 f"trn2, trn2n, trn2u, trn3")
    return _TARGETS[family]


def instance_cores() -> int:
    """Logical NeuronCores of the instance: the ones NEURON_RT_VISIBLE_CORES indexes."""
    return physical_cores() // lnc()


def state_dir() -> Path:
    default = Path(tempfile.gettempdir()) / f"neuron-standin-{os.getuid()}"
    return Path(os.environ.get(STATE_DIR_VAR) or default)


def describe(cores: tuple[int, ...]) -> str:
    """"0-3" / "0,2" / "none", the way NEURON_RT_VISIBLE_CORES would spell it."""
    if not cores:
        return "none"
    if list(cores) == list(range(cores[0], cores[-1] + 1)) and len(cores) > 1:
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def parse_visible_cores(text: str, instance: int) -> tuple[int, ...]:
    """NEURON_RT_VISIBLE_CORES -> sorted core indices; a clear error for bad text or missing cores."""
    cores: set[int] = set()
    tokens = [token.strip() for token in text.split(",")]
    for token in tokens:
        match = _TOKEN.match(token)
        if not match or (match.group(2) is not None and int(match.group(2)) < int(match.group(1))):
            raise NeuronRuntimeError(
                f"{VISIBLE_CORES_VAR}={text!r} is not a valid NeuronCore list: use one index (\"3\"), "
                f"an inclusive range (\"0-3\") or a comma-separated list (\"0,2\")")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        cores.update(range(first, last + 1))
    missing = sorted(core for core in cores if core >= instance)
    if missing:
        have = f"logical NeuronCores 0-{instance - 1}" if instance else "no NeuronCores"
        raise NeuronRuntimeError(
            f"{VISIBLE_CORES_VAR}={text!r} asks for NeuronCore {missing[0]}, but this instance has {have} "
            f"({physical_cores()} physical cores at {LNC_VAR}={lnc()}; the variable counts logical cores)")
    return tuple(sorted(cores))


def requested_cores() -> tuple[int, ...]:
    """What the runtime would reserve if it started now (the environment as it is now)."""
    instance = instance_cores()
    text = os.environ.get(VISIBLE_CORES_VAR)
    if text is None:
        return tuple(range(instance))
    return parse_visible_cores(text, instance)


def visible_cores() -> tuple[int, ...]:
    """The cores this process sees: its claim once the runtime started, else what it would claim."""
    with _lock:
        if _claimed is not None:
            return _claimed
    return requested_cores()


def is_started() -> bool:
    return _claimed is not None


def started_for_process_group() -> bool:
    return _started_for_process_group


# Under torchrun ("How to use torch.distributed on Neuron"; DESIGN.md): TorchNeuron binds a rank to
# its NeuronCore when the process group is created. Before that, any torch.neuron query starts the
# runtime (and init_process_group then fails); after it, current_device() is LOCAL_RANK and
# device_count() the local world size, so the rank's device is neuron:LOCAL_RANK.
_rank_binding: tuple[int, int] | None = None  # (LOCAL_RANK, local world size) once the world group exists


def under_torchrun() -> bool:
    """A torchrun (torch elastic) worker: it sets LOCAL_RANK and TORCHELASTIC_RUN_ID for each rank."""
    return "LOCAL_RANK" in os.environ and "TORCHELASTIC_RUN_ID" in os.environ


def bind_rank(world_size: int) -> None:
    """Called by the process group backend when the world group is created."""
    global _rank_binding
    if under_torchrun():
        local = int(os.environ.get("LOCAL_WORLD_SIZE") or world_size)
        _rank_binding = (int(os.environ["LOCAL_RANK"]), local)


def rank_binding() -> tuple[int, int] | None:
    return _rank_binding


def current_index() -> int:
    """The device index this process's tensors live on: LOCAL_RANK once bound, else 0."""
    return _rank_binding[0] if _rank_binding else 0


def query() -> None:
    """A torch.neuron query: under torchrun, before the process group exists, it starts the runtime."""
    if under_torchrun() and _rank_binding is None and not is_started():
        ensure_started()


def ensure_started(for_process_group: bool = False) -> tuple[int, ...]:
    """Start the runtime on first device use: reserve every visible core for this process."""
    global _claimed, _started_for_process_group
    if _claimed is not None:
        return _claimed
    with _lock:
        if _started_by_parent is not None:
            raise NeuronRuntimeError(
                f"Neuron runtime cannot be re-initialized in a forked child process (pid {os.getpid()}); "
                f"its parent (pid {_started_by_parent}) had already started the runtime. Start workers "
                f"with the 'spawn' start method or as a fresh process, not fork.")
        if _claimed is not None:
            return _claimed
        cores = requested_cores()
        if not cores:
            raise NeuronRuntimeError("Neuron runtime could not start: this instance has no NeuronCores")
        _claim(cores)
        _claimed = cores
        _started_for_process_group = for_process_group
        return cores


def _claim(cores: tuple[int, ...]) -> None:
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    taken: list[int] = []
    try:
        for core in cores:
            fd = os.open(directory / f"nc{core}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                wanted = os.environ.get(VISIBLE_CORES_VAR)
                how = (f"{VISIBLE_CORES_VAR}={wanted!r}" if wanted is not None
                       else f"{VISIBLE_CORES_VAR} unset: every core of the instance")
                raise NeuronRuntimeError(
                    f"Neuron runtime could not start: NeuronCore {core} is already reserved by process "
                    f"{holder}. A reserved NeuronCore cannot be used by another process until the process "
                    f"reserving it exits. This process asked for NeuronCores {describe(cores)} ({how}).") from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            taken.append(fd)
    except BaseException:
        for fd in taken:
            os.close(fd)  # closing the only descriptor releases the flock
        raise
    _claim_files.extend(taken)


def _read_holder(fd: int) -> str:
    # The holder writes its pid right after taking the lock; wait for that write, not for a time.
    for _ in range(200):
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 64).decode(errors="replace").strip()
        if text:
            return text
        time.sleep(0.005)
    return "(unknown pid)"


def holder_of(core: int, directory: str | os.PathLike | None = None) -> int | None:
    """The pid holding ``core`` now, or None (diagnostics and tests; does not claim anything).
    ``directory``: another state dir than this process's (tests read it without importing torch)."""
    path = (Path(directory) if directory is not None else state_dir()) / f"nc{core}.lock"
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = _read_holder(fd)
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def is_bad_fork() -> bool:
    return _started_by_parent is not None


def _after_fork_in_child() -> None:
    global _claimed, _started_by_parent
    if _claimed is not None:
        _started_by_parent = os.getppid()
        _claimed = None
        # The parent keeps its reservation; the child must not keep the parent's cores alive.
        for fd in _claim_files:
            try:
                os.close(fd)
            except OSError:
                pass
        _claim_files.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)

"""Many processes, one evaluation: ropecli under `torchrun` (and so under Slurm or Kubernetes through it).

Started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the environment), every
evaluating command joins one torch.distributed process group: NCCL when the rank's device is CUDA,
gloo on CPU (`ROPECLI_DIST_BACKEND` asks for one), with a timeout on every collective
(`ROPECLI_DIST_TIMEOUT`, seconds, default 120) so that a lost rank ends the run instead of hanging it.

What is split: the windows of each evaluation that some rank lacks in its cache (the union over
ranks). The j-th of them is computed by rank j mod W, so in round r the ranks compute r-th windows
side by side. Each rank returns (window, NLL, tokens) in float64; all ranks gather all of them and
put them back by window, so the totals, PPL and its error are summed exactly as one process sums
them: the numbers are the single-process numbers.
What is not split: the model (each rank holds a whole copy, on its local GPU, or spread with
`--device-map auto` over a group of local GPUs), and the search (every rank walks the same
golden-section steps on the same gathered numbers). Rank 0 alone prints, draws progress, writes the
cache, plots and exports; every rank reads the cache, and a window counts as cached only when every
rank finds it, so a rerun resumes on any number of ranks.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError

torch = deferred("torch")
tdist = deferred("torch.distributed")

TIMEOUT_ENV, BACKEND_ENV = "ROPECLI_DIST_TIMEOUT", "ROPECLI_DIST_BACKEND"


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None  # None: a single process, no process group
    gpu_group: list = field(default_factory=list)  # with --device-map auto: the local GPUs this rank spreads its copy over
    windows_done: list = field(default_factory=list)  # window indices this rank computed, for the record

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def mine(self, n_windows: int) -> list[int]:
        """The windows this rank computes: i with i mod W = rank."""
        return list(range(self.rank, n_windows, self.world))

    def round_size(self, position: int, n_windows: int) -> int:
        """Windows computed across all ranks in the round of this rank's `position`-th window (for progress)."""
        return min(self.world, n_windows - position * self.world)

    def gather_windows(self, local: list[tuple], indices: list[int]) -> dict[int, tuple]:
        """Every rank's (unit, *values) (e.g. (window, nll, tokens)), on every rank: {unit: values} for
        exactly the units `indices` (the ones this evaluation computed, split across ranks)."""
        merged = {item[0]: tuple(item[1:]) for part in self.gather(local) for item in part}
        if sorted(merged) != sorted(indices):
            raise RopeCliError(f"distributed evaluation lost windows: got {sorted(merged)} of {sorted(indices)}")
        return merged

    def union(self, items: list[int]) -> list[int]:
        """The union of every rank's `items`, sorted (the units some rank lacks in its cache)."""
        return sorted(set().union(*map(set, self.gather(items))))

    def gather(self, obj: Any) -> list[Any]:
        """`obj` of every rank, in rank order, on every rank ([obj] in a single process)."""
        if self.world == 1:
            return [obj]

        out: list[Any] = [None] * self.world
        tdist.all_gather_object(out, obj)
        return out


def world_from_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; (0, 1, 0) outside torchrun."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def gpu_group(local_rank: int, local_world: int, device_count: int) -> list[int]:
    """The local GPUs of one rank when each rank spreads its model copy over a group (--device-map auto):
    consecutive, equal groups, e.g. 8 GPUs and 2 ranks per node -> [0..3] and [4..7]."""
    size = device_count // local_world
    return list(range(local_rank * size, (local_rank + 1) * size))


def setup(device: str, device_map: str | None) -> tuple[Dist, str]:
    """Join the process group when launched by torchrun: (Dist, the device this rank evaluates on).
    A single process gets (Dist(), device) and nothing is initialised."""
    rank, world, local_rank = world_from_env()
    if world <= 1:
        return Dist(), device

    cuda = torch.cuda.is_available()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if device == "auto":
        device = f"cuda:{local_rank}" if cuda else "cpu"
    if device == "cuda" and cuda:
        device = f"cuda:{local_rank}"
    if device_map is not None and cuda and local_world > torch.cuda.device_count():
        raise RopeCliError(f"--device-map {device_map} with {local_world} ranks per node but {torch.cuda.device_count()} GPU(s): "
                           "each rank needs its own group of GPUs; start fewer ranks (--nproc-per-node) or leave --device-map out")
    if device.startswith("cuda") and cuda and local_world > torch.cuda.device_count() and device_map is None:
        raise RopeCliError(f"{local_world} ranks per node but {torch.cuda.device_count()} GPU(s); pass --nproc-per-node "
                           f"{torch.cuda.device_count()} or fewer")
    backend = os.environ.get(BACKEND_ENV) or ("nccl" if device.startswith("cuda") else "gloo")
    if backend == "nccl" and not cuda:
        raise RopeCliError(f"{BACKEND_ENV}=nccl needs CUDA, and this machine has none; use gloo (or leave {BACKEND_ENV} unset)")
    if backend not in ("nccl", "gloo"):
        raise RopeCliError(f"{BACKEND_ENV}={backend}: choose nccl (GPUs) or gloo (CPU)")
    try:
        timeout = timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, 120)))
    except ValueError:
        raise RopeCliError(f"{TIMEOUT_ENV} must be a number of seconds") from None
    group = gpu_group(local_rank, local_world, torch.cuda.device_count()) if device_map is not None and cuda else []
    if group:
        device = f"cuda:{group[0]}"
    if device.startswith("cuda"):
        torch.cuda.set_device(int(device.split(":")[1]) if ":" in device else local_rank)
    if not tdist.is_initialized():
        import_before_group()
        tdist.init_process_group(backend=backend, timeout=timeout)
    return Dist(rank, world, local_rank, backend, gpu_group=group), device


def import_before_group() -> None:
    """Import torch.distributed.nn.functional before init_process_group, so nothing pins the group.

    Ten functions there take `group=group.WORLD` as a default argument, and Python evaluates defaults
    once, at import. transformers imports that module (through torch.distributed.fsdp) while it loads
    a model, i.e. after the group exists, so those defaults held the default process group for the
    rest of the process: `destroy_process_group` dropped torch's own references, the C++ group lived
    on, and gloo's threads (gloo_tcp_loop, pt_gloo_runloop) with it into interpreter finalization,
    whose teardown of them aborts the process in some runs ("terminate called without an active
    exception", SIGABRT: 2 of 18 runs of a torchrun compare; 2 of 30 runs of an 11-line gloo script that
    imports the module after the group, 0 of 30 with it imported before). Imported first, the defaults
    are None (the default group is looked up at call time) and nothing pins the group."""
    importlib.import_module("torch.distributed.nn.functional")  # for what importing it does: no statement names it


def group_threads() -> list[str]:
    """Names of this process's native threads that belong to a torch.distributed backend (Linux: from
    /proc; [] elsewhere). Empty after a clean `shutdown`; non-empty means some object still holds the
    process group."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return []
    names = []
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended while we looked
            pass
    return sorted(n for n in names if n.startswith(("gloo", "pt_gloo", "pt_nccl")))


def shutdown(clean: bool) -> bool:
    """Leave the process group before the interpreter exits: after a clean run the ranks first wait for
    each other (none leaves while another still gathers), after an error they leave at once. True
    when the group's threads are gone (or there was no group); False when something still holds
    the group, and the caller must end the process without interpreter finalization (`leave`)."""
    if world_from_env()[1] <= 1:
        return True

    if not tdist.is_initialized():
        return True
    try:
        if clean:
            tdist.barrier()
    except Exception:  # a peer is gone: nothing left to wait for
        pass
    try:
        tdist.destroy_process_group()
    except Exception:
        pass
    return not group_threads()


def leave(code: int) -> None:
    """End a rank whose process group outlived `shutdown`: flush what it wrote and exit at once.
    os._exit skips interpreter finalization and C++ static destructors, the teardown that aborts a
    process with backend threads alive; the cache is already on disk (each entry is written whole,
    by rename), so nothing computed is lost."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe: nothing to flush into
            pass
    os._exit(code)


def quiet_unless_main(dist: Dist) -> None:
    """Ranks other than 0 print nothing to stdout (rank 0 prints the one result)."""
    if not dist.is_main:
        sys.stdout = open(os.devnull, "w")


def rank_prefix() -> str:
    """'rank N: ' inside a multi-rank run, '' otherwise: every error line names its rank."""
    rank, world, _ = world_from_env()
    return f"rank {rank}: " if world > 1 else ""

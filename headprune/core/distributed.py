"""Data-parallel find: one model copy per process, started by an existing launcher.

``torchrun --nproc-per-node N -m headprune find ...`` and ``accelerate launch -m headprune find ...`` start N
processes and describe them in the environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``). headprune joins the process group they describe (``env://``): how processes and nodes meet
is the launcher's business, so its multi-node options work unchanged. Each stage's conditions are dealt out
round-robin; every process evaluates its share and the per-example results are gathered to all of them,
never recomputed. Rank 0 alone writes the journal, ``result.json`` and the report.

A process that dies breaks the next collective call in the others: they stop with one line (progress is in
the journal; ``--resume`` continues on any number of processes). Workers restarted by ``torchrun
--max-restarts`` resume from the journal by themselves.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch

from headprune.core.limits import env_number, number
from headprune.errors import HeadpruneError, SettingsError, WorkerLostError

log = logging.getLogger("headprune")
T = TypeVar("T")

#: How long a process waits for the others at a collective call (a slow stage on one process, e.g. loading).
def timeout() -> timedelta:
    """How long a process waits for the others (``HEADPRUNE_DIST_TIMEOUT_MIN``, default 120 minutes).

    Raises:
        SettingsError: the variable is not a positive number.
    """
    return timedelta(minutes=number("HEADPRUNE_DIST_TIMEOUT_MIN"))


@dataclass(frozen=True)
class Team:
    """The processes of one run; ``Team()`` is a run on its own."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    restarted: bool = False  # started again by the launcher after a failure (torchrun --max-restarts)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.world > 1

    def device(self, spec: str) -> str:
        """A process's own GPU (``cuda:LOCAL_RANK``) when ``spec`` asks for a GPU without naming one."""
        if self.parallel and spec in ("auto", "cuda") and torch.cuda.is_available():
            return f"cuda:{self.local_rank % torch.cuda.device_count()}"
        return spec

    def gather(self, value: T) -> list[T]:
        """Every process's ``value``, in rank order, on every process."""
        if not self.parallel:
            return [value]
        values: list[Any] = [None] * self.world
        _collective(torch.distributed.all_gather_object, values, value)
        return values

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value`` on every process."""
        if not self.parallel:
            return value
        box = [value if self.is_main else None]
        _collective(torch.distributed.broadcast_object_list, box, src=0)
        return box[0]

    def from_main(self, compute: Callable[[], T]) -> T:
        """``compute()`` run by rank 0 alone (e.g. opening the journal); its value, or the error it raised,
        on every process, so that no process waits for a rank 0 that has already stopped."""
        value: Any = None
        error: HeadpruneError | None = None
        if self.is_main:
            try:
                value = compute()
            except HeadpruneError as raised:
                error = raised
        if self.parallel:
            value, error = self.broadcast((value, error))
        if error is not None:
            raise error
        return value


def _collective(call: Callable, *args: object, **kwargs: object) -> None:
    global _lost
    try:
        call(*args, **kwargs)
    except (RuntimeError, torch.distributed.DistError) as error:
        _lost = True
        raise WorkerLostError(LOST) from error


LOST = ("another process of this run stopped or cannot be reached; progress is saved in the journal: rerun "
        "with --resume (on any number of processes)")
_lost = False  # this process has already said so


def launched() -> bool:
    """Whether a launcher started this process as one of several."""
    return int(env_number("WORLD_SIZE", 1, minimum=1)) > 1


def restarted() -> bool:
    """Whether the launcher started this process again after a failure (``torchrun --max-restarts``)."""
    return launched() and int(env_number("TORCHELASTIC_RESTART_COUNT", 0)) > 0


def join(device: str = "auto") -> Team:
    """Join the process group a launcher describes (or return a team of one without a launcher).

    NCCL when this process's device is a GPU, Gloo otherwise.

    Raises:
        WorkerLostError: the other processes cannot be reached.
    """
    if not launched():
        return Team()
    world = int(env_number("WORLD_SIZE", 1, minimum=1))
    if "RANK" not in os.environ:
        raise SettingsError(f"environment variable WORLD_SIZE={world} without RANK: start several processes with "
                            "torchrun or accelerate launch, which set both")
    team = Team(int(env_number("RANK", 0)), world, int(env_number("LOCAL_RANK", 0)), restarted())
    if team.rank >= world:
        raise SettingsError(f"environment variable RANK={team.rank} must be below WORLD_SIZE={world}")
    if not torch.distributed.is_initialized():
        gpu = team.device(device).startswith("cuda") and torch.cuda.is_available()
        if gpu:
            torch.cuda.set_device(torch.device(team.device(device)))
        try:
            from torch.distributed.rendezvous import rendezvous

            store, _, _ = next(rendezvous("env://", timeout=timeout()))
            # A key space per launch attempt: workers restarted by torchrun must not read the addresses their
            # predecessors left in the launcher's store.
            restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            attempt = torch.distributed.PrefixStore(f"headprune/attempt_{restarts}", store)
            torch.distributed.init_process_group("nccl" if gpu else "gloo", store=attempt, rank=team.rank,
                                                 world_size=team.world, timeout=timeout())
        except (RuntimeError, ValueError, torch.distributed.DistError) as error:
            raise WorkerLostError(f"cannot join the other processes of this run: {error}") from error
    if not team.is_main:
        log.setLevel(logging.WARNING)  # one process reports
    _say_when_stopped(team)
    return team


def _say_when_stopped(team: Team) -> None:
    """The launcher stops every worker when one fails: say so once (rank 0) instead of dying silently."""
    def stopped(signum: int, frame: object) -> None:
        if team.is_main and not _lost:
            sys.stderr.write(f"headprune: error: stopped by the launcher: {LOST}\n")
            sys.stderr.flush()
        os._exit(128 + signum)  # the journal is on disk, line by line; nothing else to save

    signal.signal(signal.SIGTERM, stopped)


def leave() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def deal(items: Sequence[T], team: Team) -> list[list[T]]:
    """``items`` in rounds of one per process (the last round may be short)."""
    return [list(items[start: start + team.world]) for start in range(0, len(items), team.world)]


__all__ = ["Team", "deal", "join", "launched", "leave"]

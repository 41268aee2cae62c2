"""What a backend is given and what it must do."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from fltest.config.schema import ExperimentConfig, RunConfig
from fltest.data.shard_set import ShardSet, Storage
from fltest.hooks import Hooks
from fltest.params import Params
from fltest.rounds import RunProgress


@dataclass(frozen=True)
class RunJob:
    """One run to carry out: the experiment, the run's own settings, its data, and where it reports.

    ``hooks`` are the experiment's hooks, loaded once; ``run_dir`` is the run's results folder,
    where a backend may keep its framework's own files.
    """

    config: ExperimentConfig
    run: RunConfig
    shards: ShardSet
    initial_params: Params
    hooks: Hooks
    run_dir: Path
    progress: RunProgress


class Backend(ABC):
    """A federated-learning framework that can carry out a :class:`RunJob`.

    A backend reports rounds ``1..rounds`` with ``job.progress.round_done`` (the runner
    evaluates and records them, and round 0, the initial model) and raises on failure.
    """

    framework: str

    def storage(self, config: ExperimentConfig) -> Storage:
        """Which shard variant the backend reads: memory-mapped by default."""
        return "mmap"

    def check(self, config: ExperimentConfig, run: RunConfig) -> None:  # noqa: B027 (a hook: nothing to check by default)
        """Raise :class:`fltest.errors.InputError` if the run cannot start here (before any output).

        Its options were checked by the schema; this checks what the schema cannot (files, other keys).
        """

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """Why the framework has no implementation of its own for the config's strategy, else ``None``.

        FLTest never replaces a framework's implementation with its own: such a run is recorded as
        ``unsupported``, with this reason, in its summary, the comparison and the report.
        """
        return None

    @abstractmethod
    def run(self, job: RunJob) -> None:
        """Carry out the run, reporting every round."""

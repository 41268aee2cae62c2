"""What a backend is given and what it must do."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from fltest.config.schema import ExperimentConfig, RunConfig
from fltest.data.shards import ShardSet, Storage
from fltest.errors import InputError
from fltest.params import Params
from fltest.results.recorder import RunRecorder


@dataclass(frozen=True)
class RunJob:
    """One run to carry out: the experiment, the run's own settings, its data and its recorder."""

    config: ExperimentConfig
    run: RunConfig
    shards: ShardSet
    initial_params: Params
    recorder: RunRecorder


class Backend(ABC):
    """A federated-learning framework that can carry out a :class:`RunJob`.

    A backend records rounds ``1..rounds`` with ``job.recorder.record_round``
    (round 0, the initial model, is recorded for it) and raises on failure.
    """

    framework: str
    known_options: frozenset[str] = frozenset()

    def storage(self, config: ExperimentConfig) -> Storage:
        """Which shard variant the backend reads: memory-mapped by default."""
        return "mmap"

    def check(self, config: ExperimentConfig, run: RunConfig) -> None:
        """Raise :class:`fltest.errors.InputError` if the run cannot start here (before any output)."""
        unknown = sorted(set(run.options) - self.known_options)
        if unknown:
            known = ", ".join(sorted(self.known_options)) or "none"
            raise InputError(
                f"runs.{run.name}.options.{unknown[0]}: unknown option for {run.framework} (known: {known})"
            )

    @abstractmethod
    def run(self, job: RunJob) -> None:
        """Carry out the run, recording every round."""


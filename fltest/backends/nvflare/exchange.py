"""What the fltest driver, the NVFlare server and the NVFlare clients share: files in the run's workspace.

The simulator runs the server and the clients in processes of its own, so they
talk to the driver through files under ``<run dir>/nvflare/``:

``run.json``
    The :class:`RunSpec` (experiment config and shard set), read by every client.
``initial.npz``
    The initial global model, float64, loaded by the server.
``exchange/ready-client-N``
    Written by client ``N`` once it has its shard and waits for tasks (setup ends when all are).
``exchange/round-NNNN.npz`` and ``round-NNNN.json``
    The global model after round ``NNNN`` and that round's train metrics and clients,
    written by the server; the ``.json`` file comes last and means the round is complete.
``exchange/failed-client-N.txt``
    One line: why client ``N`` failed, written by the client before it raises.
``job/``, ``simulator/``
    The exported NVFlare job and the simulator's workspace.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from fltest.config.schema import ExperimentConfig
from fltest.data.shard_set import ShardSet
from fltest.params import Params, load_params, save_params
from fltest.rounds import RoundResult

SPEC_VARIABLE = "FLTEST_NVFLARE_SPEC"
JOB_NAME = "fltest"


def site_name(partition_id: int) -> str:
    """The NVFlare simulator's name for the client of ``partition_id``: ``site-1`` is partition 0."""
    return f"site-{partition_id + 1}"


def partition_of(site: str) -> int:
    """The partition id of the simulator client named ``site`` (the inverse of :func:`site_name`)."""
    prefix, _, number = site.rpartition("-")
    if prefix != "site" or not number.isdigit():
        raise ValueError(f"unexpected NVFlare client name {site!r} (expected site-<n>)")
    return int(number) - 1


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` so that a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _save_params_atomic(path: Path, params: Params) -> None:
    """Write ``params`` to the ``.npz`` file ``path`` so that a reader never sees half of it."""
    tmp = path.with_name(f".{path.stem}.tmp.npz")
    save_params(tmp, params)
    tmp.replace(path)


@dataclass(frozen=True)
class RunFiles:
    """The paths of one nvflare run's workspace, rooted at ``root``."""

    root: Path

    @property
    def spec(self) -> Path:
        """The run spec every client reads."""
        return self.root / "run.json"

    @property
    def initial_params(self) -> Path:
        """The initial global model."""
        return self.root / "initial.npz"

    @property
    def exchange(self) -> Path:
        """The folder of round results, the start marker and client failures."""
        return self.root / "exchange"

    @property
    def job_root(self) -> Path:
        """Where the NVFlare job is exported (the job itself is ``job_root / JOB_NAME``)."""
        return self.root / "job"

    @property
    def simulator_workspace(self) -> Path:
        """The simulator's workspace; the simulator wipes it on start, so it holds nothing else."""
        return self.root / "simulator"

    def create(self) -> None:
        """Make the folders of a fresh run."""
        for folder in (self.exchange, self.job_root, self.simulator_workspace):
            folder.mkdir(parents=True, exist_ok=True)

    def mark_ready(self, partition_id: int) -> None:
        """Say that client ``partition_id`` has its shard and waits for tasks."""
        (self.exchange / f"ready-client-{partition_id}").touch()

    def ready_clients(self) -> int:
        """How many clients are ready."""
        return sum(1 for _ in self.exchange.glob("ready-client-*"))

    def _round_path(self, server_round: int, suffix: str) -> Path:
        return self.exchange / f"round-{server_round:04d}{suffix}"

    def write_round(self, result: RoundResult) -> None:
        """Write one round's global model, then its metrics and clients (which completes it)."""
        _save_params_atomic(self._round_path(result.server_round, ".npz"), result.params)
        record = {"train": result.train_metrics, "clients": result.clients}
        _write_atomic(self._round_path(result.server_round, ".json"), json.dumps(record))

    def read_round(self, server_round: int) -> RoundResult | None:
        """Round ``server_round``'s result, or ``None`` while it is not complete."""
        path = self._round_path(server_round, ".json")
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        params = load_params(self._round_path(server_round, ".npz"))
        return RoundResult(server_round, params, record["train"], record["clients"])

    def _control_path(self, partition_id: int) -> Path:
        return self.exchange / f"control-client-{partition_id}.npz"

    def write_control(self, partition_id: int, variate: Params) -> None:
        """Keep client ``partition_id``'s SCAFFOLD control variate ``c_i`` for its next round, which may run in
        another worker process (the simulator swaps clients when it runs fewer at once than there are)."""
        _save_params_atomic(self._control_path(partition_id), variate)

    def read_control(self, partition_id: int) -> Params | None:
        """Client ``partition_id``'s control variate ``c_i`` after its last round; ``None`` before its first."""
        path = self._control_path(partition_id)
        return load_params(path) if path.is_file() else None

    def write_failure(self, partition_id: int, message: str) -> None:
        """Record why client ``partition_id`` failed (one line)."""
        _write_atomic(self.exchange / f"failed-client-{partition_id}.txt", message)

    def failures(self) -> list[str]:
        """Every client failure recorded so far, by partition id."""
        paths = sorted(self.exchange.glob("failed-client-*.txt"), key=lambda p: int(p.stem.rpartition("-")[2]))
        return [p.read_text().strip() for p in paths]


@dataclass(frozen=True)
class RunSpec:
    """What a client needs to train: the experiment and where its shard is."""

    config: ExperimentConfig
    shards: ShardSet
    workspace: Path

    def write(self, path: Path) -> None:
        """Save as JSON (the shard set as its paths and sizes, never its data)."""
        shards = {**asdict(self.shards), "root": str(self.shards.root), "client_sizes": list(self.shards.client_sizes)}
        data = {"config": self.config.model_dump(mode="json"), "shards": shards, "workspace": str(self.workspace)}
        path.write_text(json.dumps(data, indent=1))

    @classmethod
    def read(cls, path: Path) -> RunSpec:
        """Load a spec written by :meth:`write`."""
        data = json.loads(path.read_text())
        shards = data["shards"]
        return cls(
            config=ExperimentConfig.model_validate(data["config"]),
            shards=ShardSet(**{**shards, "root": Path(shards["root"]), "client_sizes": tuple(shards["client_sizes"])}),
            workspace=Path(data["workspace"]),
        )

    @classmethod
    def from_environment(cls) -> RunSpec:
        """The spec named by ``FLTEST_NVFLARE_SPEC`` (set by the driver for the simulator)."""
        return cls.read(Path(os.environ[SPEC_VARIABLE]))

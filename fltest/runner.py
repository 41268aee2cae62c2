"""Carry out an experiment: check every run, prepare the shards, run, compare, plot."""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fltest.backends.registry import Backend, RunJob, backend_for
from fltest.config.privacy import ExcludedParameters
from fltest.config.runs import ReferenceRun
from fltest.config.schema import ExperimentConfig, RunConfig
from fltest.data.shard_cache import prepare_shards
from fltest.data.shard_set import LABEL_PLOT, ShardSet, Storage
from fltest.errors import FLTestError
from fltest.fedavg import evaluate_global
from fltest.hooks import Hooks, load_hooks
from fltest.interrupts import signal_name
from fltest.model import Model, initial_params, load_model
from fltest.privacy.sharing import check_withheld
from fltest.results.compare import ATTACK_FREE, compare_runs
from fltest.results.recorder import RunRecorder, drop_round_models
from fltest.rounds import RoundResult

log = logging.getLogger(__name__)


def prepare(config: ExperimentConfig, storage: Storage = "mmap") -> ShardSet:
    """Prepare (or reuse) the experiment's shards, logging which it did.

    A cached set is found without the datasets library (:func:`fltest.data.shard_cache.prepare_shards`).
    """
    start = time.perf_counter()
    shards, reused = prepare_shards(config, storage)
    verb = "reused" if reused else "prepared"
    log.info(
        "%s %d %s shards (%s samples, test %d) in %.1f s: %s",
        verb,
        shards.num_clients,
        storage,
        sum(shards.client_sizes),
        shards.test_size,
        time.perf_counter() - start,
        shards.root,
    )
    log.info("label distribution per client: %s", shards.label_plot)
    return shards


class RecordedProgress:
    """A run's :class:`fltest.rounds.RunProgress`: evaluates each round's global model and records it."""

    def __init__(self, recorder: RunRecorder, model: Model, test: tuple[np.ndarray, np.ndarray], hooks: Hooks) -> None:
        """Record into ``recorder``; evaluate with ``model`` on the ``test`` arrays, with the ``hooks``' metrics."""
        self.recorder = recorder
        self.model = model
        self.test = test
        self.hooks = hooks

    def setup_done(self) -> None:
        """Time so far is the backend's set-up."""
        self.recorder.setup_done()

    def round_done(self, result: RoundResult) -> None:
        """Evaluate the round's global model and record the round."""
        metrics = evaluate_global(self.model, result.params, *self.test, self.hooks, result.server_round)
        self.recorder.record_round(
            result.server_round,
            result.params,
            metrics,
            result.train_metrics,
            result.clients,
            result.round_s,
            result.privacy,
        )

    def note(self, **info: Any) -> None:
        """Add ``info`` to the run's summary."""
        self.recorder.info.update(info)


def run_experiment(
    config: ExperimentConfig, results_dir: Path, backend_of: Callable[[RunConfig], Backend] = backend_for
) -> dict[str, Any]:
    """Run every run of ``config``; returns the comparison (see ``comparison.json``).

    ``backend_of`` gives a run its backend (benchmarks swap one in).

    Every run is checked and the shards prepared before anything is written, so a
    bad input leaves no results folder behind.

    Under an attack, the reference also runs on the same shards without it, last, as the run
    :data:`~fltest.results.compare.ATTACK_FREE`: the comparison gives each run's distance from its model.
    """
    runs = [(run, config) for run in config.runs]  # each run with the config it carries out
    if config.attack is not None:  # unchecked: the run-name pattern refuses the name, so no run of the config has it
        attack_free = ReferenceRun.model_construct(name=ATTACK_FREE, framework="reference")
        runs.append((attack_free, config.model_copy(update={"attack": None})))
    backends, storages = {}, {}
    for run, run_config in runs:
        backend = backend_of(run)
        backend.check(run_config, run)
        backends[run.name], storages[run.name] = backend, backend.storage(run_config)
    shard_sets = {storage: prepare(config, storage) for storage in dict.fromkeys(storages.values())}
    any_shards = next(iter(shard_sets.values()))
    hooks, model = load_hooks(config.hooks), load_model(config.model)
    test = any_shards.test_arrays()
    initial = initial_params(model, any_shards.feature_shape, any_shards.num_classes, config.seed)
    if isinstance(config.training.privacy, ExcludedParameters):  # the model's parameters are known from here
        check_withheld(config.training.privacy, initial)
    initial_metrics = evaluate_global(model, initial, *test, hooks, 0)

    experiment_dir = Path(results_dir).absolute() / config.name  # other processes write here too
    experiment_dir.mkdir(parents=True, exist_ok=True)
    (experiment_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    shutil.copyfile(any_shards.label_plot, experiment_dir / LABEL_PLOT)  # how the clients' data differ
    summaries = []
    try:
        for run, run_config in runs:
            backend = backends[run.name]
            shards = shard_sets[storages[run.name]]
            info = {
                "experiment": config.name,
                "run": run.name,
                "framework": run.framework,
                "shards_key": shards.key,
                "train_samples": sum(shards.client_sizes),
            }
            recorder = RunRecorder(experiment_dir / run.name, info, config.training.rounds)  # keeps every round's model
            recorder.record_round(0, initial, initial_metrics)
            reason = backend.unsupported(run_config)
            if reason is not None:
                summaries.append(recorder.finish("unsupported", reason))
                log.warning("run %s (%s) not run: %s", run.name, run.framework, reason)
                continue
            log.info(
                "run %s (%s): %d rounds, %d clients", run.name, run.framework, config.training.rounds, config.clients
            )
            try:
                progress = RecordedProgress(recorder, model, test, hooks)
                backend.run(RunJob(run_config, run, shards, initial, hooks, recorder.run_dir, progress))
            except KeyboardInterrupt as interrupt:  # the backend stopped the framework on its way out
                recorder.finish("interrupted", f"interrupted by {signal_name(interrupt)}")
                interrupt.stopped = (
                    f"stopped run {run.name} ({run.framework}) after round {max(recorder.last_round, 0)} "
                    f"of {config.training.rounds}; its rounds and summary: {recorder.run_dir}"
                )
                raise
            except FLTestError as exc:
                summaries.append(recorder.finish("failed", str(exc)))
                log.error("run %s failed: %s", run.name, exc)
                continue
            except Exception as exc:  # a backend's own error: keep the traceback in the log
                log.debug("run %s traceback:\n%s", run.name, traceback.format_exc())
                summaries.append(recorder.finish("failed", f"{type(exc).__name__}: {exc}"))
                log.error("run %s failed: %s: %s", run.name, type(exc).__name__, exc)
                continue
            summaries.append(recorder.finish("completed"))
        comparison = compare_runs(experiment_dir, summaries, config.compare.tolerance)
    finally:  # the per-round models serve the comparison; they stay only if asked for
        if not config.output.save_round_models:
            for run, _ in runs:
                drop_round_models(experiment_dir / run.name)
    from fltest.results.report import plot_report  # matplotlib: 0.5 s that delayed every run's first round

    plot_report(experiment_dir)
    return comparison

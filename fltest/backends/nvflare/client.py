"""The NVFlare client: a Client API script that trains FLTest's model on its own shard.

NVFlare runs this file (``ScriptRunner``, in the client's process) once per
simulated site. The site ``site-<n>`` is partition ``n - 1``; it memory-maps its
shard from the local cache named in the run spec (``FLTEST_NVFLARE_SPEC``), and
every round runs :func:`fltest.fedavg.client_update`, the reference backend's own
local training and hooks (with FedProx's term where NVFlare's FedAvg sends ``fedprox_mu``; with
SCAFFOLD's control variates, :class:`fltest.control_variates.ClientControl`, where NVFlare's Scaffold
sends its ``c``; ``c_i`` is kept in the run's files, since the simulator may run a client's next task
in another worker process). It sends its model, or, where clients share part of their change, its change, which
NVFlare's filter then takes (:func:`fltest.backends.nvflare.job.sharing_filter`). A client that fails writes one line saying why to the run's workspace,
then raises (which fails the NVFlare job).
"""

from __future__ import annotations

import nvflare.client as flare
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.app_constant import AlgorithmConstants
from nvflare.app_common.utils.fedprox_utils import get_fedprox_mu

from fltest.backends.nvflare.exchange import RunFiles, RunSpec, partition_of
from fltest.config.privacy import SharedChanges
from fltest.control_variates import ClientControl
from fltest.fedavg import client_update, with_proximal_mu
from fltest.hooks import load_hooks
from fltest.params import keyed, unkeyed


def _describe(exc: BaseException) -> str:
    """An exception as ``Type: message``."""
    return f"{type(exc).__name__}: {exc}"


def serve(spec: RunSpec, partition_id: int, files: RunFiles) -> None:
    """Answer train tasks until the job ends; a failure is written to ``files`` before it is raised."""
    config = spec.config
    try:
        hooks = load_hooks(config.hooks)
        x, y = spec.shards.client_arrays(partition_id)
    except Exception as exc:
        files.write_failure(partition_id, f"client {partition_id} failed to start: {_describe(exc)}")
        raise
    files.mark_ready(partition_id)
    control = ClientControl(files.read_control(partition_id))  # SCAFFOLD's c_i, kept in the run's files
    while flare.is_running():
        task = flare.receive()
        if task is None:
            break
        server_round, meta = task.current_round + 1, task.meta or {}
        try:
            if AlgorithmConstants.SCAFFOLD_CTRL_GLOBAL in meta:  # NVFlare's Scaffold sends its control variate c
                server_control = unkeyed(meta[AlgorithmConstants.SCAFFOLD_CTRL_GLOBAL])
                update = control.train(
                    config, hooks, partition_id, server_round, unkeyed(task.params), server_control, x, y
                )
                files.write_control(partition_id, control.variate)  # this client's next task may be another process
            else:
                mu = get_fedprox_mu(task) if AlgorithmConstants.FEDPROX_MU in meta else None  # NVFlare's FedProx
                run_config = config if mu is None else with_proximal_mu(config, mu)
                update = client_update(run_config, hooks, partition_id, server_round, unkeyed(task.params), x, y)
        except Exception as exc:
            files.write_failure(partition_id, f"round {server_round}: client {partition_id} failed: {_describe(exc)}")
            raise
        reply_meta = {FLMetaKey.NUM_STEPS_CURRENT_ROUND: update.num_examples}
        if update.control_delta is not None:
            reply_meta[AlgorithmConstants.SCAFFOLD_CTRL_DIFF] = keyed(update.control_delta)
        if isinstance(config.training.privacy, SharedChanges):  # NVFlare's filter takes the change
            sent, kind = (
                [w - g for w, g in zip(update.params, unkeyed(task.params), strict=True)],
                flare.ParamsType.DIFF,
            )
        else:
            sent, kind = update.params, flare.ParamsType.FULL
        flare.send(flare.FLModel(params=keyed(sent), params_type=kind, metrics=update.metrics, meta=reply_meta))


def main() -> None:
    """Join the NVFlare job as this site and serve it."""
    flare.init()
    spec = RunSpec.from_environment()
    serve(spec, partition_of(flare.get_site_name()), RunFiles(spec.workspace))


if __name__ == "__main__":
    main()

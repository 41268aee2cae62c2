"""PyTorch models (the ``torch`` extra): TorchClassifier and the shipped CNN example, on every backend.

The stated tolerance for the CNN example: the frameworks' global models equal the reference's
bit for bit after every round (0.0, measured here; training is deterministic on the CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from fltest.config.schema import ExperimentConfig, TrainingConfig
from fltest.config.strategies import STRATEGIES, example_strategy
from fltest.params import load_params
from fltest.results.files import read_jsonl
from fltest.runner import run_experiment
from tests.conftest import REPO, base_config
from tests.models import BATCHNORM_CNN, beside

pytestmark = pytest.mark.torch

TORCH_TOLERANCE = 0.0  # bit-identical: what the README states for the CNN example
EXAMPLE = REPO / "examples" / "digits_cnn.yaml"
TRAINING = TrainingConfig(rounds=1, local_epochs=2, batch_size=8, learning_rate=0.1)


@pytest.fixture
def example_cnn():
    """The shipped example's model module (examples/digits_cnn.py), imported as a run imports it."""
    pytest.importorskip(
        "torch", reason="the torch tier needs the torch extra: pip install -c constraints.txt -e '.[torch]'"
    )
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import digits_cnn

        yield digits_cnn
    finally:
        sys.path.remove(str(EXAMPLE.parent))
        sys.modules.pop("digits_cnn", None)


def _images(shape: tuple[int, ...], rows: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.integers(0, 256, size=(rows, *shape)).astype(np.float64) / 255.0, np.arange(rows) % 10


@pytest.mark.parametrize("shape", [(8, 8), (32, 32, 3)], ids=["digits-8x8", "cifar-32x32x3"])
def test_the_cnn_takes_images_channels_first_and_trains_deterministically(example_cnn, shape):
    features, labels = _images(shape)
    params = example_cnn.init_params(shape, 10, seed=1)
    channels = 1 if len(shape) == 2 else shape[2]
    assert params[0].shape == (16, channels, 3, 3) and params[-1].shape == (
        10,
    )  # channels first; the output layer last
    assert all(p.dtype == np.float64 for p in params)
    assert all(np.array_equal(a, b) for a, b in zip(params, example_cnn.init_params(shape, 10, seed=1)))
    first, again = (example_cnn.train(params, features, labels, TRAINING, seed=7) for _ in range(2))
    assert all(np.array_equal(a, b) for a, b in zip(first.params, again.params))  # the same seed: bit for bit
    assert first.metrics["steps"] == 10 and first.metrics["train_loss"] > 0
    other = example_cnn.train(params, features, labels, TRAINING, seed=8)
    assert not all(np.array_equal(a, b) for a, b in zip(first.params, other.params))  # another seed: other batches
    assert not np.array_equal(first.params[0], params[0])  # the input parameters are not the output's
    evaluation = example_cnn.evaluate(first.params, features, labels)
    assert evaluation.probabilities.shape == (40, 10) and np.allclose(evaluation.probabilities.sum(axis=1), 1.0)
    assert 0.0 <= evaluation.accuracy <= 1.0 and evaluation.loss > 0


def test_training_restores_the_process_s_torch_settings(example_cnn):
    import torch

    features, labels = _images((8, 8))
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    example_cnn.train(example_cnn.init_params((8, 8), 10, seed=1), features, labels, TRAINING, seed=7)
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
    assert torch.equal(torch.rand(1), expected_next)  # the caller's random stream is untouched


def test_parameters_of_another_network_are_refused_with_their_shapes(example_cnn):
    features, labels = _images((8, 8))
    params = example_cnn.init_params((8, 8), 10, seed=1)
    with pytest.raises(ValueError, match=r"the network's parameters are shaped .*\(16, 1, 3, 3\).*\(16, 3, 3, 3\)"):
        example_cnn.train(example_cnn.init_params((8, 8, 3), 10, seed=1), features, labels, TRAINING, seed=7)
    assert example_cnn.evaluate(params, features, labels).probabilities.shape == (40, 10)


@pytest.mark.ray
@pytest.mark.nvflare
def test_the_shipped_cnn_example_gives_the_reference_s_model_on_every_framework(tmp_path):
    pytest.importorskip("torch", reason="the torch tier needs the torch extra")
    result = subprocess.run(
        [sys.executable, "-m", "fltest.cli", "run", str(EXAMPLE)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    experiment = tmp_path / "results" / "digits-cnn"
    for run in ("reference", "flower", "nvflare"):
        summary = json.loads((experiment / run / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["rounds_completed"] == 5, summary
        assert summary["final"]["accuracy"] > 0.6, summary["final"]  # it learns (10 classes: chance is 0.1)
    comparison = json.loads((experiment / "comparison.json").read_text())
    assert all(row["max_param_diff_vs_reference"] <= TORCH_TOLERANCE for row in comparison["runs"][1:]), comparison
    rounds = {run: read_jsonl(experiment / run / "metrics.jsonl") for run in ("reference", "flower", "nvflare")}
    for run in ("flower", "nvflare"):
        assert [r["test"] for r in rounds[run]] == [
            r["test"] for r in rounds["reference"]
        ]  # every round's global model, alike
        for ours, theirs in zip(
            rounds[run], rounds["reference"], strict=True
        ):  # clients' means: summed in another order
            assert ours["train"] == pytest.approx(theirs["train"], rel=1e-12)
    final = np.load(experiment / "reference" / "model_final.npz")
    assert final["p0"].shape == (16, 1, 3, 3)  # the CNN's, on features kept 8x8


@pytest.mark.parametrize("name", STRATEGIES)
def test_a_cnn_with_batchnorm_runs_every_strategy_on_the_reference(tmp_path, monkeypatch, name):
    """The issue's case: the adaptive rules turned BatchNorm's 0-d ``num_batches_tracked`` into a numpy scalar, and
    the network's ``torch.from_numpy`` refused it in round 1 (``TypeError: expected np.ndarray (got numpy.float64)``)."""
    pytest.importorskip("torch", reason="the torch tier needs the torch extra")
    beside(tmp_path, monkeypatch, "batchnorm_cnn", BATCHNORM_CNN)
    data = base_config()
    data["training"].update(
        rounds=2,
        local_epochs=1,
        learning_rate=0.1,
        strategy=example_strategy(name),
    )
    data.update(name=f"batchnorm-{name}", clients=3, hooks=None, model={"module": "batchnorm_cnn"})
    comparison = run_experiment(ExperimentConfig.model_validate(data), tmp_path / "results")
    assert comparison["runs"][0]["status"] == "completed", comparison["runs"][0]
    final = load_params(tmp_path / "results" / data["name"] / "reference" / "model_final.npz")
    assert [p.shape for p in final][:7] == [
        (8, 1, 3, 3),
        (8,),
        (8,),
        (8,),
        (8,),
        (8,),
        (),
    ]  # BatchNorm's buffers, num_batches_tracked 0-d


@pytest.mark.nvflare
def test_the_torch_classifier_s_scaffold_client_is_nvflare_s_own_pytorch_client(example_cnn):
    """One SCAFFOLD round of a TorchClassifier (``c - c_i`` added to each gradient, then option II's ``c_i+``) against
    NVFlare 2.9's own PyTorch client helper (``nvflare.app_opt.pt.scaffold.PTScaffoldHelper``: ``-lr (c - c_i)`` added
    after each SGD step, then its ``terms_update``) in NVFlare's client loop, from the same model, controls and
    minibatches: the same model and control variate up to float32 rounding (measured: 1.8e-7 for both)."""
    pytest.importorskip("nvflare", reason="the nvflare tier needs the nvflare extra")
    import torch
    from nvflare.app_opt.pt.scaffold import PTScaffoldHelper

    from fltest.control_variates import next_control
    from fltest.model.batches import local_batches, local_step_count
    from fltest.model.torch_classifier import deterministic, torch_classifier_of

    features, labels = _images((8, 8))
    x = example_cnn.init_params((8, 8), 10, seed=1)
    rng = np.random.default_rng(2)
    server, local = ([rng.normal(0.0, 0.05, size=p.shape) for p in x] for _ in range(2))
    ours = example_cnn.train(
        x, features, labels, TRAINING, seed=7, correction=[c - c_i for c, c_i in zip(server, local)]
    ).params
    our_control = next_control(local, server, x, ours, local_step_count(len(labels), TRAINING), TRAINING.learning_rate)

    cpu, classifier = torch.device("cpu"), torch_classifier_of(example_cnn)
    network, start = (classifier.network_holding(x, (8, 8), cpu) for _ in range(2))
    names = list(network.state_dict())
    helper = PTScaffoldHelper()
    helper.init(network)
    helper.load_global_controls({name: torch.from_numpy(c) for name, c in zip(names, server)})
    helper.c_local.load_state_dict({name: torch.from_numpy(c_i).float() for name, c_i in zip(names, local)})
    c_global, c_local = helper.get_params()
    optimizer = torch.optim.SGD(network.parameters(), lr=TRAINING.learning_rate)
    inputs, targets = torch.from_numpy(features).float().unsqueeze(1), torch.from_numpy(labels)
    with deterministic(1, 7, cpu):
        for batch in local_batches(len(labels), TRAINING, 7):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(network(inputs[batch]), targets[batch]).backward()
            optimizer.step()
            helper.model_update(network, TRAINING.learning_rate, c_global, c_local)
        helper.terms_update(network, TRAINING.learning_rate, c_global, c_local, start)
    theirs = [t.detach().numpy().astype(np.float64) for t in network.state_dict().values()]
    their_control = [helper.c_local.state_dict()[name].numpy().astype(np.float64) for name in names]
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs)) < 1e-6
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(our_control, their_control)) < 1e-5
    moved = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(ours, example_cnn.train(x, features, labels, TRAINING, seed=7).params)
    )
    assert moved > 1e-2  # the correction changed the model by far more than the tolerance


GPU_PROBE = """
import json, os, ray
ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="ERROR")


def training_device_type(cuda_seen):
    import torch
    from fltest.model.torch_classifier import training_device  # as a Flower client imports it in its actor
    if cuda_seen:  # as on a machine with a GPU: PyTorch sees one (no CUDA call follows)
        torch.cuda.is_available = lambda: True
    return training_device().type


@ray.remote
class Client:
    def device(self, cuda_seen):
        return [training_device_type(cuda_seen), ray.get_runtime_context().get_accelerator_ids()["GPU"], os.environ.get("CUDA_VISIBLE_DEVICES")]


given, none = Client.options(num_gpus=0.5).remote(), Client.options(num_gpus=0).remote()
seen = {}
for cuda_seen in (False, True):
    seen[f"given{'-cuda' * cuda_seen}"] = ray.get(given.device.remote(cuda_seen))
    seen[f"none{'-cuda' * cuda_seen}"] = ray.get(none.device.remote(cuda_seen))
    seen[f"driver{'-cuda' * cuda_seen}"] = training_device_type(cuda_seen)  # where the server evaluates
print(json.dumps(seen))
ray.shutdown()
"""


@pytest.mark.ray
def test_a_client_given_a_gpu_share_trains_where_torch_sees_that_gpu(tmp_path):
    """Ray's (logical) GPU here: the share reaches the client as CUDA_VISIBLE_DEVICES; with no CUDA, the CPU. Where
    PyTorch sees a GPU (told so: none here), only the client given a share trains there; a client without one and
    the driver (the initial model, the server's evaluation: gpus.md) stay on the CPU."""
    pytest.importorskip("torch", reason="the torch tier needs the torch extra")
    import torch

    probe = subprocess.run([sys.executable, "-c", GPU_PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    expected = "cuda" if torch.cuda.is_available() else "cpu"  # these machines have no GPU: cpu
    assert seen["given"] == [expected, ["0"], "0"]
    assert seen["none"][:2] == ["cpu", []] and seen["driver"] == "cpu"  # no share, or no actor: the CPU
    assert seen["given-cuda"] == ["cuda", ["0"], "0"]
    assert seen["none-cuda"][:2] == ["cpu", []] and seen["driver-cuda"] == "cpu"


@pytest.mark.ray
def test_the_cnn_example_asking_ray_for_gpus_still_matches_the_reference(tmp_path):
    """total_gpus: 1 makes each Flower client ask Ray for half a GPU (Ray's logical GPU here); the run completes alike."""
    pytest.importorskip("torch", reason="the torch tier needs the torch extra")
    config = yaml.safe_load(EXAMPLE.read_text())
    config.update(total_gpus=1, runs=[run for run in config["runs"] if run["framework"] in ("reference", "flwr")])
    config["training"].update(rounds=2)
    for module in ("digits_cnn.py", "digits_hooks.py"):
        (tmp_path / module).write_text((EXAMPLE.parent / module).read_text())
    (tmp_path / "gpus.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = subprocess.run(
        [sys.executable, "-m", "fltest.cli", "run", "gpus.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    comparison = json.loads((tmp_path / "results" / "digits-cnn" / "comparison.json").read_text())
    assert [run["status"] for run in comparison["runs"]] == ["completed", "completed"]
    assert comparison["runs"][1]["max_param_diff_vs_reference"] <= TORCH_TOLERANCE

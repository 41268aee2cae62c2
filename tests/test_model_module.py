"""A user's own model (the model contract, fltest.model.contract) from a module beside the config, on every backend.

The module here trains a softmax layer whose weights have the images' own shape (8x8 pixels
by 10 classes): it works only if every backend hands it features shaped ``(n, 8, 8)``, as the
contract promises, not flat rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from fltest.params import load_params
from tests.conformance import TOLERANCE
from tests.user_folder import BACKENDS, REFERENCE, run_in, user_folder

FEDPROX = {"name": "fedprox", "mu": 0.25}  # MODEL's train reports the mu it gets (its to apply, as own-model.md says)
MODEL = '''
"""A softmax layer over 8x8 images, its weights shaped like them: (8, 8, classes)."""
import numpy as np
from fltest.model import Evaluation, LocalResult


def init_params(feature_shape, num_classes, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(0.0, 0.01, size=(*feature_shape, num_classes)), np.zeros(num_classes)]


def _probabilities(params, features):
    logits = np.tensordot(features, params[0], axes=([1, 2], [0, 1])) + params[1]  # needs (n, 8, 8)
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def train(params, features, labels, training, seed):
    weights, bias = params[0].copy(), params[1].copy()
    order = np.random.default_rng(seed).permutation(len(labels))
    for start in range(0, len(labels), training.batch_size):
        batch = order[start : start + training.batch_size]
        delta = _probabilities([weights, bias], features[batch])
        delta[np.arange(len(batch)), labels[batch]] -= 1.0
        weights -= training.learning_rate * np.tensordot(features[batch], delta, axes=([0], [0])) / len(batch)
        bias -= training.learning_rate * delta.mean(axis=0)
    return LocalResult([weights, bias], {"batches": float(-(-len(labels) // training.batch_size)), "mu": float(training.strategy.proximal_mu)})


def evaluate(params, features, labels):
    probabilities = _probabilities(params, features)
    loss = float(-np.mean(np.log(probabilities[np.arange(len(labels)), labels] + 1e-12)))
    return Evaluation(loss, float(np.mean(probabilities.argmax(axis=1) == labels)), probabilities, {"mean_confidence": float(probabilities.max(axis=1).mean())})
'''


def _with_model(folder, runs, body: str = MODEL, strategy: dict | None = None, **model):
    """The user folder of tests/user_folder.py, with ``my_model.py`` beside the config and named by it (and
    ``strategy`` as the training's, if given)."""
    config_path = user_folder(folder, runs)
    (folder / "my_model.py").write_text(body)
    config = yaml.safe_load((folder / config_path).read_text())
    config["model"] = {"module": "my_model", **model}
    if strategy:
        config["training"]["strategy"] = strategy
    (folder / config_path).write_text(yaml.safe_dump(config, sort_keys=False))
    return config_path


@pytest.mark.parametrize("run", BACKENDS)
def test_a_model_module_beside_the_config_trains_on_every_backend_with_shaped_features(tmp_path, run):
    """With FedProx, as own-model.md says: the module's train gets ``mu`` (``training.strategy.proximal_mu``) on
    every backend."""
    result = run_in(tmp_path, "run", str(_with_model(tmp_path, [REFERENCE, run], strategy=FEDPROX)))
    assert result.returncode == 0, result.stderr[-3000:]
    experiment = tmp_path / "results" / "user-folder"
    summary = json.loads((experiment / run["name"] / "summary.json").read_text())
    assert summary["status"] == "completed", summary["error"]
    assert summary["final"]["accuracy"] > 0.5 and "mean_confidence" in summary["final"]  # the model's own metric
    assert "macro_f1" in summary["final"]  # the hooks still see the model's probabilities
    final = load_params(experiment / run["name"] / "model_final.npz")
    assert [p.shape for p in final] == [(8, 8, 10), (10,)]  # the image-shaped weights the module made
    rounds = [json.loads(line) for line in (experiment / run["name"] / "metrics.jsonl").read_text().splitlines()]
    assert rounds[-1]["train"]["batches"] > 0  # the model's train metrics, averaged over clients
    assert rounds[-1]["train"]["mu"] == FEDPROX["mu"]
    comparison = json.loads((experiment / "comparison.json").read_text())
    row = next(r for r in comparison["runs"] if r["run"] == run["name"])
    assert row["max_param_diff_vs_reference"] <= TOLERANCE


def test_a_model_module_s_train_gets_mu_0_for_every_strategy_but_fedprox(tmp_path):
    result = run_in(tmp_path, "run", str(_with_model(tmp_path, [REFERENCE], strategy={"name": "fedavgm"})))
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = tmp_path / "results" / "user-folder" / REFERENCE["name"] / "metrics.jsonl"
    assert [json.loads(line)["train"].get("mu") for line in metrics.read_text().splitlines()[1:]] == [0.0, 0.0]


BROKEN_MODELS = {
    "no train function": (MODEL.replace("def train(", "def fit("), "model.module: my_model.train is missing or not a function"),
    "raises on import": ("import numpy\nRATE = 1 / 0\n", "model.module: module 'my_model' failed to import: "),
    "init_params raises": (MODEL.replace("    rng = np.random", "    rng = numpy.random"),
                           "model.module: my_model.init_params raised: "),
    "init_params returns no arrays": (MODEL.replace("    return [rng.normal", "    return 3 or [rng.normal"),
                                      "model.module: init_params must return a non-empty list of numeric numpy arrays, got int"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BROKEN_MODELS))
def test_a_broken_model_module_is_one_line_naming_the_file_and_exit_2(tmp_path, case):
    body, message = BROKEN_MODELS[case]
    result = run_in(tmp_path, "run", str(_with_model(tmp_path, [REFERENCE], body)))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"fltest: error: exp.yaml: {message}"), (
        lines
    )  # init_params: after the shards' progress lines
    assert not any("error" in line or "Traceback" in line for line in lines[:-1]), lines
    if case == "init_params raises":
        assert lines[-1].endswith(f"{tmp_path / 'my_model.py'}, line 8: NameError: name 'numpy' is not defined"), lines
    assert not (tmp_path / "results").exists()


RAISING_MODELS = {  # after round 1 the global bias is no longer 0: the function raises from round 2 on, or in round 1's evaluation
    "train": (MODEL.replace("    weights, bias = params[0].copy(), params[1].copy()\n",
                            "    weights, bias = params[0].copy(), params[1].copy()\n    if bias.any():\n        raise ValueError('the bias moved')\n"),
              "model.module: my_model.train raised on client 0 in round 2: {folder}/my_model.py, line 21: ValueError: the bias moved"),
    "evaluate": (MODEL.replace("    probabilities = _probabilities(params, features)\n",
                               "    probabilities = _probabilities(params, features)\n    if params[1].any():\n        raise ValueError('the bias moved')\n"),
                 "model.module: my_model.evaluate raised in round 1: {folder}/my_model.py, line 33: ValueError: the bias moved"),
}  # fmt: skip


@pytest.mark.parametrize("function", sorted(RAISING_MODELS))
def test_a_model_that_raises_during_the_run_fails_it_with_one_line_naming_the_module_and_the_round(tmp_path, function):
    body, message = RAISING_MODELS[function]
    result = run_in(tmp_path, "run", str(_with_model(tmp_path, [REFERENCE], body)))
    assert result.returncode == 1, result.stderr
    expected = message.format(folder=tmp_path)
    assert f"run reference failed: {expected}" in result.stderr and "Traceback" not in result.stderr, result.stderr
    summary = json.loads((tmp_path / "results" / "user-folder" / "reference" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == expected


def test_scaffold_with_a_model_whose_train_takes_no_correction_is_one_line_and_exit_2(tmp_path):
    config_path = tmp_path / _with_model(tmp_path, [REFERENCE])
    config = yaml.safe_load(config_path.read_text())
    config["training"]["strategy"] = "scaffold"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_in(tmp_path, "run", config_path.name)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        "fltest: error: exp.yaml: training.strategy: scaffold needs a model whose train takes "
        "correction= (c - c_i, added to every gradient: see fltest.model.contract); my_model.train "
        "takes none"
    )
    assert not (tmp_path / "results").exists()


def test_a_model_module_with_type_or_hidden_is_refused(tmp_path):
    result = run_in(tmp_path, "validate", str(_with_model(tmp_path, [REFERENCE], type="mlp", hidden=[8])))
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "fltest: error: exp.yaml: model.module: a model module replaces type and hidden; give one or the other"
    )


APP_FILES = """
import io, sys, zipfile
from pathlib import Path
from flwr.cli.build import build_fab_from_disk
from fltest.backends.flwr_deployment.app_dir import write_app_dir
from fltest.backends.flwr_deployment.run_config import shipped_initial_params
from fltest.model import initial_params, load_model
from fltest.runner import prepare
from fltest.validate import check_config
config = check_config(sys.argv[1])
shards = prepare(config)
initial = initial_params(load_model(config.model), shards.feature_shape, shards.num_classes, config.seed)
fab = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(write_app_dir(Path("app"), config, shards, initial))))
fab.extractall("fab")
sys.path.insert(0, "fab")  # as Flower puts the bundle on the ServerApp's path
shipped = shipped_initial_params()
assert [a.shape for a in shipped] == [a.shape for a in initial] and all((a == b).all() for a, b in zip(shipped, initial))
print("\\n".join(sorted(fab.namelist())))
"""


@pytest.mark.parametrize("layout", ["file", "package"])
def test_a_deployment_run_s_flower_app_carries_the_model_and_hooks_modules(tmp_path, layout):
    ca = tmp_path / "ca.crt"
    ca.write_text("not checked here\n")
    flower = {
        "name": "flower",
        "framework": "flwr",
        "options": {"mode": "deployment", "superlink": "h:1", "root_certificates": str(ca)},
    }
    config_path = _with_model(tmp_path, [REFERENCE, flower])
    if layout == "package":  # the module as a package of two files, with a stale __pycache__
        (tmp_path / "my_model").mkdir()
        (tmp_path / "my_model.py").rename(tmp_path / "my_model" / "core.py")
        (tmp_path / "my_model" / "__init__.py").write_text("from my_model.core import init_params, train, evaluate\n")
        (tmp_path / "my_model" / "__pycache__").mkdir()
        (tmp_path / "my_model" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"stale")
    assert run_in(tmp_path, "validate", str(config_path)).returncode == 0  # accepted: the app carries them
    env = {**os.environ, "HF_HOME": "hf-home", "HF_HUB_OFFLINE": "1"}
    built = subprocess.run(
        [sys.executable, "-c", APP_FILES, str(config_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    modules = {"file": ["my_model.py"], "package": ["my_model/__init__.py", "my_model/core.py"]}[layout]
    shipped = ["pyproject.toml", ".info/CONTENT", "my_hooks.py", "fltest_initial_model.py", *modules]
    assert built.stdout.split() == sorted(shipped)  # what Flower ships: the initial model the ServerApp starts from too


@pytest.mark.parametrize("layout", ["namespace package", "sourceless"])
def test_a_model_module_that_is_not_python_source_is_refused_for_a_deployment_run(tmp_path, layout):
    """The README: a module that is not Python source (here a namespace package, or a compiled .pyc alone) cannot
    travel in a Flower App: one line naming the file and field, exit 2."""
    import py_compile

    ca = tmp_path / "ca.crt"
    ca.write_text("not checked here\n")
    flower = {
        "name": "flower",
        "framework": "flwr",
        "options": {"mode": "deployment", "superlink": "h:1", "root_certificates": str(ca)},
    }
    config_path = _with_model(tmp_path, [REFERENCE, flower])
    config = yaml.safe_load((tmp_path / config_path).read_text())
    if layout == "namespace package":  # a folder with no __init__.py
        (tmp_path / "my_models").mkdir()
        (tmp_path / "my_model.py").rename(tmp_path / "my_models" / "softmax.py")
        config["model"]["module"] = "my_models.softmax"
        found = "(a namespace package)"
    else:  # what Python imports when only the compiled file is there
        py_compile.compile(str(tmp_path / "my_model.py"), cfile=str(tmp_path / "my_model.pyc"))
        (tmp_path / "my_model.py").unlink()
        found = f"({tmp_path / 'my_model.pyc'})"
    (tmp_path / config_path).write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_in(tmp_path, "validate", str(config_path))
    assert result.returncode == 2, result.stderr
    top = config["model"]["module"].partition(".")[0]
    assert result.stderr.strip().splitlines() == [
        f"fltest: error: exp.yaml: model.module: module {top!r} {found} is not a Python source file or package, "
        "the only code a Flower App carries"
    ]


MISSHAPEN_TRAINS = {  # own-model.md: train must return one array a parameter, each of the shape it was given
    "a transposed weight": ("return LocalResult([weights, bias],", "return LocalResult([weights.T, bias],", "[(10, 8, 8), (10,)]"),
    "a parameter missing": ("return LocalResult([weights, bias],", "return LocalResult([weights],", "[(8, 8, 10)]"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MISSHAPEN_TRAINS))
def test_a_train_returning_other_shapes_fails_the_run_naming_them(tmp_path, case):
    old, new, returned = MISSHAPEN_TRAINS[case]
    result = run_in(tmp_path, "run", str(_with_model(tmp_path, [REFERENCE], MODEL.replace(old, new))))
    assert result.returncode == 1, result.stderr
    expected = (
        f"model.module: my_model.train returned {returned} on client 0 in round 1, "
        "for parameters shaped [(8, 8, 10), (10,)]"
    )
    summary = json.loads((tmp_path / "results" / "user-folder" / "reference" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == expected, summary["error"]

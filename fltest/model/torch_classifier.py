"""Any PyTorch classifier as an FLTest model (the ``torch`` extra), trained deterministically on the CPU.

A user's model module builds the network and hands it to :class:`TorchClassifier`, whose three
methods are the contract's functions::

    from torch import nn
    from fltest.model.torch_classifier import TorchClassifier

    def network(input_shape, num_classes):
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))

    init_params, train, evaluate = TorchClassifier(network).contract()

The parameters FLTest ships are the network's ``state_dict()`` values in their order (buffers
such as BatchNorm's running statistics included), as float64 arrays. Images reach the network
channels first: features shaped ``(n, H, W)`` become ``(n, 1, H, W)``, ``(n, H, W, C)`` become
``(n, C, H, W)``; flat rows stay ``(n, d)``. The number of classes is read back from the last
parameter's first dimension, so the network must end in its output layer (``nn.Linear(..., num_classes)``).

Determinism: training and evaluation run with ``torch.use_deterministic_algorithms(True)`` on a
fixed number of CPU threads (one by default: a reduction split over more threads may round
differently), with PyTorch's random generator seeded from the round's seed for initialisation and
dropout, and minibatches from :func:`~fltest.model.batches.local_batches`. The process's own
settings are restored afterwards.

Device: a Flower client that Ray gave a GPU share (``total_gpus > 0``), or a ClientApp on a SuperNode
given a GPU, trains on that GPU, with cuDNN's deterministic kernels; everything else trains on the
CPU (:func:`training_device`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

from fltest.config.schema import TrainingConfig
from fltest.model.batches import local_batches
from fltest.model.contract import Evaluation, LocalResult
from fltest.model.devices import gpu_given
from fltest.params import Params

NetworkFactory = Callable[
    [tuple[int, ...], int], nn.Module
]  # (input shape, channels first; number of classes) -> network
OptimizerFactory = Callable[
    [list[nn.Parameter], float], torch.optim.Optimizer
]  # (parameters, learning rate) -> optimizer


def channels_first(shape: tuple[int, ...]) -> tuple[int, ...]:
    """One sample's feature shape as the network sees it: ``(H, W)`` -> ``(1, H, W)``, ``(H, W, C)`` -> ``(C, H, W)``."""
    if len(shape) == 2:
        return (1, *shape)
    if len(shape) == 3:
        return (shape[2], shape[0], shape[1])
    return tuple(shape)


def _inputs(features: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``features`` (float64, one sample's shape after the first axis) as a channels-first tensor of ``dtype`` on ``device``."""
    tensor = torch.from_numpy(np.ascontiguousarray(features)).to(device=device, dtype=dtype)
    if tensor.dim() == 3:
        return tensor.unsqueeze(1)
    if tensor.dim() == 4:
        return tensor.permute(0, 3, 1, 2).contiguous()
    return tensor


def training_device() -> torch.device:
    """The GPU this process was given, else the CPU.

    ``cuda`` where PyTorch sees a GPU and this process is either a Ray actor given a GPU share (a
    Flower simulation client of a run with ``total_gpus > 0``; Ray sets ``CUDA_VISIBLE_DEVICES`` to
    its GPU) or a ClientApp of a Flower SuperNode given a GPU (the kit sets
    :data:`~fltest.model.devices.CLIENT_DEVICE_VARIABLE` there); ``cpu`` everywhere else: the
    reference backend, NVFlare's clients, SuperNodes without a GPU, and a run with no GPUs.
    """
    if gpu_given():  # a SuperNode's ClientApp: its container was given the GPU
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ray = sys.modules.get("ray")  # a process that never imported Ray is no Ray actor
    if ray is None or not ray.is_initialized():
        return torch.device("cpu")
    context = ray.get_runtime_context()
    if context.get_actor_id() is None or not context.get_accelerator_ids().get("GPU"):
        return torch.device("cpu")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@contextlib.contextmanager
def deterministic(threads: int, seed: int, device: torch.device) -> Iterator[None]:
    """Deterministic algorithms on ``threads`` CPU threads, PyTorch's generators seeded by ``seed``; all restored after.

    On a GPU also cuDNN's deterministic kernels, and cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG``,
    which deterministic algorithms require there).
    """
    was_deterministic, was_threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    was_cudnn = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)
    try:
        with torch.random.fork_rng(devices=[torch.cuda.current_device()] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            yield
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(was_threads)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = was_cudnn


def _sgd(parameters: list[nn.Parameter], learning_rate: float) -> torch.optim.Optimizer:
    """Plain SGD, FLTest's default optimizer (the same update as the built-in numpy model)."""
    return torch.optim.SGD(parameters, lr=learning_rate)


class TorchClassifier:
    """A PyTorch classifier behind FLTest's model contract (:mod:`fltest.model.contract`).

    ``network(input_shape, num_classes)`` builds the network (``input_shape`` channels first, see
    :func:`channels_first`); ``optimizer(parameters, learning_rate)`` builds a fresh optimizer
    each round (plain SGD by default); ``dtype`` is the network's floating type; ``threads`` the
    CPU threads training uses.
    """

    def __init__(
        self,
        network: NetworkFactory,
        optimizer: OptimizerFactory = _sgd,
        dtype: torch.dtype = torch.float32,
        threads: int = 1,
    ) -> None:
        self.network = network
        self.optimizer = optimizer
        self.dtype = dtype
        self.threads = threads

    def contract(self) -> tuple[Callable[..., Params], Callable[..., LocalResult], Callable[..., Evaluation]]:
        """``(init_params, train, evaluate)``: what a model module binds at top level."""
        return self.init_params, self.train, self.evaluate

    def _build(
        self, input_shape: tuple[int, ...], num_classes: int, device: torch.device, dtype: torch.dtype | None = None
    ) -> nn.Module:
        return self.network(input_shape, num_classes).to(device=device, dtype=dtype or self.dtype)

    def _network_with(self, params: Params, features: np.ndarray, device: torch.device) -> nn.Module:
        """The network for ``features``' sample shape on ``device``, holding ``params``."""
        return self.network_holding(params, features.shape[1:], device)

    def network_holding(
        self, params: Params, sample_shape: tuple[int, ...], device: torch.device, dtype: torch.dtype | None = None
    ) -> nn.Module:
        """The network for samples shaped ``sample_shape`` (as FLTest gives them), holding ``params``, on ``device``,
        its floating parameters and buffers in ``dtype`` (the network's own by default)."""
        network = self._build(channels_first(tuple(sample_shape)), int(params[-1].shape[0]), device, dtype)
        state = network.state_dict()
        shapes = [tuple(tensor.shape) for tensor in state.values()]
        if shapes != [p.shape for p in params]:
            raise ValueError(
                f"the network's parameters are shaped {shapes}, the parameters given {[p.shape for p in params]}: "
                "does the network end in its output layer, sized by num_classes?"
            )
        values = {
            name: torch.from_numpy(p).to(device=device, dtype=tensor.dtype)
            for (name, tensor), p in zip(state.items(), params)
        }
        network.load_state_dict(values)
        return network

    def init_params(self, feature_shape: tuple[int, ...], num_classes: int, seed: int) -> Params:
        """The network's own initialisation (PyTorch's defaults), on the CPU, with PyTorch's generator seeded by ``seed``."""
        cpu = torch.device("cpu")  # the same initial model wherever the server runs
        with deterministic(self.threads, seed, cpu):
            network = self._build(channels_first(tuple(feature_shape)), num_classes, cpu)
        return _params_of(network)

    def train(
        self,
        params: Params,
        features: np.ndarray,
        labels: np.ndarray,
        training: TrainingConfig,
        seed: int,
        correction: Params | None = None,
    ) -> LocalResult:
        """Minibatch training from ``params`` with the optimizer, cross-entropy loss; metrics ``train_loss``, ``steps``.

        Before each optimizer step, with FedProx each parameter's gradient gains ``mu * (w - w_t)``; with
        SCAFFOLD, its entry of ``correction`` (``c - c_i``, in the network's dtype; buffers take none).
        """
        device = training_device()
        with deterministic(self.threads, seed, device):
            network = self._network_with(params, features, device)
            optimizer = self.optimizer(list(network.parameters()), training.learning_rate)
            inputs, targets = (
                _inputs(features, self.dtype, device),
                torch.from_numpy(labels.astype(np.int64)).to(device),
            )
            network.train()
            mu = training.strategy.proximal_mu
            start = [p.detach().clone() for p in network.parameters()]
            corrections = _corrections(network, correction, device)
            losses = []
            for batch in local_batches(len(labels), training, seed):
                index = torch.from_numpy(batch).to(device)
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(network(inputs[index]), targets[index])
                loss.backward()
                if mu:  # FedProx: the gradient of mu/2 ||w - w_t||^2 too
                    for parameter, initial in zip(network.parameters(), start):
                        parameter.grad.add_(parameter.detach() - initial, alpha=mu)
                for parameter, term in corrections:  # SCAFFOLD: y -= lr * (g - c_i + c)
                    parameter.grad.add_(term)
                optimizer.step()
                losses.append(loss.item())
        return LocalResult(
            params=_params_of(network), metrics={"train_loss": float(np.mean(losses)), "steps": float(len(losses))}
        )

    def evaluate(self, params: Params, features: np.ndarray, labels: np.ndarray) -> Evaluation:
        """Cross-entropy loss, accuracy and softmax probabilities of ``params`` on ``(features, labels)``."""
        device = training_device()
        with deterministic(self.threads, 0, device), torch.no_grad():
            network = self._network_with(params, features, device)
            network.eval()
            logits = network(_inputs(features, self.dtype, device)).to(device="cpu", dtype=torch.float64)
            targets = torch.from_numpy(labels.astype(np.int64))
            loss = float(nn.functional.cross_entropy(logits, targets))
            probabilities = torch.softmax(logits, dim=1).numpy()
        return Evaluation(
            loss=loss, accuracy=float(np.mean(probabilities.argmax(axis=1) == labels)), probabilities=probabilities
        )


def _corrections(
    network: nn.Module, correction: Params | None, device: torch.device
) -> list[tuple[nn.Parameter, torch.Tensor]]:
    """Each trainable parameter with its entry of SCAFFOLD's ``correction`` (aligned with ``state_dict()``), in its dtype."""
    if correction is None:
        return []
    by_name = dict(zip(network.state_dict(), correction, strict=True))
    return [
        (parameter, torch.from_numpy(np.asarray(by_name[name])).to(device=device, dtype=parameter.dtype))
        for name, parameter in network.named_parameters()
        if parameter.requires_grad
    ]


def torch_classifier_of(model: object) -> TorchClassifier | None:
    """The :class:`TorchClassifier` whose functions a model module binds (``init_params, train, evaluate =
    TorchClassifier(network).contract()``), or ``None`` for any other model."""
    owner = getattr(getattr(model, "train", None), "__self__", None)
    return owner if isinstance(owner, TorchClassifier) else None


def _params_of(network: nn.Module) -> Params:
    """The network's ``state_dict()`` values, in order, as float64 numpy arrays."""
    return [tensor.detach().cpu().numpy().astype(np.float64) for tensor in network.state_dict().values()]

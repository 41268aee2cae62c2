"""The per-client label distribution of a partition, drawn by Flower Datasets (PNG)."""

from __future__ import annotations

import warnings
from pathlib import Path

import datasets

from fltest.config.schema import ExperimentConfig

MAX_LEGEND_CLASSES = 20  # more classes than this: no legend (it would cover the bars)


def save_label_distribution(table: datasets.Dataset, config: ExperimentConfig, path: Path) -> Path:
    """Draw how many samples of each class every client holds (flwr-datasets' ``plot_label_distributions``) into ``path``.

    ``table`` is what the partitioner saw (:class:`fltest.data.split.Split`'s ``table``); the
    partition is drawn again from it with the same parameters and seed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from flwr_datasets.visualization import plot_label_distributions

    from fltest.data.partition import flwr_partitioner

    label = config.dataset.label
    partitioner = flwr_partitioner(config.partition, config.clients, label, config.seed)
    partitioner.dataset = table
    classes = len(set(table.unique(label)))
    width = min(4 + 0.12 * config.clients, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Dirichlet partitioner warns at every redraw
        fig, _, _ = plot_label_distributions(
            partitioner, label_name=label, plot_type="bar", size_unit="absolute", figsize=(width, 5),
            legend=classes <= MAX_LEGEND_CLASSES, legend_title=label,
            title=f"{config.name}: samples per class on each of {config.clients} clients ({config.partition.method}, seed {config.seed})",
        )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path

"""The per-client label distribution of a partition, drawn by Flower Datasets (PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import datasets

from fltest.config.schema import ExperimentConfig

if TYPE_CHECKING:
    from flwr_datasets.partitioner import Partitioner

MAX_LEGEND_CLASSES = 20  # more classes than this: no legend (it would cover the bars)


def save_label_distribution(partitioner: Partitioner, config: ExperimentConfig, path: Path) -> Path:
    """Draw how many samples of each class every client holds (flwr-datasets' ``plot_label_distributions``) into ``path``.

    ``partitioner`` is the one that drew the split (:class:`fltest.data.split.Split`'s), its draw kept.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from flwr_datasets.visualization import plot_label_distributions

    label = config.dataset.label
    classes = len(set(partitioner.dataset.unique(label)))
    width = min(4 + 0.12 * config.clients, 40)
    fig, _, _ = plot_label_distributions(
        partitioner,
        label_name=label,
        plot_type="bar",
        size_unit="absolute",
        figsize=(width, 5),
        legend=classes <= MAX_LEGEND_CLASSES,
        legend_title=label,
        verbose_labels=isinstance(
            partitioner.dataset.features[label], datasets.ClassLabel
        ),  # class names where the data has them
        title=f"{config.name}: samples per class on each of {config.clients} clients ({config.partition.method}, seed {config.seed})",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path

"""The security model's picture (who reaches what), drawn with matplotlib as a PNG at build time.

Two panels: the Flower federation (the SuperLink's one API on 127.0.0.1 of its own network namespace,
the Fleet proxy the only listener the SuperNodes reach) and the Ray cluster (its ports between the
nodes only, every node and driver behind the Ray token). An arrow is a connection: green and solid,
allowed, labelled with what guards it; red and dotted, refused, labelled with how.
"""

from __future__ import annotations

import io

OPERATOR = "Operator\n(Docker on the host;\nin the lab, SSH and\nroot on the node)"
OTHER = "Any other local user,\nor another host"
PROXY = "Fleet proxy (nginx)\nGET /health, POST /v1/fleet/*\nanything else: 403"
#: A panel: its title, its boxes (key: label, x, y, width, height, colour), an optional dashed frame
#: (label, x, y, width, height) and its arrows (from, to, label, allowed).
PANELS = [
    {
        "title": "Flower: the SuperLink (emulation and lab)",
        "boxes": {
            "operator": (OPERATOR, 0.1, 7.4, 4.2, 1.9, "#fde9c8"),
            "other": (OTHER, 0.1, 4.4, 4.2, 1.4, "#f4cccc"),
            "supernode": ("SuperNode\n(its own key pair,\nits own partition)", 0.1, 1.0, 4.2, 1.7, "#d9ead3"),
            "superlink": ("SuperLink\n127.0.0.1:9443\nFleet, Control, Runtime APIs", 8.6, 7.2, 4.6, 1.8, "#cfe2f3"),
            "proxy": (PROXY, 8.6, 2.6, 4.6, 1.8, "#cfe2f3"),
        },
        "frame": ("the SuperLink's network namespace", 8.2, 2.1, 5.4, 7.6),
        "arrows": [
            ("operator", "superlink", "Control: flwr, fltest run,\nin the namespace", True),
            ("other", "superlink", "no route: 127.0.0.1\nof another namespace", False),
            ("other", "proxy", "Control, Runtime: 403", False),
            ("supernode", "proxy", "Fleet: TLS checked with the CA,\na registered key\n(lab: cluster IP:8000)", True),
            ("proxy", "superlink", "TLS", True),
        ],
    },
    {
        "title": "Ray: the cluster (emulation and lab)",
        "boxes": {
            "operator": (OPERATOR, 0.1, 7.4, 4.2, 1.9, "#fde9c8"),
            "other": (OTHER, 0.1, 4.4, 4.2, 1.4, "#f4cccc"),
            "head": ("Ray head: GCS 6379,\nfltest run (the driver)", 8.6, 7.2, 4.6, 1.8, "#ead1dc"),
            "workers": ("Ray workers\n6380-6383, 8080,\n10002-10100", 8.6, 2.6, 4.6, 1.8, "#ead1dc"),
        },
        "frame": ("the cluster network (lab: ports open between the nodes only)", 8.2, 2.1, 5.4, 7.6),
        "arrows": [
            ("operator", "head", "fltest-deploy run, run.yml:\nfltest run in the head", True),
            ("other", "head", "no Ray token:\nrefused", False),
            ("workers", "head", "Ray token on every node\n(file 0400/0600, uid 10001)", True),
        ],
    },
]


def _edge(box: tuple, toward: tuple) -> tuple[float, float]:
    """The point on ``box``'s edge on the line from its centre to ``toward``'s centre."""
    _, x, y, w, h, _ = box
    cx, cy = x + w / 2, y + h / 2
    dx, dy = toward[1] + toward[3] / 2 - cx, toward[2] + toward[4] / 2 - cy
    scale = min(w / 2 / abs(dx) if dx else float("inf"), h / 2 / abs(dy) if dy else float("inf"))
    return cx + dx * scale, cy + dy * scale


def _panel(axes, panel: dict) -> None:
    """Draw one panel on ``axes``."""
    from matplotlib.patches import FancyBboxPatch

    axes.set_xlim(0, 13.8)
    axes.set_ylim(0.5, 10.4)
    axes.axis("off")
    axes.set_title(panel["title"], fontsize=11)
    label, x, y, w, h = panel["frame"]
    axes.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.1", fill=False, linestyle="--", color="#777"))
    axes.text(x + w / 2, y - 0.35, label, ha="center", fontsize=8, color="#555")
    boxes = panel["boxes"]
    for text, bx, by, bw, bh, colour in boxes.values():
        axes.add_patch(FancyBboxPatch((bx, by), bw, bh, boxstyle="round,pad=0.05", facecolor=colour, edgecolor="#333"))
        axes.text(bx + bw / 2, by + bh / 2, text, ha="center", va="center", fontsize=8.5)
    for start, end, text, allowed in panel["arrows"]:
        (x0, y0), (x1, y1) = _edge(boxes[start], boxes[end]), _edge(boxes[end], boxes[start])
        colour = "#2b7a2b" if allowed else "#b22222"
        style = {"arrowstyle": "-|>", "color": colour, "lw": 1.6, "linestyle": "-" if allowed else ":"}
        axes.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=style)
        label_box = {"facecolor": "white", "edgecolor": "none", "alpha": 0.9, "pad": 1}
        middle = ((x0 + x1) / 2, (y0 + y1) / 2)
        axes.text(*middle, text, ha="center", va="center", fontsize=7, color=colour, bbox=label_box)


def draw() -> bytes:
    """The picture as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, panels = pyplot.subplots(1, len(PANELS), figsize=(16, 6.2), dpi=90)
    for axes, panel in zip(panels, PANELS):
        _panel(axes, panel)
    figure.text(0.5, 0.01, "green, solid: allowed, and what guards it; red, dotted: refused", ha="center", fontsize=9)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    pyplot.close(figure)
    return buffer.getvalue()

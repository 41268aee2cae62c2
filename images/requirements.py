"""Print requirements of the FLTest image from pyproject.toml, one a line.

    python3 images/requirements.py pyproject.toml [all|venv|dashboard]

``venv``: the dependencies, installed in the image's virtual environment. ``dashboard``: the
``dashboard`` extra (Ray's ``default`` extra), installed apart in the image
(:data:`DASHBOARD_DIR` in images/fltest/Dockerfile) and put on the path only of a head started
with ``--dashboard`` (deploy/node/ray_start.py), so that every other Ray process stays minimal Ray.
``all`` (default): both, what images/fill-wheelhouse.sh downloads.
"""

import sys
import tomllib

DASHBOARD_EXTRA = "dashboard"

if __name__ == "__main__":
    with open(sys.argv[1], "rb") as file:
        project = tomllib.load(file)["project"]
    parts = {"venv": project["dependencies"], "dashboard": project["optional-dependencies"][DASHBOARD_EXTRA]}
    parts["all"] = parts["venv"] + parts["dashboard"]
    print("\n".join(parts[sys.argv[2] if len(sys.argv) > 2 else "all"]))

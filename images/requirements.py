"""Print requirements of the FLTest image from pyproject.toml, one a line.

    python3 images/requirements.py pyproject.toml [all|venv|dashboard]
    python3 images/requirements.py pyproject.toml extras [NAME[,NAME...]]

``venv``: the dependencies, installed in the image's virtual environment. ``dashboard``: the
``dashboard`` extra (Ray's ``default`` extra), installed apart in the image
(:data:`DASHBOARD_DIR` in images/fltest/Dockerfile) and put on the path only of a head started
with ``--dashboard`` (deploy/node/ray_start.py), so that every other Ray process stays minimal Ray.
``all`` (default): both, what images/fill-wheelhouse.sh downloads into ./wheelhouse.
``extras``: the named optional extras (e.g. ``torch``), added to the venv of an image variant
(``fltest-deploy build --extras torch``); no name prints nothing (the default image).
"""

import sys
import tomllib

DASHBOARD_EXTRA = "dashboard"

if __name__ == "__main__":
    with open(sys.argv[1], "rb") as file:
        project = tomllib.load(file)["project"]
    mode = sys.argv[2] if len(sys.argv) > 2 else "all"
    optional = project["optional-dependencies"]
    if mode == "extras":
        names = [name for name in (sys.argv[3] if len(sys.argv) > 3 else "").split(",") if name]
        unknown = [name for name in names if name not in optional or name == DASHBOARD_EXTRA]
        if unknown:
            sys.exit(f"requirements.py: unknown extra {', '.join(unknown)} (pyproject.toml has {', '.join(optional)})")
        sys.stdout.write("".join(f"{requirement}\n" for name in names for requirement in optional[name]))
    else:
        parts = {"venv": project["dependencies"], "dashboard": optional[DASHBOARD_EXTRA]}
        parts["all"] = parts["venv"] + parts["dashboard"]
        print("\n".join(parts[mode]))

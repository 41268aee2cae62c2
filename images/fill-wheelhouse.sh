#!/usr/bin/env bash
# Fill ./wheelhouse with every wheel the FLTest image needs, for Linux x86_64 / CPython 3.11,
# pinned by constraints.txt. Run on a host with PyPI access; copy the folder to an
# air-gapped lab and build the image there with no network.
# Offline first: when the wheelhouse already satisfies the requirements (resolved with
# --no-index), PyPI is not asked at all; otherwise pip fetches what is missing.
# Usage: images/fill-wheelhouse.sh [DEST]   (default: <repo>/wheelhouse)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$repo/wheelhouse}"
python="${PYTHON:-python3}"
mkdir -p "$dest"
mapfile -t requirements < <("$python" "$repo/images/requirements.py" "$repo/pyproject.toml" all)
download=("$python" -m pip download --quiet --dest "$dest" --constraint "$repo/constraints.txt"
	--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 --abi abi3 --abi none
	--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
	--platform manylinux2014_x86_64 --platform linux_x86_64 --platform any)
if "${download[@]}" --no-index --find-links "$dest" "${requirements[@]}" setuptools wheel >/dev/null 2>&1; then
	source="complete, PyPI not asked"
else
	"${download[@]}" "${requirements[@]}" setuptools wheel
	source="missing wheels fetched from PyPI"
fi
echo "wheelhouse: $dest ($(find "$dest" -name '*.whl' | wc -l) wheels, $(du -sh "$dest" | cut -f1); $source)"

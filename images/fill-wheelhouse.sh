#!/usr/bin/env bash
# Fill ./wheelhouse with every wheel the FLTest image needs, for Linux x86_64 and the images' CPython
# (deploy/kit.env: FLTEST_IMAGE_PYTHON), pinned by constraints.txt. Run on a host with PyPI access; copy the folder to an
# air-gapped lab and build the image there with no network.
# With --extras (e.g. torch): the wheels of those pyproject extras instead, into ./wheelhouse-extras,
# for an image variant (fltest-deploy build --extras torch); kept apart because they are gigabytes
# that the default image's build must not copy.
# Offline first: when the folder already satisfies the requirements (resolved with
# --no-index), PyPI is not asked at all; otherwise pip fetches what is missing.
# Usage: images/fill-wheelhouse.sh [--extras NAME[,NAME...]] [DEST]
#   (default DEST: <repo>/wheelhouse, or <repo>/wheelhouse-extras with --extras)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
extras=""
if [ "${1:-}" = --extras ]; then
	extras="${2:?--extras needs a name, e.g. torch}"
	shift 2
fi
if [ -n "$extras" ]; then
	dest="${1:-$repo/wheelhouse-extras}"
else
	dest="${1:-$repo/wheelhouse}"
fi
python="${PYTHON:-python3}"
mkdir -p "$dest"
if [ -n "$extras" ]; then
	mapfile -t requirements < <("$python" "$repo/images/requirements.py" "$repo/pyproject.toml" extras "$extras")
else
	mapfile -t requirements < <("$python" "$repo/images/requirements.py" "$repo/pyproject.toml" all)
	requirements+=(setuptools wheel)
fi
# The images' Python and C library: the kit's values (deploy/kit.env), of its Debian release.
kit_value() { sed -n "s/^$1=//p" "$repo/deploy/kit.env"; }
image_python="$(kit_value FLTEST_IMAGE_PYTHON)"
image_glibc="$(kit_value FLTEST_IMAGE_GLIBC)"
# Every manylinux tag that C library runs, newest first: pip takes the listed tags literally (CUDA's
# wheels are manylinux_2_27, 2_25, 2_18, ...).
platforms=()
for minor in $(seq "${image_glibc#2.}" -1 5); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64
	--platform linux_x86_64 --platform any)
abi="cp${image_python/./}"
download=("$python" -m pip download --quiet --dest "$dest" --constraint "$repo/constraints.txt"
	--only-binary=:all: --implementation cp --python-version "$image_python" --abi "$abi" --abi abi3 --abi none
	"${platforms[@]}")
if "${download[@]}" --no-index --find-links "$dest" "${requirements[@]}" >/dev/null 2>&1; then
	source="complete, PyPI not asked"
else
	"${download[@]}" "${requirements[@]}"
	source="missing wheels fetched from PyPI"
fi
echo "wheelhouse: $dest (CPython $image_python, $(find "$dest" -name '*.whl' | wc -l) wheels, $(du -sh "$dest" | cut -f1); $source)"

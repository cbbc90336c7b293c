#!/usr/bin/env bash
# The device check (benchmarks/gpu_check.py): on the lent GPU machine, from the repository root.
# Wheels for what that machine's image lacks travel in .whl
# (pip download ... --python-version 3.12 --only-binary=:all: -d .whl).
set -u
out=${1:-/tmp/gpu_out}
mkdir -p "$out"
python3 -m pip install -q --no-index --find-links .whl ipython ipywidgets plotly libcst ipykernel pytest jsonschema \
    >"$out/pip.log" 2>&1 || tail -5 "$out/pip.log"
export PYTHONPATH=$PWD TORCHINDUCTOR_CACHE_DIR=$PWD/.inductor-cache
python3 benchmarks/gpu_check.py --run "$out"

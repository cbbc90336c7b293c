#!/usr/bin/env bash
# The device check: the fix search, its trials over the copy budget (CUDA memory included) and Inductor's
# CUDA tests, on the lent GPU machine's own torch (2.11 there: the compatibility floor this suite keeps).
# Wheels for what that machine lacks travel in .whl (pip download ... --python-version 3.12 -d .whl).
# Usage (on the device machine, from the repository root): bash benchmarks/gpu_check.sh OUT_DIR
set -u
out=${1:-/tmp/gpu_out}
mkdir -p "$out"
python3 -m pip install -q --no-index --find-links .whl ipython ipywidgets plotly libcst ipykernel pytest jsonschema \
    >"$out/pip.log" 2>&1 || tail -5 "$out/pip.log"
export PYTHONPATH=$PWD TORCHINDUCTOR_CACHE_DIR=$PWD/.inductor-cache
python3 - >"$out/env.json" <<'PY'
import json, platform, torch
try:
    import triton; tv = triton.__version__
except Exception:
    tv = None
print(json.dumps({"torch": torch.__version__, "triton": tv, "python": platform.python_version(),
                  "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                  "cuda": torch.version.cuda}))
PY
cat "$out/env.json"
timeout 480 python3 -m pytest -q -p no:cacheprovider --junitxml="$out/junit.xml" \
    tests/test_big_state.py tests/test_search_speed.py tests/test_search_harm.py tests/test_config_fixes.py \
    tests/test_custom_op_autograd.py tests/test_inductor.py tests/test_rewrite_search.py tests/test_fix_search.py \
    >"$out/pytest.log" 2>&1
echo "pytest rc=$?"
grep -E "passed|failed|^FAILED|^ERROR" "$out/pytest.log" | tail -25

#!/usr/bin/env bash
# Run the GPU test set (tests/gpu) on this machine's CUDA GPUs in under 5 minutes and print
# a summary to paste into docs/benchmarks.md (date, GPUs, driver, torch, each test).
#
#   scripts/gpu-check.sh [extra pytest arguments]
#
# Needs accel installed with torch built for CUDA (pip install -e ".[dev,gpu]"; nvidia-ml-py
# for the telemetry test, triton for the compile test: both come with CUDA torch / [gpu]).
# Exit status: pytest's (0 all passed), or 2 when torch sees no CUDA GPU here.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
LIMIT=${GPU_CHECK_LIMIT:-290}

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-check: torch sees no CUDA GPU here; run this on a GPU machine (on CPU the set skips)" >&2
    exit 2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
timeout "$LIMIT" "$PYTHON" -m pytest tests/gpu -m gpu -p no:cacheprovider -q -rfEs \
    --junitxml="$out/gpu.xml" "$@"
rc=$?
elapsed=$(($(date +%s) - start))
if [ "$rc" -eq 124 ]; then
    echo "gpu-check: stopped after ${LIMIT}s: the set must finish in under 5 minutes" >&2
fi
echo
"$PYTHON" scripts/gpu_summary.py "$out/gpu.xml" "$elapsed" "$rc"
# CUDA checkpoint I/O against raw write+fsync and its peers (about a minute; its goals
# are reported, the exit status stays the test set's).
echo
timeout 150 "$PYTHON" benchmarks/bench_checkpoint.py --device cuda --mib 1024 --saves 3 \
    --rounds 1 --pause 0.2 || echo "gpu-check: the CUDA checkpoint benchmark missed a goal (above)"
exit "$rc"

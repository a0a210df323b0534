# What every GPU script of docs/gpu/ does first on the lent H200, sourced as
#   source "$(dirname "$0")/setup.sh" LOGNAME
# from the repository root: unbuffered Python, $OUT (the folder that comes back), the script's
# whole output teed into $OUT/LOGNAME, the carried jsonschema wheels (the image lacks them; the
# runtime's store needs them) and this checkout installed, then the GPU's name, driver and clock.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/$1") 2>&1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader

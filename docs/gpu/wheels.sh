#!/usr/bin/env bash
# Build .whl/, the wheels a GPU call carries (carry [".whl"]): what the device image lacks of
# optuna, mlflow, deap, scikit-optimize and jsonschema, for its Python 3.12, about 27 MB.
#   bash docs/gpu/wheels.sh        (here, on the CPU machine; then check: python docs/gpu/wheels_check.py)
# The image's packages (KINDS.md, "Packages:", read 2026-11-17) are left out, as are mlflow's UI
# bundle (mlflow/server/js) and the server-only packages below: the repository (34 MB) and the wheels
# must stay under the device's 64 MiB carry limit.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl && mkdir -p .whl
pip download -q optuna mlflow deap scikit-optimize jsonschema --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .whl
python3 - <<'PY'
import os, re, zipfile
IMAGE = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime
onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas
pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu
safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp""".split())
# Server, UI and CLI extras that the tracking store, the samplers and the CLI never import (checked
# by docs/gpu/wheels_check.py, which refuses them and runs a study and an MLflow run).
UNUSED = {"docker", "gunicorn", "huey", "graphene", "graphql-core", "graphql-relay", "moocore", "wcwidth",
          "prettytable", "skops", "flask-cors"}
# The full mlflow wheel holds every file of mlflow-skinny and mlflow-tracing (3.17.2, checked
# 2026-12-06): those two would only repeat 6 MB, and the repository (41 MB) plus the wheels must
# stay under 64 MiB.
UNUSED |= {"mlflow-skinny", "mlflow-tracing"}
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
for wheel in os.listdir(".whl"):
    name = norm(wheel.split("-")[0])
    if name in IMAGE or name in UNUSED or name.startswith("nvidia-") or name.startswith("jax-"):
        os.remove(os.path.join(".whl", wheel))
mlflow = next(w for w in os.listdir(".whl") if w.startswith("mlflow-") and not w.startswith("mlflow-skinny"))
src = os.path.join(".whl", mlflow)
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(src + ".tmp", "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        if not item.filename.startswith("mlflow/server/js/"):
            zout.writestr(item, zin.read(item.filename))
os.replace(src + ".tmp", src)
print(f"{len(os.listdir('.whl'))} wheels")
PY
du -sh .whl

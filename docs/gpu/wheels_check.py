"""Whether the wheels docs/gpu/wheels.sh leaves out are needed: import optuna, mlflow, deap and
scikit-optimize with those packages refused, then run a small Optuna study and an MLflow run on
SQLite, as the live studies do. Run it here (the CPU machine's venv) after wheels.sh."""
import importlib.abc
import sys
import tempfile

LEFT_OUT = {"docker", "gunicorn", "huey", "graphene", "graphql", "graphql_relay", "moocore", "wcwidth", "prettytable",
            "skops", "flask_cors"}


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in LEFT_OUT:
            raise ModuleNotFoundError(f"{name} is left out of .whl")


sys.meta_path.insert(0, Refuse())
import deap  # noqa: E402,F401
import mlflow  # noqa: E402
import optuna  # noqa: E402
import skopt  # noqa: E402,F401

folder = tempfile.mkdtemp()
mlflow.set_tracking_uri(f"sqlite:///{folder}/mlflow.db")
mlflow.set_experiment("check")
with mlflow.start_run():
    mlflow.log_metric("x", 1.0)
    with mlflow.start_run(nested=True):
        mlflow.log_param("p", 1)
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(storage=f"sqlite:///{folder}/optuna.db", sampler=optuna.samplers.TPESampler(seed=0))
study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
print("the wheels left out are not needed")

"""``tune --sanitize-top N``: refused in replay with one line; on a study's result (a replayed
study here, the GPU's verdicts from a real fake compute-sanitizer), an unsafe best trial is
relabelled ``unsafe`` in the result and its MLflow child, and the winner is the next safe one."""

from __future__ import annotations

import json

import sanitizer_fake
from study_support import WORKLOAD, tune_args

from flashtune.experiments.cli.main import main
from flashtune.experiments.study import measurers
from flashtune.experiments.study.runner import Study, run_study
from flashtune.experiments.study.sanitize_top import sanitize_top
from flashtune.kernels.space import validate_config
from flashtune.objectives import sanitize as sz
from flashtune.objectives.types import Status
from flashtune.runtime.storage.sanitized import SanitizedCache


def test_replay_refuses_sanitize_top_in_one_line(stores, replay_dir, capsys) -> None:
    assert main(tune_args(stores, replay_dir, "--sanitize-top", "3")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["flashtune tune: error: --sanitize-top needs a live study on a GPU (compute-sanitizer runs the "
                   "kernel); this one replays recorded tables"]


def test_an_unsafe_best_is_relabelled_and_the_next_safe_one_wins(stores, replay_dir, h200, mlflow_client,
                                                                  tmp_path) -> None:
    source = measurers.open_replay(h200, [WORKLOAD], replay_dir)
    study = Study(name="sanitized", workload=WORKLOAD, hardware=h200, strategy="random", trials=10, seed=1)
    result = run_study(study, source.evaluator(WORKLOAD), tracking_uri=stores["tracking_uri"],
                       storage_url=stores["storage"], fingerprint=source.fingerprint, versions=source.versions,
                       constraint=source.constraint(WORKLOAD))
    best = result.best
    report = ("========= COMPUTE-SANITIZER\n========= Invalid __shared__ write of size 16 bytes\n"
              "=========     at _attn_fwd+0x40 in _flash_fwd.py:99\n========= ERROR SUMMARY: 1 error\n")
    fake = sanitizer_fake.install(tmp_path / "bin", report=report, exitcode=sz.ERROR_EXITCODE,
                           unsafe_if=json.dumps(validate_config(best.config).to_dict(), sort_keys=True))
    lines: list[str] = []
    updated, verdicts = sanitize_top(result, 3, gpu=h200, tracking_uri=stores["tracking_uri"],
                                     cache=SanitizedCache(tmp_path / "v.json"), sanitizer=str(fake), say=lines.append)
    assert len(verdicts) == 3 and not verdicts[0].safe and all(v.safe for v in verdicts[1:])
    assert updated.best.number != best.number and updated.best.measurement.ok
    relabelled = next(t for t in updated.trials if t.number == best.number)
    assert relabelled.measurement.status is Status.UNSAFE
    assert relabelled.measurement.error == "compute-sanitizer memcheck: Invalid __shared__ write of size 16 bytes " \
                                           "at _attn_fwd+0x40 in _flash_fwd.py:99"
    assert lines[0] == f"sanitized trial {best.number} ({best.cost_ms:.4f} ms): unsafe: {relabelled.measurement.error}"
    (child,) = mlflow_client.search_runs([result.experiment_id],
                                         filter_string=f"tags.study = 'sanitized' AND tags.trial = '{best.number}'")
    assert child.info.status == "FAILED" and child.data.tags["status"] == "unsafe"
    assert child.data.tags["sanitizer.tool"] == "memcheck" and child.data.metrics["ok"] == 0.0
    assert json.loads(child.data.tags["measurement"])["status"] == "unsafe"

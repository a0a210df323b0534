"""MLflow for a study that many workers run at once: one parent, one child per trial.

MLflow has no compare-and-set, so agreement comes from rules every worker applies to
what it reads back after its own write:

- the parent: a worker that finds none creates one, waits for racing creations to land
  (``SETTLE_S``), then everyone uses the *earliest* parent (start time, then run id) and
  a worker whose own parent lost deletes it. A worker that comes later finds the winner.
  (Start times are the workers' clocks: hosts must agree within ``SETTLE_S``; NTP does.)
- a child: written by the worker that measured the trial, right after the trial is
  stored; then that worker lists the finished children of the trial number and keeps
  the one with the smallest run id. Whichever of two writers finishes last sees both,
  so exactly one survives whatever the interleaving.
- reconciliation on start writes the children a killed worker never wrote, and deletes
  half-written (RUNNING) children only when their writer is a dead process on this host:
  a live worker may be writing one right now.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flashtune.experiments.study.storage import _process_alive
from flashtune.experiments.tracking.tracker import PARENT_TAG, ROLE_TAG, STUDY_TAG, TRIAL_TAG, WORKER_TAG, _int_or_none
from flashtune.search.loop import Trial

if TYPE_CHECKING:
    from flashtune.experiments.tracking.tracker import MlflowTracker

#: Seconds a new parent waits for racing workers' parents to be visible before choosing.
SETTLE_S = 1.0


def find_or_create_parent(tracker: MlflowTracker, tags: Mapping[str, str]) -> str:
    """The run id of the study's one parent run, created if none exists (race-safe)."""
    client = tracker.client
    parents = _parents(tracker)
    if not parents:
        mine = client.create_run(tracker.experiment_id, tags=dict(tags), run_name=tracker.study_name).info.run_id
        time.sleep(SETTLE_S)
        parents = _parents(tracker)
        winner = _earliest(parents)
        if winner != mine:
            client.delete_run(mine)  # nothing was logged to it yet
        return winner
    winner = _earliest(parents)
    for key, value in tags.items():
        client.set_tag(winner, key, value)
    return winner


def reconcile(tracker: MlflowTracker, trials: Sequence[Trial]) -> None:
    """Write the children that the stored ``trials`` lack; drop dead writers' half-runs."""
    client = tracker.client
    by_number: dict[int, list[Any]] = {}
    for run in tracker._list_children():
        number = _int_or_none(run.data.tags.get(TRIAL_TAG))
        if run.info.status in ("FINISHED", "FAILED"):
            by_number.setdefault(number, []).append(run)
        elif _writer_dead(run.data.tags.get(WORKER_TAG, "")):
            client.delete_run(run.info.run_id)  # killed mid-write: written again below
        else:
            by_number.setdefault(number, []).append(run)  # a live worker is writing it
    for trial in trials:
        runs = by_number.get(trial.number, [])
        if not runs:
            tracker._children[trial.number] = tracker._write_child(trial)
            dedupe_child(tracker, trial.number)
        else:
            finished = [r for r in runs if r.info.status in ("FINISHED", "FAILED")]
            if len(finished) > 1:
                dedupe_child(tracker, trial.number)
            elif finished:
                tracker._children[trial.number] = finished[0].info.run_id
        tracker._note_best(trial)


def dedupe_child(tracker: MlflowTracker, number: int) -> None:
    """Keep one finished child of trial ``number``: the smallest run id (every worker agrees)."""
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.{PARENT_TAG} = '{tracker.parent_run_id}' AND tags.{TRIAL_TAG} = '{number}'",
        max_results=100,
    )
    finished = sorted(r.info.run_id for r in runs if r.info.status in ("FINISHED", "FAILED"))
    if not finished:
        return
    for run_id in finished[1:]:
        tracker.client.delete_run(run_id)
    tracker._children[number] = finished[0]


def _parents(tracker: MlflowTracker) -> list[Any]:
    return tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.{ROLE_TAG} = 'study' AND tags.{STUDY_TAG} = '{tracker.study_name}'",
        max_results=100,
    )


def _earliest(parents: Sequence[Any]) -> str:
    return min(parents, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id


def _writer_dead(worker: str) -> bool:
    """Whether ``host:pid`` names a process of this host that no longer runs."""
    host, _, pid = worker.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not _process_alive(int(pid))

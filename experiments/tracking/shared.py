"""MLflow for a study that many workers run at once: one parent, one child per trial.

MLflow has no compare-and-set, so agreement comes from rules every worker applies to
what it reads back after its own write:

- the parent: on one host, finding or creating it is serialized by a lock file
  (``parent_lock``), so the workers of one host never create two: the first creates
  it, the others find it. Only workers of *different* hosts can still race: a worker
  that created one waits for racing creations to land (``SETTLE_S``), then everyone
  uses the *earliest* parent (start time, then run id) and a worker whose own parent
  lost deletes it. (Start times are the workers' clocks: hosts must agree within
  ``SETTLE_S``; NTP does.) The lock is needed because a creation's start time is read
  before its insert commits: three workers of one host whose inserts waited on SQLite's
  write lock saw different earliest parents, and one deleted the parent another used.
- a child: written by the worker that measured the trial, right after the trial is
  stored; then that worker lists the finished children of the trial number and keeps
  the one with the smallest run id. Whichever of two writers finishes last sees both,
  so exactly one survives whatever the interleaving.
- reconciliation on start writes the children a killed worker never wrote, and deletes
  half-written (RUNNING) children only when their writer is a dead process on this host:
  a live worker may be writing one right now.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from flashtune.experiments.localhost import process_alive
from flashtune.experiments.tracking.tags import PARENT_TAG, ROLE_TAG, STUDY_TAG, TRIAL_TAG, WORKER_TAG, int_or_none
from flashtune.runtime.storage.file_lock import exclusive_lock
from flashtune.search.loop import Trial

_log = logging.getLogger(__name__)

#: Seconds a new parent waits for racing workers' parents to be visible before choosing.
SETTLE_S = 1.0


class SharedTracking:
    """What ``MlflowTracker`` does differently when many workers track one study (a mixin:
    it uses the tracker's client, experiment, parent run and children)."""

    client: Any
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    study_name: str
    _children: dict[int, str]

    def _shared_parent(self, tags: Mapping[str, str]) -> str:
        """The run id of the study's one parent run, created if none exists (race-safe)."""
        client = self.client
        # Held through the settle too: this host's other workers then only ever see the winner.
        with parent_lock(self.tracking_uri, self.experiment_id, self.study_name):
            parents = self._shared_parents()
            if not parents:
                mine = client.create_run(self.experiment_id, tags=dict(tags), run_name=self.study_name).info.run_id
                time.sleep(SETTLE_S)  # a worker of another host may have created one meanwhile
                winner = _earliest(self._shared_parents())
                if winner != mine:
                    client.delete_run(mine)  # nothing was logged to it yet
                return winner
        winner = _earliest(parents)
        for key, value in tags.items():
            client.set_tag(winner, key, value)
        return winner


    def _shared_reconcile(self, trials: Sequence[Trial]) -> None:
        """Write the children that the stored ``trials`` lack; drop dead writers' half-runs."""
        client = self.client
        by_number: dict[int, list[Any]] = {}
        for run in self._list_children():
            number = int_or_none(run.data.tags.get(TRIAL_TAG))
            if run.info.status in ("FINISHED", "FAILED"):
                by_number.setdefault(number, []).append(run)
            elif _writer_dead(run.data.tags.get(WORKER_TAG, "")):
                client.delete_run(run.info.run_id)  # killed mid-write: written again below
            else:
                by_number.setdefault(number, []).append(run)  # a live worker is writing it
        for trial in trials:
            runs = by_number.get(trial.number, [])
            contradicting = [r for r in runs if r.info.status in ("FINISHED", "FAILED") and not _holds(r, trial)]
            if contradicting:
                # A journal cut before the restore from MLflow existed gave this number to another
                # config: named, and replaced by the trial's own child (MLflow's soft delete).
                _log.warning("study %r: MLflow run(s) %s hold trial %d with %s, but the study stored trial %d "
                             "with %s: deleted (MLflow keeps them restorable) and the trial's own child written",
                             self.study_name, ", ".join(r.info.run_id for r in contradicting), trial.number,
                             dict(contradicting[0].data.params), trial.number, dict(trial.config.items()))
                for run in contradicting:
                    client.delete_run(run.info.run_id)
                runs = [r for r in runs if r not in contradicting]
            if not runs:
                self._children[trial.number] = self._write_child(trial)
                self._shared_dedupe_child(trial.number)
            else:
                finished = [r for r in runs if r.info.status in ("FINISHED", "FAILED")]
                if len(finished) > 1:
                    self._shared_dedupe_child(trial.number)
                elif finished:
                    self._children[trial.number] = finished[0].info.run_id
            self._note_best(trial)


    def _shared_dedupe_child(self, number: int) -> None:
        """Keep one finished child of trial ``number``: the smallest run id (every worker agrees)."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.{PARENT_TAG} = '{self.parent_run_id}' AND tags.{TRIAL_TAG} = '{number}'",
            max_results=100,
        )
        finished = sorted(r.info.run_id for r in runs if r.info.status in ("FINISHED", "FAILED"))
        if not finished:
            return
        for run_id in finished[1:]:
            self.client.delete_run(run_id)
        self._children[number] = finished[0]


    def _shared_parents(self) -> list[Any]:
        return self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.{ROLE_TAG} = 'study' AND tags.{STUDY_TAG} = '{self.study_name}'",
            max_results=100,
        )


def parent_lock(tracking_uri: str, experiment_id: str, study_name: str) -> AbstractContextManager[None]:
    """This host's lock on finding or creating ``study_name``'s parent: a file in the temp
    folder, one per (store, experiment, study); a dead worker's is released by the kernel."""
    key = hashlib.sha256(f"{tracking_uri}\0{experiment_id}\0{study_name}".encode()).hexdigest()[:16]
    return exclusive_lock(Path(tempfile.gettempdir()) / f"flashtune-parent-{key}.lock")


def _holds(run: Any, trial: Trial) -> bool:
    """Whether the child ``run`` holds ``trial``'s config (its params, as MLflow stores them)."""
    return all(run.data.params.get(k) == str(v) for k, v in trial.config.items())


def _earliest(parents: Sequence[Any]) -> str:
    return min(parents, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id


def _writer_dead(worker: str) -> bool:
    """Whether ``host:pid`` names a process of this host that no longer runs."""
    host, _, pid = worker.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not process_alive(int(pid))

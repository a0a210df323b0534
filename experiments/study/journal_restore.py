"""Put back the trials a cut journal lost, from the study's MLflow children.

A cut journal (a full disk, a truncated copy) keeps every whole record before the cut
(``journal.cut_partial_tail``), but the records past it are gone: trials measured to the
end, whose MLflow children were written right after them. Without this, the resumed study
measured them again (or never), and its new trials took the lost ones' numbers, so MLflow
children contradicted the trials at their numbers.

A child is written only after its trial's measurement and final state are in the journal,
so a *finished* child whose trial the journal does not hold (its number missing, still
RUNNING without a measurement, or another config there) is a trial the journal lost. On
every start of a journal study, before any trial is asked, each such trial is put back:

* at its number when the journal ends before it (the number is reached with FAIL
  placeholders released as ``lost in a cut``, which no history counts), or on the RUNNING
  trial of its config whose finishing records were cut;
* otherwise (an earlier resume gave its number to another config) after the last trial,
  and its child is retagged with the new number, so children still equal trials;
* unless the study measured its config again at another number: then the child is a
  second record of that trial, named in a warning and deleted (MLflow's soft delete).

MLflow is read *before* the journal's lock is taken and the journal read: every finished
child seen then has its trial in the journal, unless the journal lost it. The lock is held
while the trials are put back, so the first worker to start re-adds them and the others
see them. The reading of MLflow is the SQLite repair's (``sqlite_repair.mlflow_children``).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from flashtune.experiments.study.ledger import RELEASED_ATTR, TrialStore
from flashtune.experiments.study.sqlite_repair import mlflow_children, mlflow_study
from flashtune.experiments.study.storage import CONFIG_ATTR, ELAPSED_ATTR, MEASUREMENT_ATTR
from flashtune.experiments.tracking.tags import TRIAL_TAG
from flashtune.kernels.config import Config

_log = logging.getLogger(__name__)

#: Why a placeholder trial is released (``ledger.RELEASED_ATTR``): a number the cut took.
LOST_REASON = "lost in a cut of the journal"


@dataclass(frozen=True)
class Restored:
    """What :func:`restore_from_mlflow` put back."""

    at_number: tuple[int, ...] = ()  # trials put back at their own numbers
    renumbered: tuple[tuple[int, int], ...] = ()  # (the child's number, the new number)
    stale: tuple[int, ...] = ()  # numbers of children deleted: their config was measured at another number

    def __bool__(self) -> bool:
        return bool(self.at_number or self.renumbered)

    def summary(self, study: str, journal: str) -> str:
        moved = "".join(f"; {old} as {new} (its number holds another config now)" for old, new in self.renumbered)
        numbers = ", ".join(map(str, self.at_number)) or "none"
        return (f"study {study!r}: {len(self.at_number) + len(self.renumbered)} trials the journal {journal} lost "
                f"were put back from their MLflow children: at their numbers {numbers}{moved}")


def restore_from_mlflow(store: TrialStore, journal: str, tracking_uri: str) -> Restored:
    """Put back the trials of ``store``'s study that the journal lost and MLflow holds.

    Args:
        store: the study, opened in the journal storage of ``journal``.
        journal: the journal file's path (whose lock is taken).
        tracking_uri: the MLflow tracking URI the study used.

    Returns:
        What was put back (empty when nothing was lost, or MLflow holds no run of the study).
    """
    import optuna

    from flashtune.experiments.study.journal import journal_lock  # imports optuna (about 1 s): only for a journal

    client, parent = mlflow_study(tracking_uri, store.study_name, store.identity)
    if parent is None:
        return Restored()
    # Read before the journal (see the module's docstring): a live worker's children are
    # written after its trials, so none of them looks lost.
    children = mlflow_children(client, parent, tracking_uri, finished_only=True)
    if not children:
        return Restored()
    TrialState = optuna.trial.TrialState
    storage, study_id = store.storage, store.study_id
    at_number: list[int] = []
    elsewhere: list[int] = []
    stale: list[int] = []
    with journal_lock(journal):
        stored = {t.number: t for t in storage.get_all_trials(study_id, deepcopy=False)}
        measured = {Config.from_dict(t.user_attrs[CONFIG_ATTR]) for t in stored.values()
                    if MEASUREMENT_ATTR in t.user_attrs and CONFIG_ATTR in t.user_attrs}
        count = len(stored)
        for number in sorted(children):
            trial = children[number].trial
            frozen = stored.get(number)
            if frozen is not None:
                raw = frozen.user_attrs.get(CONFIG_ATTR)
                same = raw is not None and Config.from_dict(raw) == trial.config
                if same and MEASUREMENT_ATTR in frozen.user_attrs:
                    continue  # held whole
                if same and frozen.state == TrialState.RUNNING:
                    # Its finishing records were cut: finish it as its worker did.
                    storage.set_trial_user_attr(frozen._trial_id, ELAPSED_ATTR, trial.elapsed_s)
                    storage.set_trial_user_attr(frozen._trial_id, MEASUREMENT_ATTR, trial.measurement.to_dict())
                    store.set_final_state(frozen._trial_id, trial.measurement)
                    measured.add(trial.config)
                    at_number.append(number)
                    continue
            if trial.config in measured:
                stale.append(number)  # measured again at another number: that trial's child says it
                continue
            if frozen is not None:
                elsewhere.append(number)
                continue
            while count < number:  # numbers the cut took that no child holds (released claims, ...)
                storage.create_new_trial(study_id, template_trial=optuna.trial.create_trial(
                    state=TrialState.FAIL, user_attrs={RELEASED_ATTR: LOST_REASON}))
                count += 1
            store.add_recorded(trial)
            count += 1
            measured.add(trial.config)
            at_number.append(number)
        renumbered = []
        for number in elsewhere:
            child = children[number]
            store.add_recorded(dataclasses.replace(child.trial, number=count))
            measured.add(child.trial.config)
            renumbered.append((number, count))
            count += 1
    for old, new in renumbered:  # after the journal's lock: MLflow may be slow
        client.set_tag(children[old].run_id, TRIAL_TAG, str(new))
        client.update_run(children[old].run_id, name=f"trial {new}")
    if stale:
        runs = ", ".join(f"{children[n].run_id} (trial {n})" for n in stale)
        _log.warning("study %r: MLflow children %s hold configs the study measured at other numbers after a cut of "
                     "the journal %s: deleted (MLflow keeps them restorable); the trials' own children say them",
                     store.study_name, runs, journal)
        for number in stale:
            client.delete_run(children[number].run_id)
    done = Restored(tuple(at_number), tuple(renumbered), tuple(stale))
    if done:
        _log.warning("%s", done.summary(store.study_name, journal))
    return done

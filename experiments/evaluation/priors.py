"""Priors for a study: read from where another GPU or workload left them, re-checked here.

``flashtune tune --prior-from SOURCE`` (repeatable) names where priors come from:

- ``mlflow:RUN_ID``: one study's trials (its parent run) in the tracking store;
- ``mlflow-experiment:NAME``: every study of a GPU model's experiment (``h200``,
  ``NVIDIA H200`` or ``flashtune/NVIDIA H200``);
- ``store:PATH``: a tuned-config store file (``flashtune.runtime.storage.store``);
- ``table:PATH``: a recorded table (``flashtune sweep``), or a folder of them;
- ``baselines``: the hardware feature library's configs for the target's architecture
  (``flashtune.runtime.dispatching.baselines``), what a study gets when no source has data.

Every prior is a :class:`~flashtune.objectives.types.Measurement` with ``source="prior"``,
the fingerprint and workload it was measured on, and its source's label in
``versions["prior_source"]``. Before a study sees them they are re-checked on the
*target*: :func:`recheck` runs the static feasibility model with the target's
``HardwareSpec`` and workload.

Infeasible priors are dropped, not told as failures. The target's search space is built
with the same check, so no strategy can ask those configs anyway; told as failures
they would only add an "avoid" mark where nothing can be asked, and a model that
learned from them would take the target's shared-memory limit for a slow region. What
was dropped is counted and listed (:class:`PriorSet`), so the study can say so.

When no source gives a single usable prior for the target, the baselines are used
instead (:func:`load_for`), and the study says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flashtune.experiments.evaluation import prior_mlflow
from flashtune.experiments.evaluation.prior_files import SOURCE_KEY, read_store, read_tables
from flashtune.experiments.tracking.tracker import DEFAULT_TRACKING_URI
from flashtune.kernels.config import Config
from flashtune.kernels.space import validate_config
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.types import Measurement, Workload
from flashtune.runtime.dispatching.baselines import baseline_priors
from flashtune.search.priors import PriorBook

KINDS = ("mlflow", "mlflow-experiment", "store", "table", "baselines")

#: MLflow tags: on each trial whose config the priors held, and on the study's parent.
TRIAL_SOURCE_TAG = "flashtune.prior_source"
TRIAL_RANK_TAG = "flashtune.prior_rank"
PARENT_SOURCES_TAG = "flashtune.prior_sources"
PARENT_TOLD_TAG = "flashtune.priors_told"
#: MLflow caps a tag value (5000 characters in some stores): keep well under it.
_TAG_CHARS = 4000


@dataclass(frozen=True)
class PriorSpec:
    """One ``--prior-from`` source: its kind and what it names (a run id, a name, a path)."""

    kind: str
    value: str = ""

    @property
    def label(self) -> str:
        """How the source is written on the command line and recorded in MLflow."""
        return self.kind if self.kind == "baselines" else f"{self.kind}:{self.value}"


#: How each kind of source is written (``flashtune export`` reads ``optuna:`` sources too).
FORMS = {"mlflow": "mlflow:RUN_ID", "mlflow-experiment": "mlflow-experiment:NAME", "optuna": "optuna:STUDY_NAME",
         "store": "store:PATH", "table": "table:PATH", "baselines": "baselines"}


def parse_source(text: str, *, kinds: Sequence[str] = KINDS, option: str = "--prior-from") -> PriorSpec:
    """Parse ``KIND:VALUE`` (or ``baselines``, when it is one of ``kinds``).

    Args:
        text: the source as written.
        kinds: the kinds accepted, in the order the error message lists them.
        option: what the message calls the source (the option or argument it was given as).

    Raises:
        ValueError: an unknown kind or a missing value, naming the forms accepted.
    """
    text = text.strip()
    if text == "baselines" and "baselines" in kinds:
        return PriorSpec("baselines")
    kind, sep, value = text.partition(":")
    if not sep or kind not in kinds or kind == "baselines" or not value.strip():
        forms = [FORMS[k] for k in kinds]
        listed = f"{', '.join(forms[:-1])} or {forms[-1]}" if len(forms) > 1 else forms[0]
        raise ValueError(f"{option} {text!r}: use {listed}")
    return PriorSpec(kind, value.strip())


def read(spec: PriorSpec, *, tracking_uri: str | None = None) -> list[Measurement]:
    """The raw priors of a source (any workload, any GPU), not yet re-checked.

    ``baselines`` depend on the target and are made by :func:`load_for`; here they are empty.

    Raises:
        ValueError, FileNotFoundError: the source cannot be read (the message names it).
    """
    if spec.kind == "table":
        return read_tables(spec.value, spec.label)
    if spec.kind == "store":
        return read_store(spec.value, spec.label)
    if spec.kind in ("mlflow", "mlflow-experiment"):

        uri = tracking_uri or DEFAULT_TRACKING_URI
        if spec.kind == "mlflow":
            return prior_mlflow.read_run(uri, spec.value, spec.label)
        return prior_mlflow.read_experiment(uri, spec.value, spec.label)
    return []


@dataclass(frozen=True)
class PriorSet:
    """The priors a study is told, and those re-checking dropped.

    Attributes:
        told: feasible on the target (failures of the source included: they say what
            not to try first), each ``source="prior"``.
        dropped: (prior, why) for each prior the target cannot run or that names no
            config of the kernel.
        sources: labels of the sources read, in order.
        fallback: True when the baselines stand in for sources that gave nothing usable.
    """

    told: tuple[Measurement, ...]
    dropped: tuple[tuple[Measurement, str], ...] = ()
    sources: tuple[str, ...] = ()
    fallback: bool = False

    def plus(self, other: PriorSet) -> PriorSet:
        """Both sets' priors, this one's first (the baselines' fallback stays this one's)."""
        return PriorSet(self.told + other.told, self.dropped + other.dropped,
                        tuple(dict.fromkeys(self.sources + other.sources)), self.fallback)

    def summary(self) -> str:
        """One line for the terminal: how many priors from where, how many dropped and why."""
        kept = f"{len(self.told)} prior(s) from {', '.join(self.sources) or 'nowhere'}"
        if self.fallback:
            kept += " (no usable data in the sources given: the architecture's baselines instead)"
        if not self.dropped:
            return kept
        reasons: dict[str, int] = {}
        for _, why in self.dropped:
            reasons[_reason(why)] = reasons.get(_reason(why), 0) + 1
        top = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
        return f"{kept}; {len(self.dropped)} dropped as infeasible on the target ({top})"


def _reason(why: str) -> str:
    """A verdict's reason without its numbers, to count alike ones together."""
    if "shared memory" in why:
        return "need more shared memory"
    if "compute capability" in why:
        return "need a newer architecture"
    return "name no config of this kernel" if why.startswith("not a config") else why[:60]


def recheck(priors: Iterable[Measurement], workload: Workload, hardware: HardwareSpec) -> PriorSet:
    """Keep the priors the target can run: feasible for ``workload`` on ``hardware``.

    The config is completed with the knobs the kernel implies (a prior recorded before a
    knob existed), and checked with the *target's* workload (a config's shared memory
    depends on the head dim it runs at) and spec. The prior keeps its own workload and
    fingerprint: they say where it was measured.
    """
    told: list[Measurement] = []
    dropped: list[tuple[Measurement, str]] = []
    labels: dict[str, None] = {}
    for prior in priors:
        labels[(prior.versions or {}).get(SOURCE_KEY, "")] = None
        try:
            config = validate_config(prior.config)
        except ValueError as exc:
            dropped.append((prior, f"not a config of this kernel: {exc}"))
            continue
        verdict = check(config, workload, hardware)
        if not verdict.feasible:
            dropped.append((prior, verdict.reason))
            continue
        told.append(prior if config == prior.config else dataclasses.replace(prior, config=config))
    return PriorSet(tuple(told), tuple(dropped), tuple(label for label in labels if label))


def load_for(specs: Sequence[PriorSpec], raw: Mapping[PriorSpec, Sequence[Measurement]], workload: Workload,
             hardware: HardwareSpec) -> PriorSet:
    """The priors of one study: every source's, re-checked; the baselines if none is usable.

    Args:
        specs: the sources, as given.
        raw: what :func:`read` returned for each (read once for all the studies of a run).
        workload: the study's workload.
        hardware: the study's GPU model.
    """

    measurements: list[Measurement] = []
    for spec in specs:
        if spec.kind == "baselines":
            measurements += [_stamp(m, spec.label) for m in baseline_priors(hardware, workload)]
        else:
            measurements += raw.get(spec, ())
    result = recheck(measurements, workload, hardware)
    result = dataclasses.replace(result, sources=tuple(s.label for s in specs))
    if specs and not any(m.ok for m in result.told):
        label = PriorSpec("baselines").label
        fallback = recheck([_stamp(m, label) for m in baseline_priors(hardware, workload)], workload, hardware)
        result = dataclasses.replace(fallback, dropped=result.dropped + fallback.dropped,
                                     sources=(*result.sources, label), fallback=True,
                                     told=result.told + fallback.told)
    return result


def from_study(measurements: Iterable[Measurement], label: str) -> list[Measurement]:
    """A finished study's measurements as priors of the next one, labelled ``label`` (its
    MLflow parent run, ``mlflow:RUN_ID``: the source that gives the same priors again)."""
    return [_stamp(dataclasses.replace(m, source="prior"), label) for m in measurements]


def _stamp(measurement: Measurement, label: str) -> Measurement:
    return dataclasses.replace(measurement, versions={**(measurement.versions or {}), SOURCE_KEY: label})


# -- what MLflow records ---------------------------------------------------------------------


def parent_tags(priors: Sequence[Measurement]) -> dict[str, str]:
    """Tags of a study's parent run: where its priors came from and how many were told."""
    if not priors:
        return {}
    sources = list(dict.fromkeys((m.versions or {}).get(SOURCE_KEY, "unlabelled") for m in priors))
    return {PARENT_SOURCES_TAG: _clip("; ".join(sources)), PARENT_TOLD_TAG: str(len(priors))}


def trial_tagger(priors: Sequence[Measurement]) -> Any:
    """A function of a trial giving the tags of its child run: which sources held its config.

    ``flashtune.prior_source`` lists the sources whose priors held the trial's config (any
    outcome); ``flashtune.prior_rank`` is the config's 1-based place in the order the
    strategies are told to try them (``PriorBook.ranked``), when it is ranked. Trials of
    configs no prior held get no tag.
    """

    holders: dict[Config, dict[str, None]] = {}
    book = PriorBook()
    for prior in priors:
        holders.setdefault(prior.config, {})[(prior.versions or {}).get(SOURCE_KEY, "unlabelled")] = None
        book.add(prior)
    ranks = {config: i + 1 for i, config in enumerate(book.ranked())}

    def tags(trial: Any) -> dict[str, str]:
        sources = holders.get(trial.config)
        if not sources:
            return {}
        out = {TRIAL_SOURCE_TAG: _clip("; ".join(sources))}
        if trial.config in ranks:
            out[TRIAL_RANK_TAG] = str(ranks[trial.config])
        return out

    return tags


def _clip(text: str) -> str:
    return text if len(text) <= _TAG_CHARS else text[: _TAG_CHARS - 3] + "..."


__all__ = ["FORMS", "KINDS", "PriorSet", "PriorSpec", "from_study", "load_for", "parent_tags", "parse_source", "read", "recheck",
           "trial_tagger"]

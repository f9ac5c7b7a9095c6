"""What the rerun-after-outage notebook calls (``notebooks/rerun_after_outage.*``).

The notebook reads its parameters (Databricks widgets, or papermill's parameters cell
elsewhere), then calls these functions; each returns something small to look at (text
or a pandas frame), never a message body. :func:`open_context` builds the services once
(on Databricks, secrets from secret scopes and the cluster's session with
``spark.master: null``; elsewhere a session built from the config).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from syphon.app.services import build_context, run_with_report
from syphon.app.text import format_run, format_status, format_summary
from syphon.core.configfile import load_config
from syphon.core.repair import Repair
from syphon.core.schema import Stage
from syphon.core.selection import Selection, selection_from_text
from syphon.job.context import RunContext
from syphon.job.plan.planning import plan as plan_run
from syphon.job.request import Asked, run_request
from syphon.job.run.status import status
from syphon.job.sources import run_source
from syphon.obs.logs import configure_logging
from syphon.servicebus.secrets import databricks_secrets
from syphon.store import queries

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

#: How many ``--set`` the notebook's widgets hold (the command takes any number).
REPAIR_SETS = 3

#: The notebook's widgets: name -> (default, label).
WIDGETS = {
    "config": ("", "Config file"),
    "source": ("", "Source (a name from the config's sources; empty: backlog)"),
    "run_id": ("", "Run id (empty: plan a new run)"),
    "destinations": ("", "Destinations (primary/destination, comma-separated; empty: all)"),
    "message_id": ("", "MessageId to look up in the audit"),
    "replay": ("no", "Replay the planned run (yes/no)"),
    # the selection of a new plan (syphon plan's options; empty: every message)
    "select_destinations": ("", "Select: destinations (entity paths, comma-separated)"),
    "select_message_ids": ("", "Select: MessageIds (comma-separated)"),
    "select_enqueued_from": ("", "Select: enqueued from (ISO 8601, UTC)"),
    "select_enqueued_until": ("", "Select: enqueued until (ISO 8601, UTC)"),
    "select_dead_letter_reasons": ("", "Select: dead-letter reasons (comma-separated)"),
    "select_where": ("", "Select: Spark SQL predicate"),
    # the repair of a new plan, replayed with it (syphon plan's --set and --unset)
    **{
        f"repair_set_{n}": ("", f"Repair: set #{n} (NAME=SQL or NAME:TYPE=SQL)")
        for n in range(1, REPAIR_SETS + 1)
    },
    "repair_unset": ("", "Repair: unset (property names, comma-separated)"),
}


@dataclass(frozen=True)
class Parameters:
    """The notebook's parameters, read once."""

    config: str
    run_id: str
    destinations: tuple[tuple[str, str], ...]
    message_id: str
    replay: bool
    selection: Selection | None = None
    source: str | None = None
    repair: Repair | None = None


def parameters(dbutils: Any = None, **values: str) -> Parameters:
    """The notebook's parameters: on Databricks (``dbutils`` given) from text widgets,
    created with ``values`` as their defaults; elsewhere ``values`` themselves.

    Raises:
        ValueError: a destination is not ``primary/destination``, or ``replay`` is not
            yes or no.
        SelectionError: a selection widget holds a malformed time.
        RepairError: a repair widget holds a change that cannot be.
    """
    got = {name: str(values.get(name, default)) for name, (default, _) in WIDGETS.items()}
    if dbutils is not None:
        for name, (_, label) in WIDGETS.items():
            dbutils.widgets.text(name, got[name], label)
        got = {name: str(dbutils.widgets.get(name)) for name in WIDGETS}
    places = []
    for item in got["destinations"].split(","):
        if not item.strip():
            continue
        primary, sep, destination = item.strip().partition("/")
        if not sep or not primary or not destination:
            raise ValueError(f"destinations: {item.strip()!r} is not primary/destination")
        places.append((primary, destination))
    replay = got["replay"].strip().lower()
    if replay not in ("yes", "no"):
        raise ValueError(f"replay: {got['replay']!r} is not yes or no")
    return Parameters(
        got["config"].strip(),
        got["run_id"].strip(),
        tuple(places),
        got["message_id"].strip(),
        replay == "yes",
        _selection(got),
        got["source"].strip() or None,
        Repair.from_options(
            [s for n in range(1, REPAIR_SETS + 1) if (s := got[f"repair_set_{n}"]).strip()],
            [name.strip() for name in got["repair_unset"].split(",") if name.strip()],
        ),
    )


def _selection(got: dict[str, str]) -> Selection | None:
    return selection_from_text(
        destinations=got["select_destinations"].split(","),
        message_ids=got["select_message_ids"].split(","),
        enqueued_from=got["select_enqueued_from"],
        enqueued_until=got["select_enqueued_until"],
        dead_letter_reasons=got["select_dead_letter_reasons"].split(","),
        where=got["select_where"] or None,  # an empty widget: no condition
        spelled=lambda field: "select_" + field,
    )


def open_context(params: Parameters) -> RunContext:
    """The config the parameters name (``SYPHON_CONFIG`` or the embedded default when
    empty), logging as it says, and the services built once."""
    config = load_config(params.config or None)
    configure_logging(config.logging.level, "text", sdk_level=config.logging.sdk_level)
    return build_context(config, dbutils_get=databricks_secrets())


def backlog_status(ctx: RunContext, params: Parameters | None = None) -> str:
    """Messages in each queue of the source (``params.source``; None: the default), and
    its last runs in the ledger."""
    source = run_source(ctx, params.source if params is not None else None)
    return format_status(status(ctx, source))


def _only(df: DataFrame, params: Parameters) -> DataFrame:
    from pyspark.sql import functions as F

    if not params.destinations:
        return df
    wanted = F.lit(False)
    for primary, destination in params.destinations:
        wanted = wanted | ((F.col("primary") == primary) & (F.col("destination") == destination))
    return df.where(wanted)


def _plan_rows(ctx: RunContext, run_id: str) -> DataFrame:
    from syphon.core.errors import SyphonError

    rows = ctx.store.run_rows(run_id, Stage.PLAN)
    if rows is None:
        raise SyphonError(f"no audit at {ctx.store.where}: no run was planned there")
    return rows


def verdicts(ctx: RunContext, params: Parameters, run_id: str) -> pd.DataFrame:
    """The run's plan: messages per destination, verdict and reason."""
    rows = _only(_plan_rows(ctx, run_id), params)
    return (
        queries.verdicts_per_destination(rows, "reason")
        .select("primary", "destination", "verdict", "reason", "messages")
        .orderBy("primary", "destination", "verdict", "reason")
        .toPandas()
    )


def spread_groups(
    ctx: RunContext, params: Parameters, run_id: str, limit: int = 100
) -> pd.DataFrame:
    """The run's replay groups (destination and partition key) that sit in several backlog
    queues, the most spread first: messages, queues, time span."""
    rows = _only(_plan_rows(ctx, run_id), params)
    return queries.spread_groups(rows).limit(limit).toPandas()


#: The audit columns shown for one message.
MESSAGE_COLUMNS = (
    "message_id",
    "run_id",
    "stage",
    "recorded_at",
    "backlog_queue",
    "sequence_number",
    "primary",
    "destination",
    "session_id",
    "partition_key_effective",
    "verdict",
    "reason",
    "batch_id",
    "batch_position",
    "outcome",
    "detail",
    "body_sha256",
)


def audit_for(ctx: RunContext, params: Parameters) -> pd.DataFrame:
    """Every audit row of the MessageId in ``params.message_id``, over all runs, oldest
    first: where it was found, its verdict and what each stage did with it."""
    from pyspark.sql import functions as F

    audit = ctx.store.audit()
    if audit is None or not params.message_id:
        import pandas as pd

        return pd.DataFrame(columns=list(MESSAGE_COLUMNS))
    rows = _only(audit.where(F.col("message_id") == params.message_id), params)
    order = (
        F.when(F.col("stage") == Stage.PLAN, 0).when(F.col("stage") == Stage.REPLAY, 1).otherwise(2)
    )
    return (
        rows.orderBy("recorded_at", order, "backlog_queue", "sequence_number")
        .select(*MESSAGE_COLUMNS)
        .toPandas()
    )


def plan(ctx: RunContext, params: Parameters) -> tuple[str, str]:
    """The run to inspect and replay, and its summary: ``params.run_id`` when the ledger
    says it was planned (nothing is peeked again), else a new plan (recorded
    ``planned``) of what ``params.selection`` takes."""

    if params.run_id:
        rows = [r for r in ctx.store.runs() if r.run_id == params.run_id]
        planned = [r for r in rows if r.status == "planned"]
        if planned:
            latest = rows[-1]
            counts = ", ".join(f"{k} {v}" for k, v in sorted(planned[0].counts.items()))
            return params.run_id, (
                f"run {params.run_id}: planned earlier, now {latest.status}; verdicts: {counts}"
            )
    asked = Asked(selection=params.selection, repair=params.repair)
    request = run_request(ctx, params.run_id, params.source, asked)
    result = plan_run(ctx, request)
    return result.run_id, format_summary(result)


def replay(ctx: RunContext, run_id: str, params: Parameters | None = None) -> str:
    """Replays and settles the planned run (of ``params.source``); its summary."""
    source = params.source if params is not None else None
    return format_run(run_with_report(ctx, run_request(ctx, run_id, source, resume=True)))

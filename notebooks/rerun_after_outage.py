# Databricks notebook source
# MAGIC %md
# MAGIC # syphon: rerun after an outage
# MAGIC
# MAGIC Look at the backlog, plan a run (or pick a planned one), inspect its verdicts and the
# MAGIC groups spread over several backlog queues, replay it, and follow one message through
# MAGIC the audit by its MessageId. Every cell calls the `syphon` library; no cell shows a
# MAGIC message body.
# MAGIC
# MAGIC Parameters (widgets on Databricks; papermill parameters elsewhere):
# MAGIC - `config`: the config file (empty: `SYPHON_CONFIG`, else the embedded default);
# MAGIC - `source`: the config's source to drain (empty: `backlog`, or the only one), e.g. a
# MAGIC   dead-letter source to re-drive;
# MAGIC - `run_id`: a planned run to inspect and replay (empty: plan a new one);
# MAGIC - `destinations`: `primary/destination`, comma-separated, to narrow what is shown;
# MAGIC - `message_id`: a MessageId to look up in the audit;
# MAGIC - `replay`: `yes` to replay the run in the replay cell (default `no`);
# MAGIC - `select_destinations`, `select_message_ids` (comma-separated),
# MAGIC   `select_enqueued_from`, `select_enqueued_until` (ISO 8601, UTC),
# MAGIC   `select_dead_letter_reasons` (comma-separated) and `select_where`
# MAGIC   (a Spark SQL predicate, e.g. `properties['tenant'] = 'contoso'`): what a new plan
# MAGIC   takes, as `syphon plan`'s options; the rest is recorded `unselected` and stays in
# MAGIC   the backlog. Empty: every message.
# MAGIC - `repair_set_1` .. `repair_set_3` (`NAME=SQL` or `NAME:TYPE=SQL`, e.g.
# MAGIC   `retries:long=0`) and `repair_unset` (names, comma-separated): what a new plan
# MAGIC   changes in the messages it sends, as `syphon plan --set/--unset`; the plan's summary
# MAGIC   counts what each change alters, and the replay cell sends them so. Empty: nothing.

# COMMAND ----------

# Parameters
config = ""
source = ""
run_id = ""
destinations = ""
message_id = ""
replay = "no"
select_destinations = ""
select_message_ids = ""
select_enqueued_from = ""
select_enqueued_until = ""
select_dead_letter_reasons = ""
select_where = ""
repair_set_1 = ""
repair_set_2 = ""
repair_set_3 = ""
repair_unset = ""

# COMMAND ----------

from syphon.app import notebook as nb

params = nb.parameters(
    globals().get("dbutils"),
    config=config,
    source=source,
    run_id=run_id,
    destinations=destinations,
    message_id=message_id,
    replay=replay,
    select_destinations=select_destinations,
    select_message_ids=select_message_ids,
    select_enqueued_from=select_enqueued_from,
    select_enqueued_until=select_enqueued_until,
    select_dead_letter_reasons=select_dead_letter_reasons,
    select_where=select_where,
    repair_set_1=repair_set_1,
    repair_set_2=repair_set_2,
    repair_set_3=repair_set_3,
    repair_unset=repair_unset,
)
ctx = nb.open_context(params)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Source status
# MAGIC Messages in each queue of the source, and its last runs in the ledger.

# COMMAND ----------

print(nb.backlog_status(ctx, params))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Plan
# MAGIC Snapshot, reconcile and audit (recorded as `planned`) of what the selection takes, or
# MAGIC the planned run named by `run_id`.

# COMMAND ----------

run_id, summary = nb.plan(ctx, params)
print(summary)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Verdicts
# MAGIC Messages per destination, verdict and reason.

# COMMAND ----------

nb.verdicts(ctx, params, run_id)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Spread groups
# MAGIC Groups (destination and partition key) whose messages sit in several backlog queues:
# MAGIC syphon replays each in the original order.

# COMMAND ----------

nb.spread_groups(ctx, params, run_id)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Replay
# MAGIC Sends the planned run to the primaries and settles the backlog (only with `replay` = `yes`).

# COMMAND ----------

if params.replay:
    print(nb.replay(ctx, run_id, params))
else:
    print(f"run {run_id} not replayed: set the replay parameter to yes")

# COMMAND ----------

# MAGIC %md
# MAGIC ## One message in the audit
# MAGIC Every audit row of `message_id`, over all runs: where it was found, its verdict and what
# MAGIC each stage did with it.

# COMMAND ----------

nb.audit_for(ctx, params)

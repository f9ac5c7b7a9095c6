"""The bundle's dashboard (jobs/syphon.dashboard.yml, jobs/syphon.lvdash.json): the
resource loads in the ``databricks-bundles`` model, each widget reads a dataset the
dashboard defines and only columns its query returns, and every query runs on Spark
against the audit and ledger tables a real ``syphon run`` wrote (``audit.engine:
spark``, its table named as the dashboard names it). Databricks itself cannot run here:
the page's rendering is not tested, its queries are."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from azure.servicebus import ServiceBusMessage
from databricks.bundles.dashboards import Dashboard

from support.paired_env import Pair, job_config, run_job, send_raw
from syphon.core.configfile import load_config
from syphon.servicebus.backlog_messages import to_backlog_message

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def resource() -> dict[str, Any]:
    raw = yaml.safe_load((ROOT / "jobs" / "syphon.dashboard.yml").read_text(encoding="utf-8"))
    return dict(raw["resources"]["dashboards"]["syphon"])


def page() -> dict[str, Any]:
    path = ROOT / "jobs" / str(resource()["file_path"])
    return dict(json.loads(path.read_text(encoding="utf-8")))


def queries() -> dict[str, str]:
    return {d["name"]: "".join(d["queryLines"]) for d in page()["datasets"]}


def test_the_dashboard_resource_loads_and_its_variables_are_the_bundles() -> None:
    raw = resource()
    dashboard = Dashboard.from_dict(raw)  # strict: an unknown field raises
    assert dashboard.display_name == "syphon"
    bundle = yaml.safe_load((ROOT / "databricks.yml").read_text(encoding="utf-8"))
    used = {v.removeprefix("${var.").removesuffix("}") for v in raw.values() if "${var." in str(v)}
    assert used == {"warehouse_id", "audit_catalog", "audit_schema"}
    assert used <= set(bundle["variables"])


def test_every_dashboard_query_runs_on_the_tables_a_run_wrote(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = f"syphon_dash_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {database} LOCATION '{(tmp_path / 'warehouse').as_uri()}'")
    good = ServiceBusMessage(b"a", message_id="d1", partition_key="k")
    lost = ServiceBusMessage(b"?", message_id="d2")
    send_raw(pair, 0, [to_backlog_message(good, "orders"), to_backlog_message(lost, "nowhere")])
    path = job_config(pair, tmp_path, monkeypatch).source
    environ = {"SYPHON__AUDIT__ENGINE": "spark", "SYPHON__AUDIT__TABLE": f"{database}.syphon_audit"}
    config = load_config(path, environ=environ)
    assert run_job(config, spark, "for-the-dashboard").status == "done"

    widgets = [item["widget"] for item in page()["pages"][0]["layout"]]
    spark.sql(f"USE {database}")  # the bundle sets the datasets' catalog and schema
    try:
        found = {name: spark.sql(sql) for name, sql in queries().items()}
        results = {name: frame.collect() for name, frame in found.items()}
    finally:
        spark.sql("USE default")
    for w in widgets:
        (query,) = w["queries"]
        dataset = query["query"]["datasetName"]
        assert dataset in found, w["name"]
        fields = [f["name"] for f in query["query"]["fields"]]
        assert set(fields) <= set(found[dataset].columns), (w["name"], fields)
    # the run is there as the operator sees it
    (run,) = [r for r in results["runs"] if r["run_id"] == "for-the-dashboard"]
    assert (run["status"], run["sent"], run["to_replay"]) == ("done", 1, 1)
    assert run["credits"] > 0
    outcomes = {(r["stage"], r["outcome"]): r["messages"] for r in results["outcomes"]}
    assert outcomes[("replay", "sent")] == 1
    assert outcomes[("settle", "dead_lettered")] == 1
    waiting = [(r["destination"], r["verdict"], r["messages"]) for r in results["waiting"]]
    assert waiting == [("nowhere", "invalid", 1)]
    assert results["held_back"] == []
    assert [(r["in_doubt"], r["resent_in_doubt"]) for r in results["in_doubt"]] == [(0, 0)]

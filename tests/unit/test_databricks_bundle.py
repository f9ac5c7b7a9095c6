"""The Databricks asset bundle, loaded with the ``databricks-bundles`` job model: a
malformed job definition fails here, not on the workspace."""

from __future__ import annotations

import re
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import yaml
from databricks.bundles.jobs import Job

from syphon.app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def bundle() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "databricks.yml").read_text(encoding="utf-8"))


def included() -> list[Path]:
    files = []
    for pattern in bundle()["include"]:
        files.extend(sorted(ROOT.glob(pattern)))
    return files


def job_files() -> list[Path]:
    return [p for p in included() if p.name.endswith(".job.yml")]


def jobs() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in job_files():
        out.update(yaml.safe_load(path.read_text(encoding="utf-8"))["resources"]["jobs"])
    return out


def test_the_bundle_has_dev_and_prod_and_includes_the_job() -> None:
    b = bundle()
    assert b["bundle"]["name"] == "syphon"
    assert set(b["targets"]) == {"dev", "prod"}
    assert b["targets"]["prod"]["mode"] == "production"
    assert [p.relative_to(ROOT).as_posix() for p in included()] == [
        "jobs/syphon.job.yml",
        "jobs/syphon_serverless.job.yml",
        "jobs/syphon.dashboard.yml",
    ]


def test_every_job_loads_in_the_job_model_and_runs_the_console_entry_point() -> None:
    installed = distribution("syphon")  # the package the wheel task installs
    scripts = {e.name for e in installed.entry_points if e.group == "console_scripts"}
    defined = set(bundle()["variables"])
    for key, raw in jobs().items():
        job = Job.from_dict(raw)  # strict: an unknown or missing field raises
        assert job.max_concurrent_runs == 1, key
        assert job.schedule is not None
        assert {p.name for p in job.parameters} == {"config", "run_id"}
        # a failed run and a partial one (exit 5 fails the task) are mailed
        assert job.email_notifications is not None
        assert [str(a) for a in job.email_notifications.on_failure] == ["${var.notify}"]
        for task in job.tasks:
            assert task.max_retries == 0, task.task_key  # a replay is never retried blindly
            wheel = task.python_wheel_task
            assert wheel is not None
            assert wheel.package_name == installed.metadata["Name"]
            assert wheel.entry_point in scripts
            # the task's arguments are the syphon command's own
            args = [
                re.sub(r"\{\{job\.parameters\.(\w+)\}\}", r"<\1>", str(a)) for a in wheel.parameters
            ]
            parsed = build_parser().parse_args(args)
            assert (parsed.command, parsed.config, parsed.run_id) == ("run", "<config>", "<run_id>")
            # the job's run goes on the ledger and the audit: Databricks' history joins it
            assert parsed.job_run_id == "{{job.run_id}}"
            if task.environment_key is None:  # on a job cluster: the wheel as a library
                assert task.job_cluster_key is not None, task.task_key
                assert [lib.whl for lib in task.libraries] == ["../dist/*.whl"]
            else:  # serverless: no cluster, the wheel in the task's environment
                assert (task.job_cluster_key, task.libraries) == (None, []), task.task_key
                (env,) = [e for e in job.environments if e.environment_key == task.environment_key]
                assert env.spec is not None
                assert env.spec.dependencies == ["../dist/*.whl"]
        # every ${var.X} the job uses is declared by the bundle
        used = set(re.findall(r"\$\{var\.(\w+)\}", yaml.safe_dump(raw)))
        assert used <= defined, used - defined


def test_the_wheel_the_job_installs_is_the_one_the_bundle_builds() -> None:
    artifact = bundle()["artifacts"]["syphon_wheel"]
    assert artifact["type"] == "whl"
    assert "--wheel-dir dist" in artifact["build"]


def test_a_job_cluster_job_and_a_serverless_one_of_which_prod_unpauses_the_first() -> None:
    defined = jobs()
    assert set(defined) == {"syphon", "syphon_serverless"}
    serverless = Job.from_dict(defined["syphon_serverless"])
    assert not serverless.job_clusters
    assert [t.environment_key for t in serverless.tasks] == ["syphon"]
    variables = bundle()["variables"]
    prod = bundle()["targets"]["prod"]["variables"]
    assert variables["serverless_pause_status"]["default"] == "PAUSED"
    assert "serverless_pause_status" not in prod  # the cluster job is prod's default

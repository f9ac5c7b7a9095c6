"""Every run writes its HTML report beside the ledger: the figures match the audit, and
headless Chromium draws it without the network."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from PIL import Image

from servicebus_emulator.server import EMULATOR_KEY
from support.figures import both_answers
from support.paired_env import BACKLOG_QUEUES, PRIMARY, Pair, job_config, run_job, send_raw
from support.python_rules import report_path
from support.report_html import parse_report, table_dict
from syphon.app.text import format_run
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE
from syphon.store.delta import read_table
from syphon.store.figures import TimeSlices

pytestmark = pytest.mark.timeout(300)

#: The flags that let Chromium draw a page as root, in a container, with no display,
#: no GPU and no network of its own.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def message(body: bytes, dest: str, message_id: str, **keys: Any) -> Any:
    return to_backlog_message(ServiceBusMessage(body, message_id=message_id, **keys), dest)


def test_a_run_writes_a_report_whose_figures_are_the_audits_and_chromium_draws_it(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is missing: ./dev.sh test installs it (apt-get install chromium)"
    bodies = [f"BODY-{uuid.uuid4().hex}".encode() for _ in range(8)]
    # orders/k1 sits in two backlog queues (a spread group), sessions in one, one invalid
    send_raw(
        pair,
        0,
        [
            message(bodies[0], "orders", "o1", partition_key="k1"),
            message(bodies[1], "orders", "o2", partition_key="k1"),
        ],
    )
    send_raw(
        pair,
        1,
        [
            message(bodies[2], "orders", "o3", partition_key="k1"),
            message(bodies[3], "sessions", "s1", session_id="a"),
            message(bodies[4], "sessions", "s2", session_id="a"),
        ],
    )
    send_raw(
        pair,
        2,
        [
            message(bodies[5], "nowhere", "n1"),
            message(bodies[0], "orders", "o1", partition_key="k1"),
        ],
    )  # a duplicate
    config = job_config(pair, tmp_path, monkeypatch)

    result = run_job(config, spark, "reported-run")
    assert result.status == "done", format_run(result)
    path = Path(report_path(config.audit.path, "reported-run")).absolute()
    assert result.report == str(path)
    assert f"report: {path}" in format_run(result)
    page_text = path.read_text(encoding="utf-8")
    page = parse_report(page_text)

    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    plan = [r for r in audit if r["stage"] == "plan"]
    expected = Counter(
        (f"{r['primary']}/{r['destination'] or '(no destination)'}", r["verdict"]) for r in plan
    )
    shown = table_dict(page.sections["verdicts"][0])
    assert {
        (place, verdict): int(n)
        for place, row in shown.items()
        for verdict, n in row.items()
        if verdict != "total" and n != "0"
    } == expected
    assert expected[(f"{PRIMARY}/orders", "duplicate")] == 1, expected
    spread = table_dict(page.sections["spread"][0])
    assert spread[f"{PRIMARY}/orders"]["partition key"] == "k1"
    assert spread[f"{PRIMARY}/orders"]["backlog queues"] == "2"
    assert f"{PRIMARY}/sessions" not in spread  # one queue only
    windows = table_dict(page.sections["timeline"][0])
    assert set(windows) == {place for place, _ in expected}
    # the report read them on delta-rs's engine: Spark gives this run's audit the same answers
    times = [r["backlog_enqueued_time"] for r in plan if r["backlog_enqueued_time"]]
    slices = TimeSlices.spanning(min(times), max(times), 60)
    both_answers(spark, config.audit.path, "reported-run", slices)
    operations = table_dict(page.sections["operations"][0])
    assert operations["credits_estimated"]["count"] == str(result.operations.credits_estimated)
    assert "Nothing: every message was settled" in page.text["left"]
    assert page.svgs["verdicts"] == page.svgs["timeline"] == 1
    assert [r for r in page.references if not r[2].startswith("#")] == []
    for secret in (EMULATOR_KEY, pair.secondary.connection_string, pair.primary.connection_string):
        assert secret not in page_text
    for body in bodies:
        assert body.decode() not in page_text

    shot = tmp_path / "report.png"
    drawn = subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--screenshot={shot}",
            "--window-size=1200,1800",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1200, 1800)
        pixels = image.convert("RGB")
        colours = pixels.getcolors(maxcolors=1 << 20) or []
        # text, tables and the two charts: many colours, and the verdict bars' green
        assert len(colours) > 50
        assert any(
            abs(r - 0x2B) < 12 and abs(g - 0x8A) < 12 and abs(b - 0x3E) < 12
            for _, (r, g, b) in colours
        )
        dark = sum(n for n, (r, g, b) in colours if r + g + b < 200)
        assert dark > 2000  # the text was drawn


def test_an_empty_run_writes_a_report_without_starting_spark(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = job_config(pair, tmp_path, monkeypatch)
    result = run_job(config, lambda: pytest.fail("an empty run must not start Spark"), "empty-run")
    assert result.status == "empty"
    page = parse_report(Path(report_path(config.audit.path, "empty-run")).read_text("utf-8"))
    assert "empty" in page.text["summary"]
    assert "No message was planned" in page.text["verdicts"]
    assert table_dict(page.sections["operations"][0])["discover.backlog_queues"]["count"] == str(
        BACKLOG_QUEUES
    )

"""Log records: text or JSON, the run id in each, secrets masked."""

from __future__ import annotations

import io
import json
import logging
import os
import threading

import pytest

from syphon.obs.logs import configure_logging, mask_secrets, run_context

KEY = "c2VjcmV0LWtleS0xMjM0NTY3ODkwYWJjZGVm"
CONNECTION = (
    f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={KEY}"
)


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()  # the handler on it is removed by conftest after the test


def test_json_records_carry_the_run_id_from_any_thread(stream: io.StringIO) -> None:
    configure_logging("INFO", "json", stream)
    log = logging.getLogger("syphon.test")
    log.info("before")
    with run_context("20261123T000000Z-abcd"):
        log.info("inside %d", 1)
        worker = threading.Thread(target=lambda: log.warning("from a thread"))
        worker.start()
        worker.join()
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    log.info("after")
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [r["message"] for r in records] == [
        "before",
        "inside 1",
        "from a thread",
        "failed",
        "after",
    ]
    assert [r["run_id"] for r in records] == [None] + ["20261123T000000Z-abcd"] * 3 + [None]
    assert (records[2]["level"], records[2]["logger"]) == ("WARNING", "syphon.test")
    assert "ValueError: boom" in records[3]["error"]


def test_text_records_name_the_run_and_debug_is_filtered_at_info(stream: io.StringIO) -> None:
    configure_logging("INFO", "text", stream)
    with run_context("r-1"):
        logging.getLogger("x").debug("hidden")
        logging.getLogger("x").info("shown")
    assert stream.getvalue().count("\n") == 1
    assert " INFO run=r-1 x: shown" in stream.getvalue()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_connection_string_or_signature_in_a_record_is_masked(
    stream: io.StringIO, fmt: str
) -> None:
    configure_logging("INFO", fmt, stream)
    log = logging.getLogger("sdk")
    log.error("could not connect with %s", CONNECTION)
    log.error("token SharedAccessSignature sr=ns&sig=%s&se=1&skn=root", KEY)
    try:
        raise RuntimeError(CONNECTION)
    except RuntimeError:
        log.exception("and in a traceback")
    text = stream.getvalue()
    assert KEY not in text
    assert text.count("***") >= 3


def test_mask_keeps_everything_but_the_secret() -> None:
    masked = mask_secrets(CONNECTION)
    assert masked.endswith("SharedAccessKey=***")
    assert masked.startswith("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        configure_logging("INFO", "xml")


@pytest.mark.parametrize(
    ("level", "sdk_level", "shown"),
    [
        ("INFO", "WARNING", ["syphon INFO", "azure WARNING"]),
        ("INFO", "INFO", ["syphon INFO", "azure INFO", "azure WARNING", "py4j INFO"]),
        ("WARNING", "INFO", ["azure WARNING"]),  # never below syphon's own level
        (
            "DEBUG",
            "WARNING",
            ["syphon INFO", "azure DEBUG", "azure INFO", "azure WARNING", "py4j INFO"],
        ),
    ],
)
def test_the_libraries_chatter_stays_below_the_default_level(
    stream: io.StringIO, level: str, sdk_level: str, shown: list[str]
) -> None:
    configure_logging(level, "text", stream, sdk_level=sdk_level)
    logging.getLogger("syphon.job.run.loop").info("syphon INFO")
    sdk = logging.getLogger("azure.servicebus._pyamqp.link")
    sdk.debug("azure DEBUG")
    sdk.info("azure INFO")
    sdk.warning("azure WARNING")
    logging.getLogger("py4j.clientserver").info("py4j INFO")
    lines = [line.split(": ", 1)[1] for line in stream.getvalue().splitlines()]
    assert lines == shown


@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("INFO", ["py4j ERROR", "an application's INFO"]),
        ("DEBUG", ["py4j INFO", "py4j ERROR", "an application's INFO"]),
    ],
)
def test_a_library_logging_on_the_root_logger_is_held_to_the_libraries_level(
    stream: io.StringIO, level: str, shown: list[str]
) -> None:
    """py4j logs a connection it retries on the root logger, at INFO, with a traceback."""
    configure_logging(level, "text", stream)
    root = logging.getLogger()
    py4j = os.path.join(os.sep, "venv", "site-packages", "py4j", "java_gateway.py")
    for path, record_level, text in [
        (py4j, logging.INFO, "py4j INFO"),
        (py4j, logging.ERROR, "py4j ERROR"),
        (os.path.join(os.sep, "notebook", "cell.py"), logging.INFO, "an application's INFO"),
    ]:
        root.handle(root.makeRecord("root", record_level, path, 1, text, (), None))
    lines = [line.split(": ", 1)[1] for line in stream.getvalue().splitlines()]
    assert lines == shown


def test_a_records_own_figures_are_fields_of_its_json_object(stream: io.StringIO) -> None:
    """A wave's progress record carries its figures as a field of its own; they never
    replace the record's standard fields."""
    configure_logging("INFO", "json", stream)
    log = logging.getLogger("syphon.test")
    log.info("wave 2", extra={"fields": {"wave": {"number": 2, "home": 40}, "level": "x"}})
    log.info("plain")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["wave"] == {"number": 2, "home": 40}
    assert first["level"] == "INFO"
    assert "wave" not in second

"""The audit's tables, lease and reports on Blob storage: Azurite, the real Azure Storage
emulator, reached through delta-rs's object store with the URI spellings and the
credentials a config gives (tests/support/azurite.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from chispa import assert_df_equality

from support.azurite import KEY_ENV, BlobAudit
from support.lease_race import race
from syphon.app.storage import resolve_location
from syphon.core.config import AuditConfig, SecretRef, StorageConfig
from syphon.core.errors import AuditStoreError, ExitCode
from syphon.store.delta import append_arrow, append_dataframe, read_dataframe, read_table
from syphon.store.deltars import DeltaRsStore
from syphon.store.lease import Lease
from syphon.store.location import Location
from syphon.store.reports import write_page


def configured(blob: BlobAudit, scheme: str = "az", **storage: Any) -> Location:
    """The location syphon makes of an audit section for ``blob``'s container."""
    settings: dict[str, Any] = {"endpoint": blob.azurite.endpoint}
    if scheme == "az":
        settings["account"] = blob.azurite.account
    settings.update(storage or {"account_key": SecretRef(env=KEY_ENV)})
    return resolve_location(AuditConfig(path=blob.uri(scheme), storage=StorageConfig(**settings)))


def test_the_three_azure_spellings_reach_the_same_folder(blob_audit: BlobAudit) -> None:
    az = configured(blob_audit, "az")
    append_arrow(pa.table({"n": [1, 2]}), az.child("t"))
    assert az.write_bytes("reports/a.html", b"<p>a</p>") == f"{blob_audit.uri('az')}/reports/a.html"
    expected = [1, 2]
    for n, scheme in enumerate(("abfss", "wasbs"), start=3):
        other = configured(blob_audit, scheme)
        assert other.shown == blob_audit.uri(scheme)
        assert sorted(read_table(other.child("t")).column("n").to_pylist()) == expected
        assert other.read_bytes("reports/a.html") == b"<p>a</p>"
        append_arrow(pa.table({"n": [n]}), other.child("t"))
        expected.append(n)
    assert sorted(read_table(az.child("t")).column("n").to_pylist()) == [1, 2, 3, 4]


def test_a_sas_token_reaches_the_audit_and_a_wrong_key_is_an_audit_error(
    blob_audit: BlobAudit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SYPHON_TEST_SAS", "?" + blob_audit.azurite.account_sas())
    with_sas = configured(blob_audit, "abfss", sas_token=SecretRef(env="SYPHON_TEST_SAS"))
    assert "azure_storage_account_key" not in with_sas.options
    append_arrow(pa.table({"n": [7]}), with_sas.child("t"))
    assert read_table(configured(blob_audit).child("t")).column("n").to_pylist() == [7]

    # nothing the container holds (Delta logs, commit info, data) carries a credential
    everything = configured(blob_audit).filesystem()
    for info in everything.get_file_info(_everything()):
        if info.type.name == "File":
            with everything.open_input_stream(info.path) as stream:
                data = stream.read()
            assert blob_audit.azurite.key.encode() not in data, info.path
            assert b"sig=" not in data, info.path

    wrong = "d3Jvbmcta2V5LW11c3Qtbm90LXNob3c="
    monkeypatch.setenv(KEY_ENV, wrong)
    store = DeltaRsStore(configured(blob_audit), lambda: pytest.fail("no Spark for the ledger"))
    with pytest.raises(AuditStoreError) as failed:
        store.runs()
    assert failed.value.exit_code == ExitCode.AUDIT_UNAVAILABLE
    assert blob_audit.uri() in str(failed.value)
    assert wrong not in str(failed.value) + str(failed.value.fix)
    assert blob_audit.azurite.key not in str(failed.value) + str(failed.value.fix)


def test_runs_asking_at_once_on_abfss_get_exactly_one_holder(blob_audit: BlobAudit) -> None:
    """The lease's guarantee on object storage: delta-rs creates each commit file only if
    it is absent (Blob storage's If-None-Match), so concurrent acquires get distinct
    versions and every reader replays the same history."""
    root = configured(blob_audit, "abfss")
    Lease(root, "creator", timedelta(seconds=1)).release()  # the table exists
    leases = [
        Lease(configured(blob_audit, "abfss"), f"run-{i}", timedelta(minutes=5)) for i in range(6)
    ]
    won = race(leases)
    assert len(won) == 1
    assert {lease.state().holder for lease in leases} == {won[0]}
    history = read_table(root.child("leases")).column("action").to_pylist()
    assert history.count("acquire") == 6  # no commit overwrote another


def test_a_release_by_another_holder_leaves_the_lease_on_blob_storage(
    blob_audit: BlobAudit,
) -> None:
    root = configured(blob_audit)
    holder = Lease(root, "holder", timedelta(minutes=5))
    assert holder.acquire().holder == holder.holder
    Lease(root, "intruder", timedelta(minutes=5)).release()
    assert holder.ours()


def test_the_report_goes_to_the_store_and_its_uri_is_returned(blob_audit: BlobAudit) -> None:
    root = configured(blob_audit, "wasbs")
    where = write_page(root, "run-1", b"<html>report</html>")
    assert where == f"{blob_audit.uri('wasbs')}/reports/run-1.html"
    assert configured(blob_audit, "az").read_bytes("reports/run-1.html") == b"<html>report</html>"


#: Pages one byte below the 1 MiB write buffer, at it and well past it (as on a local
#: path: tests/unit/test_location_files.py).
PAGE_SIZES = [(1 << 20) - 1, 1 << 20, 5 << 20]


@pytest.mark.parametrize("size", PAGE_SIZES)
def test_a_page_of_any_size_is_written_whole_to_blob_storage(
    blob_audit: BlobAudit, size: int
) -> None:
    root = configured(blob_audit, "abfss")
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    shown = root.write_bytes("reports/big.html", data)
    assert shown == f"{blob_audit.uri('abfss')}/reports/big.html"
    assert configured(blob_audit, "az").read_bytes("reports/big.html") == data
    listed = root.filesystem().get_file_info(_everything("reports"))
    assert [i.base_name for i in listed] == ["big.html"]  # no part-written file beside it


@pytest.mark.spark
def test_executors_write_the_files_and_one_commit_adds_them(
    blob_audit: BlobAudit, spark: Any
) -> None:
    table = configured(blob_audit).child("audit")
    rows = [(i, f"m-{i}") for i in range(60)]
    frame = spark.createDataFrame(rows, "n long, message_id string").repartition(3)
    assert append_dataframe(frame, table, "plan-r1") == 60
    assert append_dataframe(frame.limit(0), table, "plan-r2") == 0  # no rows, no files

    files = table.filesystem().get_file_info(_everything())
    parquet = sorted(f.path for f in files if f.path.endswith(".parquet"))
    assert len(parquet) == 3
    assert all(p.startswith("syphon-plan-r1-") for p in parquet)
    committed = read_table(table).to_pylist()
    assert sorted((r["n"], r["message_id"]) for r in committed) == rows
    read = read_dataframe(spark, table, frame.schema)
    assert read is not None
    assert_df_equality(read, frame, ignore_row_order=True, ignore_nullable=True)


def test_files_written_before_a_column_was_added_read_it_as_null(
    blob_audit: BlobAudit, spark: Any
) -> None:
    """On object storage, Spark's tasks read the files themselves: a file without a
    column the table gained since gives null for it."""
    table = configured(blob_audit).child("audit")
    old = spark.createDataFrame([(1, "a"), (2, "b")], "n long, message_id string")
    append_dataframe(old, table, "old")
    new = spark.createDataFrame([(3, "c", "dlq")], "n long, message_id string, source string")
    assert append_dataframe(new, table, "new") == 1
    read = read_dataframe(spark, table, new.schema)
    assert read is not None
    expected = spark.createDataFrame([(1, "a", None), (2, "b", None), (3, "c", "dlq")], new.schema)
    assert_df_equality(read, expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.spark
def test_a_failed_commit_leaves_nothing_a_reader_sees(
    blob_audit: BlobAudit, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltalake import DeltaTable

    table = configured(blob_audit).child("audit")
    frame = spark.createDataFrame([(1, "a"), (2, "b")], "n long, message_id string")
    append_dataframe(frame, table, "first")

    def refuse(*_: Any, **__: Any) -> None:
        raise OSError("the commit failed")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", refuse)
    with pytest.raises(OSError, match="the commit failed"):
        append_dataframe(frame.repartition(2), table, "second")
    monkeypatch.undo()

    written = [f.path for f in table.filesystem().get_file_info(_everything())]
    assert any(p.startswith("syphon-second-") for p in written)  # the files were written
    assert sorted(r["n"] for r in read_table(table).to_pylist()) == [1, 2]  # in no commit
    read = read_dataframe(spark, table, frame.schema)
    assert read is not None
    assert_df_equality(read, frame, ignore_row_order=True, ignore_nullable=True)


def _everything(below: str = "") -> Any:
    from pyarrow import fs

    return fs.FileSelector(below, recursive=True)

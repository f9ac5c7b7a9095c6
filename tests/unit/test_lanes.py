"""The replay's rules, batch by batch, with a fake ``send``: no Spark, no Service Bus.

Every skip reason, the busy back-off, the resend mark and the ordering promise (a lane's
next batch is never sent after one of its batches failed) fail here when broken.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from syphon.core.timespan import timedelta_to_ticks
from syphon.job.replay.lanes import Attempt, Clocks, CreditPacer, Replayer, ReplaySettings, ttl_left
from syphon.servicebus.sending import Sent

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
ORDERS = ("contoso", "orders")


def rec(
    seq: int, batch: str, key: str | None = "k1", dest: tuple[str, str] = ORDERS, **changes: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "backlog_queue": "contoso/x-servicebus-transfer/0",
        "sequence_number": seq,
        "primary": dest[0],
        "destination": dest[1],
        "partition_key_effective": key,
        "batch_id": batch,
        "snapshot_matches": True,
        "in_doubt": False,
        "original_time_to_live_ticks": None,
        "original_enqueued_time": NOW - timedelta(minutes=5),
    }
    row.update(changes)
    return row


class FakeService:
    """Answers sends from a script: per destination, a list of statuses (the last one
    repeats); records what was sent."""

    def __init__(self, script: dict[tuple[str, str], list[Sent]] | None = None) -> None:
        self.script = script or {}
        self.sent: list[tuple[tuple[str, str], list[int]]] = []
        self.attempts = 0

    def send(self, dest: tuple[str, str], messages: list[Any]) -> Sent:
        self.attempts += 1
        answers = self.script.get(dest, [Sent("sent")])
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if answer.status == "sent":
            self.sent.append((dest, [m["sequence_number"] for m in messages]))
        return answer


def build(rec: Any, ttl: timedelta | None, now: datetime) -> Any:
    if rec.get("unbuildable"):
        raise ValueError("the SDK refuses it")
    return {"sequence_number": rec["sequence_number"], "ttl": ttl}


def replayer(
    service: FakeService,
    skip: dict[tuple[str, str], str | None] | None = None,
    settings: ReplaySettings | None = None,
    **kwargs: Any,
) -> Replayer:
    sleeps: list[float] = []
    r = Replayer(
        settings or ReplaySettings(),
        skip or {},
        service.send,
        build,
        attempt=Attempt(**kwargs),
        clocks=Clocks(now=lambda: NOW, sleep=sleeps.append),
    )
    r.sleeps = sleeps  # type: ignore[attr-defined]
    return r


def outcomes(results: Iterable[dict[str, Any]]) -> list[tuple[int, str, str | None]]:
    return [(r["sequence_number"], r["outcome"], r["detail"]) for r in results]


def test_batches_are_sent_in_order_and_counted_once() -> None:
    service = FakeService()
    r = replayer(service)
    first = r.replay([rec(1, "b0"), rec(2, "b0")])
    second = r.replay([rec(3, "b1")])
    assert outcomes(first + second) == [(1, "sent", None), (2, "sent", None), (3, "sent", None)]
    assert service.sent == [(ORDERS, [1, 2]), (ORDERS, [3])]
    assert [x["transfers"] for x in first] == [1, 0]  # counted on the batch's first row
    assert r.batches_sent == 2


def test_after_a_failed_batch_the_lanes_later_batches_are_skipped_and_other_lanes_go_on() -> None:
    service = FakeService(
        {ORDERS: [Sent("sent"), Sent("failed", "MessageSizeExceededError"), Sent("sent")]}
    )
    r = replayer(service)
    results = [
        *r.replay([rec(1, "k1#0")]),
        *r.replay([rec(2, "k1#1")]),  # fails
        *r.replay([rec(3, "k1#2")]),  # never sent after its lane failed
        *r.replay([rec(4, "k2#0", key="k2")]),  # another lane of the destination
        *r.replay([rec(5, "k1#3")]),
    ]
    assert outcomes(results) == [
        (1, "sent", None),
        (2, "failed", "MessageSizeExceededError"),
        (3, "skipped", "earlier_batch_failed"),
        (4, "sent", None),
        (5, "skipped", "earlier_batch_failed"),
    ]
    assert [seqs for _, seqs in service.sent] == [[1], [4]]


def test_a_lane_an_earlier_wave_broke_sends_nothing_and_the_batchs_other_lanes_go() -> None:
    """A later wave's task starts with the lanes an earlier wave of the run broke: their
    messages are skipped as if their earlier batch had failed in this task (the next run
    sends them, in order), the same destination's other keys go."""
    service = FakeService({ORDERS: [Sent("sent")]})
    r = replayer(service, broken={(*ORDERS, "a"): "earlier_batch_failed"})
    results = r.replay([rec(1, "o##0", key="a"), rec(2, "o##0", key="b")])
    assert outcomes(results) == [(1, "skipped", "earlier_batch_failed"), (2, "sent", None)]
    assert [seqs for _, seqs in service.sent] == [[2]]


def test_a_lane_held_back_for_a_message_the_run_could_not_read_says_so_and_stays_held() -> None:
    """A key one of whose messages another receiver holds locked: the run sends none of
    its messages, each skipped with the reason, even after a batch of it would go."""
    service = FakeService({ORDERS: [Sent("sent"), Sent("sent")]})
    r = replayer(service, broken={(*ORDERS, "a"): "earlier_message_unseen"})
    first = r.replay([rec(1, "o##0", key="a"), rec(2, "o##0", key="b")])
    second = r.replay([rec(3, "o##1", key="a"), rec(4, "o##1", key="b")])
    assert outcomes(first + second) == [
        (1, "skipped", "earlier_message_unseen"),
        (2, "sent", None),
        (3, "skipped", "earlier_message_unseen"),
        (4, "sent", None),
    ]
    assert [seqs for _, seqs in service.sent] == [[2], [4]]


def test_a_many_key_batch_that_fails_breaks_each_of_its_keys_and_no_other() -> None:
    """A destination's batch holds several keys (neither partitioned nor sessionful): a
    failed one breaks every key in it; a later batch sends its other keys and skips the
    broken ones' messages, so no key's order is ever broken."""
    service = FakeService({ORDERS: [Sent("failed", "ServiceBusError"), Sent("sent")]})
    r = replayer(service)
    first = [rec(1, "o##0", key="a"), rec(2, "o##0", key="b")]  # fails
    second = [
        rec(3, "o##1", key="a"),
        rec(4, "o##1", key="c"),
        rec(5, "o##1", key="b"),
        rec(6, "o##1", key=None),
    ]
    results = [*r.replay(first), *r.replay(second)]
    assert sorted(outcomes(results)) == [
        (1, "failed", "ServiceBusError"),
        (2, "failed", "ServiceBusError"),
        (3, "skipped", "earlier_batch_failed"),
        (4, "sent", None),
        (5, "skipped", "earlier_batch_failed"),
        (6, "sent", None),
    ]
    assert [seqs for _, seqs in service.sent] == [[4, 6]]


def test_a_many_key_batch_whose_keys_all_broke_sends_nothing() -> None:
    service = FakeService({ORDERS: [Sent("failed", "ServiceBusError"), Sent("sent")]})
    r = replayer(service)
    r.replay([rec(1, "o##0", key="a"), rec(2, "o##0", key="b")])
    later = r.replay([rec(3, "o##1", key="b"), rec(4, "o##1", key="a")])
    assert outcomes(later) == [
        (3, "skipped", "earlier_batch_failed"),
        (4, "skipped", "earlier_batch_failed"),
    ]
    assert service.attempts == 1


def test_an_unbuildable_message_breaks_every_key_of_its_many_key_batch() -> None:
    service = FakeService()
    r = replayer(service)
    first = r.replay(
        [
            rec(1, "o##0", key="a"),
            rec(2, "o##0", key="b", unbuildable=True),
            rec(3, "o##0", key="c"),
        ]
    )
    later = r.replay([rec(4, "o##1", key="c"), rec(5, "o##1", key="d")])
    assert outcomes(first) == [
        (1, "skipped", "batch_not_sendable"),
        (2, "skipped", "not_sendable"),
        (3, "skipped", "batch_not_sendable"),
    ]
    assert outcomes(later) == [(4, "skipped", "earlier_batch_failed"), (5, "sent", None)]


def test_keyless_batches_do_not_break_each_other() -> None:
    service = FakeService({ORDERS: [Sent("failed", "X"), Sent("sent")]})
    r = replayer(service)
    results = [*r.replay([rec(1, "n0", key=None)]), *r.replay([rec(2, "n1", key=None)])]
    assert outcomes(results) == [(1, "failed", "X"), (2, "sent", None)]


def test_a_destination_that_keeps_failing_is_skipped_after_the_threshold() -> None:
    service = FakeService({ORDERS: [Sent("failed", "X")]})
    r = replayer(service, settings=ReplaySettings(failed_batches_per_destination=2))
    other = ("contoso", "payments")
    results = [
        *r.replay([rec(1, "a", key="a")]),
        *r.replay([rec(2, "b", key="b")]),
        *r.replay([rec(3, "c", key="c")]),  # a fresh lane, but the destination is failing
        *r.replay([rec(4, "p", key="a", dest=other)]),  # another destination goes on
    ]
    assert outcomes(results) == [
        (1, "failed", "X"),
        (2, "failed", "X"),
        (3, "skipped", "destination_failing"),
        (4, "sent", None),
    ]
    assert service.attempts == 3


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("MessagingEntityNotFoundError", "destination_missing"),
        ("MessagingEntityDisabledError", "destination_unavailable"),
    ],
)
def test_a_destination_a_send_finds_missing_or_disabled_is_skipped_from_then_on(
    error: str, reason: str
) -> None:
    service = FakeService({ORDERS: [Sent("failed", error)]})
    r = replayer(service)
    other = ("contoso", "payments")
    results = [
        *r.replay([rec(1, "a", key="a")]),
        *r.replay([rec(2, "b", key="b")]),  # a fresh lane: skipped for the destination
        *r.replay([rec(3, "p", key="a", dest=other)]),
    ]
    assert outcomes(results) == [(1, "failed", error), (2, "skipped", reason), (3, "sent", None)]
    assert service.attempts == 2


def test_destinations_the_probes_skipped_are_skipped_with_the_probes_reason() -> None:
    service = FakeService()
    r = replayer(service, skip={ORDERS: "destination_missing", ("contoso", "ok"): None})
    assert outcomes(r.replay([rec(1, "b"), rec(2, "b")])) == [
        (1, "skipped", "destination_missing"),
        (2, "skipped", "destination_missing"),
    ]
    assert outcomes(r.replay([rec(3, "c", dest=("contoso", "ok"))])) == [(3, "sent", None)]
    assert service.attempts == 1


def test_a_changed_or_expired_message_is_skipped_and_the_rest_of_its_batch_is_sent() -> None:
    service = FakeService()
    r = replayer(service)
    expired = {"original_time_to_live_ticks": timedelta_to_ticks(timedelta(minutes=1))}
    alive = {"original_time_to_live_ticks": timedelta_to_ticks(timedelta(hours=1))}
    results = r.replay(
        [
            rec(1, "b", snapshot_matches=False),
            rec(2, "b", **expired),
            rec(3, "b", **alive),
        ]
    )
    assert outcomes(results) == [
        (1, "skipped", "backlog_changed"),
        (2, "skipped", "expired_before_send"),
        (3, "sent", None),
    ]
    assert service.sent == [(ORDERS, [3])]


def test_the_ttl_sent_is_what_is_left_of_the_original() -> None:
    ticks = timedelta_to_ticks(timedelta(hours=1))
    left = ttl_left(
        {
            "original_time_to_live_ticks": ticks,
            "original_enqueued_time": NOW - timedelta(minutes=20),
        },
        NOW,
    )
    assert left == timedelta(minutes=40)
    assert ttl_left({"original_time_to_live_ticks": None}, NOW) is None
    naive = (NOW - timedelta(minutes=20)).replace(tzinfo=None)
    assert ttl_left(
        {"original_time_to_live_ticks": ticks, "original_enqueued_time": naive}, NOW
    ) == timedelta(minutes=40)


def test_a_message_the_sdk_refuses_stops_its_batch_and_breaks_its_lane() -> None:
    service = FakeService()
    r = replayer(service)
    results = [
        *r.replay([rec(1, "b0"), rec(2, "b0", unbuildable=True), rec(3, "b0")]),
        *r.replay([rec(4, "b1")]),
    ]
    assert outcomes(results) == [
        (1, "skipped", "batch_not_sendable"),
        (2, "skipped", "not_sendable"),
        (3, "skipped", "batch_not_sendable"),
        (4, "skipped", "earlier_batch_failed"),
    ]
    assert service.sent == []


def test_server_busy_backs_off_doubling_and_sends_the_same_batch_again() -> None:
    busy = Sent("busy", "ServiceBusServerBusyError")
    service = FakeService({ORDERS: [busy, busy, busy, Sent("sent")]})
    settings = ReplaySettings(busy_retries=5, backoff_seconds=1.0, backoff_max_seconds=3.0)
    r = replayer(service, settings=settings)
    results = r.replay([rec(1, "b"), rec(2, "b")])
    assert outcomes(results) == [(1, "sent", None), (2, "sent", None)]
    assert (results[0]["transfers"], results[0]["busy_retries"]) == (4, 3)
    assert r.sleeps == [1.0, 2.0, 3.0]  # type: ignore[attr-defined]


def test_busy_retries_exhausted_fail_the_batch_and_break_the_lane() -> None:
    busy = Sent("busy", "ServiceBusServerBusyError")
    service = FakeService({ORDERS: [busy]})
    r = replayer(service, settings=ReplaySettings(busy_retries=2))
    results = [*r.replay([rec(1, "b0")]), *r.replay([rec(2, "b1")])]
    assert outcomes(results) == [
        (1, "failed", "ServiceBusServerBusyError"),
        (2, "skipped", "earlier_batch_failed"),
    ]
    assert results[0]["busy_retries"] == 3
    assert service.attempts == 3


def test_a_lost_answer_is_in_doubt_and_breaks_the_lane() -> None:
    service = FakeService({ORDERS: [Sent("in_doubt", "OperationTimeoutError")]})
    r = replayer(service)
    results = [*r.replay([rec(1, "b0")]), *r.replay([rec(2, "b1")])]
    assert outcomes(results) == [
        (1, "in_doubt", "OperationTimeoutError"),
        (2, "skipped", "earlier_batch_failed"),
    ]


def test_a_namespace_fault_skips_the_rest_of_that_primary_only() -> None:
    fault = Sent("in_doubt", "ServiceBusConnectionError", namespace_fault=True)
    elsewhere = ("fabrikam", "orders")
    service = FakeService({ORDERS: [fault]})
    r = replayer(service)
    results = [
        *r.replay([rec(1, "a", key="a")]),
        *r.replay([rec(2, "b", key="b", dest=("contoso", "payments"))]),
        *r.replay([rec(3, "c", key="c", dest=elsewhere)]),
    ]
    assert outcomes(results) == [
        (1, "in_doubt", "ServiceBusConnectionError"),
        (2, "skipped", "namespace_fault"),
        (3, "sent", None),
    ]


@pytest.mark.parametrize(("in_doubt", "retried"), [(True, False), (False, True)])
def test_a_resend_of_something_in_doubt_is_marked(in_doubt: bool, retried: bool) -> None:
    r = replayer(FakeService(), retried=retried)
    assert outcomes(r.replay([rec(1, "b", in_doubt=in_doubt), rec(2, "b")])) == [
        (1, "sent", "resent_in_doubt"),
        (2, "sent", "resent_in_doubt" if retried else None),
    ]


def test_the_fail_point_hears_every_batch_sent() -> None:
    heard: list[int] = []
    r = replayer(FakeService(), on_sent=heard.append)
    for i in range(3):
        r.replay([rec(i, f"b{i}", key=f"k{i}")])
    assert heard == [1, 2, 3]


def test_a_batch_that_failed_or_is_in_doubt_is_not_counted_as_sent() -> None:
    heard: list[int] = []
    service = FakeService({ORDERS: [Sent("failed", "X"), Sent("in_doubt", "Y"), Sent("sent")]})
    r = replayer(service, on_sent=heard.append)
    for i in range(3):
        r.replay([rec(i, f"b{i}", key=f"k{i}")])
    assert (r.batches_sent, heard) == (1, [1])


def test_by_default_an_always_busy_destination_is_tried_nine_times() -> None:
    service = FakeService({ORDERS: [Sent("busy", "ServiceBusServerBusyError")]})
    (row,) = replayer(service).replay([rec(1, "b")])
    assert (row["outcome"], row["transfers"], row["busy_retries"]) == ("failed", 9, 9)
    assert service.attempts == 9


def test_skipped_rows_count_no_transfers_and_no_busy_answers() -> None:
    service = FakeService({ORDERS: [Sent("failed", "X")]})
    r = replayer(service)
    rows = [*r.replay([rec(1, "a"), rec(2, "a")]), *r.replay([rec(3, "b")])]
    assert [(x["transfers"], x["busy_retries"]) for x in rows] == [(1, 0), (0, 0), (0, 0)]


def test_a_key_breaks_only_its_own_primarys_lane_where_two_primaries_share_names() -> None:
    other = ("fabrikam", "orders")  # the same entity name and key on another primary
    service = FakeService({ORDERS: [Sent("failed", "X")]})
    r = replayer(service)
    results = [
        *r.replay([rec(1, "a#0")]),
        *r.replay([rec(2, "f#0", dest=other)]),
        *r.replay([rec(3, "f#1", dest=other)]),
    ]
    assert outcomes(results) == [(1, "failed", "X"), (2, "sent", None), (3, "sent", None)]


@pytest.mark.parametrize("threshold", [0, 1])
def test_the_failing_threshold_counts_failures_from_none(threshold: int) -> None:
    service = FakeService({ORDERS: [Sent("failed", "X")]})
    r = replayer(service, settings=ReplaySettings(failed_batches_per_destination=threshold))
    rows = [*r.replay([rec(1, "a", key="a")]), *r.replay([rec(2, "b", key="b")])]
    expected = ["destination_failing"] * 2 if threshold == 0 else ["X", "destination_failing"]
    assert [d for _, _, d in outcomes(rows)] == expected


def test_the_default_back_off_starts_at_a_second_and_doubles_up_to_thirty() -> None:
    busy = Sent("busy", "ServiceBusServerBusyError")
    service = FakeService({ORDERS: [busy] * 7 + [Sent("sent")]})
    r = replayer(service)  # ReplaySettings() as a run uses them
    results = r.replay([rec(1, "b"), rec(2, "b")])
    assert outcomes(results) == [(1, "sent", None), (2, "sent", None)]
    assert r.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]  # type: ignore[attr-defined]
    # the batch's transfers and busy answers are counted once, on its first row
    assert [(x["transfers"], x["busy_retries"]) for x in results] == [(8, 7), (0, 0)]


def test_by_default_a_destination_is_given_up_after_three_failed_batches() -> None:
    service = FakeService({ORDERS: [Sent("failed", "MessageSizeExceededError")]})
    r = replayer(service)
    results = [x for k in range(5) for x in r.replay([rec(k, f"b{k}", key=f"k{k}")])]
    assert [d for _, _, d in outcomes(results)] == ["MessageSizeExceededError"] * 3 + [
        "destination_failing"
    ] * 2


def test_a_message_with_no_ttl_left_is_not_sent() -> None:
    ticks = timedelta_to_ticks(timedelta(minutes=5))  # enqueued 5 minutes before NOW
    service = FakeService()
    results = replayer(service).replay([rec(1, "b", original_time_to_live_ticks=ticks)])
    assert outcomes(results) == [(1, "skipped", "expired_before_send")]


def test_ttl_ticks_are_cut_to_whole_microseconds() -> None:
    record = rec(1, "b", original_time_to_live_ticks=15, original_enqueued_time=None)
    assert ttl_left(record, NOW) == timedelta(microseconds=1)


def test_an_unbuildable_first_message_skips_its_batch_once_per_message() -> None:
    service = FakeService()
    batch = [rec(1, "b", unbuildable=True), rec(2, "b"), rec(3, "b")]
    assert outcomes(replayer(service).replay(batch)) == [
        (1, "skipped", "not_sendable"),
        (2, "skipped", "batch_not_sendable"),
        (3, "skipped", "batch_not_sendable"),
    ]


def test_a_retried_task_marks_only_what_it_sent_as_resent() -> None:
    ledger = ("contoso", "ledger")
    service = FakeService(
        {
            ORDERS: [Sent("failed", "MessagingEntityDisabledError")],
            ledger: [Sent("in_doubt", "OperationTimeoutError")],
        }
    )
    r = replayer(service, retried=True)
    results = [*r.replay([rec(1, "b0")]), *r.replay([rec(2, "b1", dest=ledger)])]
    assert outcomes(results) == [
        (1, "failed", "MessagingEntityDisabledError"),
        (2, "in_doubt", "OperationTimeoutError"),
    ]


class FakeClock:
    """A monotonic clock that only moves when the pacer sleeps."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def test_a_budget_is_split_evenly_and_whole_for_one_task_or_none() -> None:
    settings = ReplaySettings(credits_per_second={"contoso": 9.0})
    assert settings.split(2).credits_per_second == {"contoso": 4.5}
    assert settings.split(1).credits_per_second == {"contoso": 9.0}
    assert settings.split(0).credits_per_second == {"contoso": 9.0}


def test_a_budget_below_one_credit_a_second_paces_and_no_budget_never_waits() -> None:
    clock = FakeClock(now=0.25)  # a monotonic clock may read anything
    pacer = CreditPacer({"slow": 0.5, "none": 0.0}, clock, clock.sleep)
    pacer.take("none", 5)
    pacer.take("slow", 1)
    pacer.take("slow", 1)  # two seconds after the first
    assert clock.sleeps == [2.0]
    assert pacer.waited == 2.0


def test_the_pacer_spends_a_primarys_budget_and_no_more() -> None:
    clock = FakeClock()
    pacer = CreditPacer({"contoso": 100.0}, clock, clock.sleep)
    for _ in range(3):
        pacer.take("contoso", 50)  # half a second's worth each
    pacer.take("fabrikam", 10_000)  # no budget: never waits
    assert clock.sleeps == [0.5, 0.5]
    clock.now += 5  # idle time is not saved up beyond the next batch
    pacer.take("contoso", 50)
    pacer.take("contoso", 50)
    assert clock.sleeps == [0.5, 0.5, 0.5]
    assert pacer.waited == pytest.approx(1.5)


def test_the_replay_paces_each_transfer_within_its_tasks_share_of_the_budget() -> None:
    clock = FakeClock()
    service = FakeService({ORDERS: [Sent("busy"), Sent("sent")]})
    settings = ReplaySettings(credits_per_second={"contoso": 8.0}, backoff_seconds=0.0)
    share = settings.split(2)  # two tasks: four credits a second each
    assert share.credits_per_second == {"contoso": 4.0}
    assert settings.credits_per_second == {"contoso": 8.0}
    clocks = Clocks(now=lambda: NOW, sleep=clock.sleep, monotonic=clock)
    r = Replayer(share, {}, service.send, build, clocks=clocks)
    r.replay([rec(1, "a"), rec(2, "a")])  # refused busy, then sent: two transfers
    r.replay([rec(3, "b", key="b")])
    r.replay([rec(4, "p", key="p", dest=("fabrikam", "orders"))])  # no budget there
    # each transfer of the two-message batch holds half a second, the next waits for it
    assert [s for s in clock.sleeps if s] == [0.5, 0.5]
    assert [seqs for _, seqs in service.sent] == [[1, 2], [3], [4]]

"""A discard's reason is the operator's words, kept in the audit: checked before
anything is read."""

from __future__ import annotations

import pytest

from syphon.core.discard import DUPLICATES, REASON_LIMIT, SELECTED, Discard, DiscardError
from syphon.core.errors import ExitCode


def test_a_reason_is_kept_as_given_less_surrounding_space() -> None:
    assert Discard(SELECTED, "  INC-4711: schema v0  ").reason == "INC-4711: schema v0"
    assert Discard(DUPLICATES, "x" * REASON_LIMIT).reason == "x" * REASON_LIMIT


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("", "--reason is empty"),
        ("   ", "--reason is empty"),
        ("x" * (REASON_LIMIT + 1), f"longer than {REASON_LIMIT}"),
        ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKey=abc", "holds a secret"),
        ("token ?sv=2024&sig=abc", "holds a secret"),
    ],
)
def test_a_reason_that_is_empty_too_long_or_a_secret_is_refused(reason: str, message: str) -> None:
    with pytest.raises(DiscardError, match=message) as info:
        Discard(SELECTED, reason)
    assert info.value.exit_code == ExitCode.CONFIG
    assert "abc" not in str(info.value)


def test_a_discard_takes_duplicates_or_selected_messages_only() -> None:
    with pytest.raises(ValueError, match="duplicates or selected"):
        Discard("everything", "why")

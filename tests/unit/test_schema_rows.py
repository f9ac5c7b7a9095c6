"""A row of a schema is built by column name, so no caller spells a schema's order."""

from __future__ import annotations

import pytest

from syphon.core.schema import DESTINATIONS, names
from syphon.servicebus.entities import row_of


def test_a_row_follows_the_schemas_order_whatever_the_order_given() -> None:
    values = {n: f"v-{n}" for n in reversed(names(DESTINATIONS))}
    assert row_of(DESTINATIONS, **values) == tuple(f"v-{n}" for n in names(DESTINATIONS))


def test_a_missing_or_unknown_column_is_refused_by_name() -> None:
    values = {n: 1 for n in names(DESTINATIONS)}
    del values["partitioned"]
    with pytest.raises(ValueError, match="partitioned"):
        row_of(DESTINATIONS, **values)
    with pytest.raises(ValueError, match="colour"):
        row_of(DESTINATIONS, **{n: 1 for n in names(DESTINATIONS)}, colour=1)

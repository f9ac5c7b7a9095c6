"""Reads a run report back: its sections, tables and every reference it makes."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class ParsedReport:
    sections: dict[str, list[list[list[str]]]] = field(default_factory=dict)  # id -> tables
    svgs: dict[str, int] = field(default_factory=dict)  # section id -> inline <svg> count
    text: dict[str, str] = field(default_factory=dict)  # section id -> its text
    references: list[tuple[str, str, str]] = field(default_factory=list)  # tag, attr, value
    tags: set[str] = field(default_factory=set)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.out = ParsedReport()
        self.section: str | None = None
        self.table: list[list[str]] | None = None
        self.row: list[str] | None = None
        self.cell: list[str] | None = None
        self.svg_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.tags.add(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "action") and value:
                self.out.references.append((tag, name, value))
            if name == "style" and value and "url(" in value:
                self.out.references.append((tag, name, value))
        if tag == "section":
            self.section = dict(attrs).get("id") or "?"
            self.out.sections[self.section] = []
            self.out.svgs[self.section] = 0
            self.out.text[self.section] = ""
        elif tag == "svg":
            if self.svg_depth == 0 and self.section:
                self.out.svgs[self.section] += 1
            self.svg_depth += 1
        elif tag == "table" and self.section:
            self.table = []
            self.out.sections[self.section].append(self.table)
        elif tag == "tr" and self.table is not None:
            self.row = []
            self.table.append(self.row)
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.section = None
        elif tag == "svg":
            self.svg_depth -= 1
        elif tag == "table":
            self.table = None
        elif tag in ("td", "th") and self.row is not None and self.cell is not None:
            self.row.append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)
        if self.section and self.svg_depth == 0:
            self.out.text[self.section] += data


def parse_report(page: str) -> ParsedReport:
    parser = _Parser()
    parser.feed(page)
    parser.close()
    return parser.out


def table_dict(table: list[list[str]]) -> dict[str, dict[str, str]]:
    """A table with a header row, keyed by its first column."""
    header, *rows = table
    return {row[0]: dict(zip(header[1:], row[1:], strict=True)) for row in rows}

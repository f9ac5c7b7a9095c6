"""Comments and docstrings speak of the code as it is.

They say what the code does and why, in the terms of the Service Bus's own documented
behaviour: never a document that is not in the repository, never the code's history
(that belongs in commit messages). Read with ``tokenize`` (comments) and ``ast``
(docstrings) from every module under ``src/``; the words that give either away are the
pattern below. "before the" alone is not one of them (a message enqueued before the
watermark is the code as it is); "recorded before the", "written before", "planned
before" are. Nor is a random generator's seed ("seed it in tests"); "the seed" and
"seed 004" are.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

#: A document outside the repository, or the code's past.
GIVEAWAYS = re.compile(
    r"DESIGN\.md|STYLE\.md|NOTES-|\bthe seeds?\b|\bseed(?:'s| \d+)|added with|"
    r"earlier syphon|"
    r"\b(?:recorded|written|planned|made|built) before\b|\bused to\b|"
    r"\bformerly\b|\bpreviously\b",
    re.IGNORECASE,
)


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring in ``source``."""
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                out.append((node.body[0].lineno, doc))
    return out


def giveaways(root: Path = SRC) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for line, text in prose(path.read_text(encoding="utf-8")):
            for match in GIVEAWAYS.finditer(text):
                found.append(f"{path.relative_to(root)}:{line}: {match.group(0)!r}")
    return found


def test_no_comment_or_docstring_cites_an_outside_document_or_tells_history() -> None:
    assert giveaways() == []


def test_the_check_reads_comments_and_docstrings_only(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        '"""As DESIGN.md says."""\n'
        "seed = 1  # the seed's default; seed the generator\n"
        "def f():\n"
        '    """Rows recorded before the probes."""\n'
        "    return 'no longer a comment'\n",
        encoding="utf-8",
    )
    assert giveaways(tmp_path) == [
        "m.py:2: 'the seed'",
        "m.py:1: 'DESIGN.md'",
        "m.py:4: 'recorded before'",
    ]


#: Files beside the code that a reader of the repository opens.
PROJECT_FILES = ("pyproject.toml", "README.md", "dev.sh", ".ci/run", "conf", "jobs", "notebooks")

#: A document outside the repository (the project's notes, the seeds' folder).
OUTSIDE = re.compile(r"DESIGN\.md|STYLE\.md|NOTES-|\.\./shared|\bseeds/", re.IGNORECASE)


def test_no_project_file_cites_a_document_outside_the_repository() -> None:
    root = SRC.parent
    found = []
    for name in PROJECT_FILES:
        paths = [root / name] if (root / name).is_file() else sorted((root / name).rglob("*"))
        for path in paths:
            if not path.is_file() or path.suffix in (".pyc", ".whl"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(root)}: {m.group(0)!r}" for m in OUTSIDE.finditer(text)]
    assert found == []

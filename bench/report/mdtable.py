"""Markdown tables whose cells stay cells: a pipe in a text cell would end it, a line break its
row, and an angle bracket would be markup in the report's HTML twin (a failed case's reason quotes
its traceback: `<lambda>`, `a | b`)."""
from __future__ import annotations

import pandas as pd


def cell(value):
    """A text cell as one line of literal text; anything else as it is."""
    if not isinstance(value, str):
        return value
    return " ".join(value.splitlines()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def markdown(table: pd.DataFrame, index: bool = False) -> str:
    """`table.to_markdown(index=index)` with every text cell, label and header made literal."""
    literal = table.apply(lambda column: column.map(cell)) if len(table.columns) else table
    literal = literal.rename(index=cell, columns=cell)
    return literal.to_markdown(index=index)

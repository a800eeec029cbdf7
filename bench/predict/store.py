"""Predictions files: what `bench predict` writes and `bench report` draws beside the measured
cases. JSON with its own schema, so that no reader of results files mistakes it for one; no
torch here (the report reads these)."""
from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "parabench-predictions/1"
SUFFIX = ".predictions.json"


class PredictionsError(ValueError):
    pass


def document(predictions: list[dict], validation: list[dict] | None, settings: dict) -> dict:
    """`validation` None: not validated; a list (maybe empty): the pairs found."""
    return {"schema": SCHEMA, "settings": settings, "predictions": predictions, "validation": validation}


def write(path: Path, doc: dict) -> None:
    from bench.cases.results import atomic_write_bytes

    atomic_write_bytes(Path(path), (json.dumps(doc, indent=1, default=str) + "\n").encode())


def load(path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise PredictionsError(f"{path}: cannot read a predictions file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise PredictionsError(f"{path}: not a {SCHEMA} file (written by `bench predict`)")
    if not isinstance(doc.get("predictions"), list):
        raise PredictionsError(f"{path}: a predictions file without its 'predictions' list")
    doc["path"] = str(path)
    return doc


def beside(paths: list[Path]) -> list[Path]:
    """The predictions files in the folders of `paths` (results files), oldest first."""
    folders = {Path(p).parent for p in paths}
    return sorted({f for folder in folders for f in folder.glob(f"*{SUFFIX}")}, key=lambda f: (f.stat().st_mtime, f))

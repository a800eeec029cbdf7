"""Every figure a document states comes from a committed file (docs/claims.toml), and every
committed results file says which command wrote it, where. Torch-free and fast: `pytest -k claims`."""
import re
import subprocess

import pytest

from bench.cases import results
from tests import claims, provenance

CLAIMS, SCAN = claims.load()
ENFORCED, PENDING = claims.documents(SCAN)


def _id(claim):
    words = re.sub(r"\W+", "-", claim.text)[:40]
    return f"{claim.doc}:{words}"


@pytest.mark.parametrize("claim", [c for c in CLAIMS if c.doc in ENFORCED], ids=_id)
def test_each_claim_is_recomputed_from_its_file(claim):
    """Its text stands once in its document, and each figure comes out of its expression as printed."""
    assert claims.check(claim) == []


@pytest.mark.parametrize("doc", ENFORCED)
def test_no_figure_without_a_source(doc):
    """Every figure of the document lies inside a declared claim's text."""
    missing = [claims.context(doc, f) for f in claims.undeclared(doc, CLAIMS)]
    assert not missing, "figures no claim in docs/claims.toml declares:\n" + "\n".join(missing)


def test_the_gpus_and_dates_a_sentence_names_are_those_of_its_files():
    """A GPU model, a GPU count or a date in a claim's text is one of the rows behind it: "H100"
    for "H200", or "8 GPUs" for "4 GPUs", next to a figure fails, though every number holds."""
    import dataclasses

    wrong = {c.where(): w for c in CLAIMS if (w := claims.hardware_words(c))}
    assert not wrong, wrong
    named = [c for c in CLAIMS if "NVIDIA H200" in c.text and claims.hardware_words(c) == []
             and any(p.suffix == ".json" and p.parent.name == "baselines" for p in claims._files_behind(c))]
    assert named, "no claim names its GPU beside a results file"
    for claim in named:
        assert claims.hardware_words(dataclasses.replace(claim, text=claim.text.replace("H200", "H100")))
    sized = [c for c in CLAIMS if re.search(r"\b4 GPUs\b", c.text)]
    caught = [c for c in sized
              if claims.hardware_words(dataclasses.replace(c, text=c.text.replace("4 GPUs", "8 GPUs")))]
    assert caught, [c.where() for c in sized]


def test_a_bound_in_words_holds_for_its_worst_case(monkeypatch):
    """"within 0.5%" over a worst case of 0.511% rounds right and is still false: a figure after
    within, at most, under, below or less than is a bound its data keeps to."""
    import dataclasses

    claim = next(c for c in CLAIMS if "it matches ddp within 0.6%" in c.text)
    assert claims.check(claim) == []
    document = (claims.REPO / claim.doc).read_text().replace("within 0.6%", "within 0.5%")
    tightened = dataclasses.replace(claim, text=claim.text.replace("within 0.6%", "within 0.5%"))
    original = claims.Path.read_text
    monkeypatch.setattr(claims.Path, "read_text",
                        lambda self, *a, **k: document if self == claims.REPO / claim.doc else original(self, *a, **k))
    assert any("states a bound of 0.5" in p for p in claims.check(tightened))


def test_a_changed_number_in_a_results_file_fails_its_claim(monkeypatch):
    """The check reads the committed rows: one number changed there is a claim that no longer holds."""
    claim = next(c for c in CLAIMS if c.text.startswith("| resnet18-small fp32, 1024 | 28.4 k"))
    assert claims.check(claim) == []
    path = claims.REPO / claim.file
    rows = [dict(r) for r in results.load(path)]
    single = next(r for r in rows if r["strategy"] == "single")
    single["items_per_s"] *= 1.01  # 28.44 k -> 28.72 k
    monkeypatch.setitem(claims._LOADED, path, rows)
    problems = claims.check(claim)
    assert len(problems) == 2 and "prints 28.4, its file gives 28.7" in problems[0], problems  # and the efficiency


def test_a_changed_number_in_a_committed_real_run_fails_the_fit_doc(monkeypatch):
    """The fit document's claims read the committed real runs' rows: run-3's 2-GPU FSDP2 peak
    memory moved by 10 MiB is a fake-world table in docs/fit.md that no longer holds."""
    claim = next(c for c in CLAIMS if c.doc == "docs/fit.md" and c.text.startswith("| FSDP2, channels_last |"))
    assert claims.check(claim) == []
    path = claims.REPO / "results/reference/h200x2/predict-validate/run-3/measured.json"
    rows = [dict(r) for r in results.load(path)]
    fsdp2 = next(r for r in rows if r["status"] == "ok" and r["strategy"] == "fsdp2" and r["model"] == "resnet18"
                 and r["precision"] == "fp32" and r["batch_per_gpu"] == 256)
    fsdp2["peak_alloc_mib"] += 10  # 5630.6 -> 5640.6 MiB
    monkeypatch.setitem(claims._LOADED, path, rows)
    problems = claims.check(claim)
    # The measured figure, and the fake world's error against it.
    assert len(problems) == 2 and "prints 5630.6, its file gives 5640.6" in problems[0], problems


def test_a_claim_whose_text_left_its_document_fails():
    claim = claims.Claim("README.md", "a sentence the README does not hold, 12.3 k", ['12.3'])
    assert "stands 0 times" in claims.check(claim)[0]
    twice = claims.Claim("docs/findings.md", "| --- |", [])
    assert "stands" in claims.check(twice)[0] and "want once" in claims.check(twice)[0]


def test_the_scan_finds_figures_and_leaves_names_versions_and_code():
    text = ("DDP scales to 95-99% (21.60 k, x0.98), -3.2% and +17.9%; 17 of the 18 pairs; 1e-4; 27 cases in 127 s.\n"
            "torch 2.11.0+cu130, Python 3.12, cuDNN 9.19 on H200 NV18, resnet18 fp32 at 256 per GPU, 3x224x224, "
            "`--batch-sizes 256 --warmup 5`, [a link](results/run-1.5.json), 2026-11-23, finding 14.\n\n"
            "| case | a | b |\n| --- | --- | --- |\n| 32 per GPU | 3.76 | 0 |\n")
    assert [f.printed for f in claims.figures(text)] == [
        "95", "99", "21.60", "-3.2", "+17.9", "17", "18", "1e-4", "27", "127", "3.76", "0"]
    # (x0.98 is a name-glued number: not a figure by the rule, and not written that way in the docs.)
    figures = {f.printed: f for f in claims.figures(text)}
    assert figures["21.60"].half_unit == pytest.approx(0.005) and figures["1e-4"].half_unit == pytest.approx(0.5e-4)
    assert figures["127"].half_unit == 0.5 and figures["-3.2"].value == -3.2


def test_the_expressions_say_what_is_wrong_in_one_line():
    for expression, message in (('row(strategy="nothing")', "0 rows where"),
                                ('row(model="resnet18")', "rows where"),  # several rows: ambiguous
                                ('doc("results/none.json")', "not a committed file"),
                                ('rows()[0]["no such column"]', "KeyError"),
                                ('"text"', "not a finite number")):
        with pytest.raises(claims.ClaimError, match=message):
            claims.evaluate(expression, "results/reference/h200/h200x4-shard-r18.json")


# --- the documents' links --------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("doc", ENFORCED)
def test_every_link_to_a_file_of_the_repository_exists(doc):
    text = (claims.REPO / doc).read_text()
    broken = [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "mailto:"))
              and not ((claims.REPO / doc).parent / t).exists()]
    assert not broken, f"{doc} links to files that are not in the tree: {broken}"


def test_every_link_of_a_committed_report_points_at_a_committed_file():
    """A report drawn into plots/reference/ links its figures: each must be committed with it (the
    knobs and memory figures of two reports were not)."""
    import posixpath

    files = set(committed("results") + committed("plots"))
    reports = [f for f in files if f.startswith("plots/") and f.endswith(".md")]
    assert reports
    broken = {f: [t for t in LINK.findall((claims.REPO / f).read_text()) if not t.startswith(("http://", "https://"))
                  and posixpath.normpath(posixpath.join(posixpath.dirname(f), t)) not in files] for f in reports}
    assert not any(broken.values()), broken


# --- results and logs as they were written ---------------------------------------------------
def committed(folder="results"):
    listed = subprocess.run(["git", "ls-files", folder], cwd=claims.REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the committed files cannot be listed")
    return listed.stdout.split()


def test_every_committed_results_file_names_the_command_and_output_that_wrote_it():
    files = committed()
    assert any(f.endswith(".log") for f in files) and sum(f.endswith(".json") for f in files) > 20
    assert provenance.check_tree(claims.REPO, files) == []


def test_the_reference_tree_stays_lean():
    files = committed("results") + committed("plots")
    assert len(files) <= 80, len(files)
    assert not [f for f in files if f.startswith("results/") and f.endswith(".py")]
    assert sum((claims.REPO / f).stat().st_size for f in files if f.startswith("plots/")) < 2 * 2**20


def write_rows(path, command, **extra):
    row = {"strategy": "single", "precision": "fp32", "model": "resnet18-small", "batch_per_gpu": 2, "status": "ok",
           "items_per_s": 10.0, "items_per_s_p10": 9.0, "items_per_s_p90": 11.0, "step_ms_p10": 180.0,
           "step_ms_p50": 200.0,
           "step_ms_p90": 220.0, "device": "cpu", "n_gpus": 0, "n_replicas": 1, "host": "vm",
           "date": "2026-11-23T15:24:54+00:00", "command": command, **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    results.write(path, [row])
    return path


def test_an_output_path_edited_after_the_run_is_caught(tmp_path):
    ok = write_rows(tmp_path / "results/reference/h200/a.json", "bench/__main__.py run --out .../a.json")
    renamed = write_rows(tmp_path / "results/reference/h200/b.json", "bench/__main__.py run --out .../a.json")
    moved = write_rows(tmp_path / "results/reference/h100/c.json", "bench/__main__.py run --out results/h200/c.json")
    documented = write_rows(tmp_path / "results/reference/baselines/d.json",
                            "bench/__main__.py run --out results/baselines/d.json")
    default = write_rows(tmp_path / "results/reference/x/bench/run-20261123-152454-vm.json",
                         "run --results-dir .../bench")
    wrong_host = write_rows(tmp_path / "results/reference/x/run-20261123-152454-other.json", "run --results-dir .../x")
    nothing = write_rows(tmp_path / "results/reference/e.json", "bench/__main__.py run --gpus 0")
    found = {p.name: provenance.results_problems(p, tmp_path)
             for p in (ok, renamed, moved, documented, default, wrong_host, nothing)}
    assert found["a.json"] == [] and found["d.json"] == [] and found["run-20261123-152454-vm.json"] == []
    assert "was written as .../a.json, but the file is b.json" in found["b.json"][0]
    assert "lies in results/reference/h100" in found["c.json"][0]
    assert "host other" in found["run-20261123-152454-other.json"][0]
    assert "names no output" in found["e.json"][0]


def test_a_file_uniting_runs_holds_only_rows_written_where_it_lies(tmp_path, monkeypatch):
    """A union (provenance.UNIONS) names its runs by file name; the folder must agree too, or rows
    of another fit-check with the same model and device count would pass."""
    united = "results/reference/h200x2/fit-check/real-vit-large-x2.json"
    monkeypatch.setattr(provenance, "UNIONS", {united: {"real-vit-large-ddp-x2.json"}})
    monkeypatch.setattr(provenance, "MOVED",
                        [("results/fit-check-20261127-171620", "results/reference/h200x2/fit-check")])
    here = write_rows(tmp_path / united, "bench/__main__.py run --out results/fit-check-20261127-171620/"
                      "real-vit-large-ddp-x2.json")
    assert provenance.results_problems(here, tmp_path) == []
    elsewhere = write_rows(tmp_path / united, "bench/__main__.py run --out results/fit-check-20261201-090000/"
                           "real-vit-large-ddp-x2.json")
    assert "the file uniting it lies in results/reference/h200x2/fit-check" in \
        provenance.results_problems(elsewhere, tmp_path)[0]


# Excerpts of two committed logs of `make predict-validate` (as they stood before they left
# the tree): run 1 as written; run 3 with its output lines edited to name the folder the files
# were moved to, while its command still wrote into a dated folder below it.
LOG_AS_WRITTEN = """set -e; dir=/tmp/pv/predict-$(date +%Y%m%d-%H%M%S); mkdir -p $dir; \\
python3 -m bench probe-comm --gpus 0,1 --devices 2 --out $dir/link.comm.json; \\
python3 -m bench run --gpus 0,1 --gpu-counts 1 --anatomy --out $dir/bases.json; \\
probe written to /tmp/pv/predict-20261123-190317/link.comm.json
24 cases (24 ok) written to /tmp/pv/predict-20261123-190317/bases.json and /tmp/pv/predict-20261123-190317/bases.csv
"""
LOG_EDITED = """set -e; dir=results/reference/h200x2/predict-validate/run-3/predict-$(date +%Y%m%d-%H%M%S); \
mkdir -p $dir; \\
python3 -m bench probe-comm --gpus 0,1 --devices 2 --out $dir/link.comm.json; \\
python3 -m bench run --gpus 0,1 --gpu-counts 1 --anatomy --out $dir/bases.json; \\
probe written to results/reference/h200x2/predict-validate/run-3/link.comm.json
24 cases (24 ok) written to results/reference/h200x2/predict-validate/run-3/bases.json and \
results/reference/h200x2/predict-validate/run-3/bases.csv
"""


def test_a_log_whose_output_lines_were_edited_is_caught(tmp_path):
    (tmp_path / "run-1.log").write_text(LOG_AS_WRITTEN)
    (tmp_path / "run-3.log").write_text(LOG_EDITED)
    moved_as_a_whole = {f"results/reference/h200x2/predict-validate/predict-20261123-190317/{n}"
                        for n in ("link.comm.json", "bases.json", "bases.csv")}
    assert provenance.log_problems(tmp_path / "run-1.log", tmp_path, moved_as_a_whole) == []
    as_committed = {f"results/reference/h200x2/predict-validate/run-3/{n}"
                    for n in ("link.comm.json", "bases.json", "bases.csv")}
    edited = provenance.log_problems(tmp_path / "run-3.log", tmp_path, as_committed)
    assert len(edited) == 2 and all("which none of its commands names" in p for p in edited), edited
    # The file the log wrote must be committed under its name, in a folder of its name.
    gone = provenance.log_problems(tmp_path / "run-1.log", tmp_path, set())
    assert len(gone) == 2 and all("no committed file is predict-20261123-190317/" in p for p in gone), gone


def test_the_claims_table_parses_and_names_committed_files():
    for claim in CLAIMS:
        assert claim.values or claims.figures(claim.text) == [], claim.where()
        if claim.file:
            assert (claims.REPO / claim.file).is_file(), claim.where()
    # Every scanned document is enforced: none may sit in `[scan] pending`, unchecked.
    assert {"README.md", "docs/findings.md", "docs/measuring.md", "docs/fit.md"} <= set(ENFORCED)
    assert PENDING == [], f"documents left pending in docs/claims.toml: {PENDING}"


def test_a_changed_window_under_the_hand_loops_median_fails_its_claim(monkeypatch):
    """The README's H100 table reads the hand loop's best; a window of that variant changed in the
    raw data (its median moves) is a claim that no longer holds, though `best` was left as it was."""
    import copy
    import json

    claim = next(c for c in CLAIMS if c.text.startswith("| 256 | `single`, compile reduce-overhead |"))
    assert claims.check(claim) == []
    path = claims.REPO / "results/reference/h100/small/handloop-resnet18-small.json"
    doc = json.loads(path.read_text())
    edited = copy.deepcopy(doc)
    top = next(r for r in edited["rows"] if r["batch_per_gpu"] == 256 and r["variant"] == doc["best"]["256"]["variant"])
    top["windows"] = [w * 1.05 for w in top["windows"]]
    real = claims._read_json
    monkeypatch.setattr(claims, "_read_json", lambda p: edited if p == path else real(p))
    problems = claims.check(claim)
    assert problems and "not the median of its windows" in problems[0], problems


def test_a_changed_step_time_under_images_per_second_fails_its_claim(monkeypatch):
    from bench.cases import results as results_mod

    claim = next(c for c in CLAIMS if c.text.startswith("| resnet18-small fp32, 1024 | 28.4 k"))
    path = claims.REPO / claim.file
    rows = [dict(r) for r in results_mod.load(path)]
    single = next(r for r in rows if r["strategy"] == "single")
    single["step_ms_p50"] *= 1.01  # the measurement moved; items_per_s left as it was
    monkeypatch.delitem(claims._LOADED, path, raising=False)
    real = results_mod.load
    monkeypatch.setattr(claims.results, "load", lambda p: rows if p == path else real(p))
    problems = claims.check(claim)
    assert problems and "does not follow from global_batch / step_ms_p50" in problems[0], problems


def test_a_figure_written_into_a_claim_is_no_source():
    claim = next(c for c in CLAIMS if c.text.startswith("| 256 | `single`, compile reduce-overhead |"))
    literal = claims.Claim(claim.doc, claim.text, ["70.1", "19.4", "71.6", "0.98"], claim.file, claim.let)
    problems = claims.check(literal)
    assert len(problems) == 4 and all("reads no committed file" in p for p in problems), problems
    through_let = claims.Claim(claim.doc, claim.text, claim.values, claim.file, {**claim.let, "hand": "71.6"})
    assert any("71.6" in p and "reads no committed file" in p for p in claims.check(through_let))

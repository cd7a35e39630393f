"""The natural preset: a seeded sample of the packs that need no file at run time."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.cli._run import DEFAULT_TRANSFORMS, PRESET_TRANSFORMS
from audit.rundir import preset_source, rebuild_pairs
from histories._io import load_pairs
from histories.natural import NATURAL_PRESETS, multiwoz
from tests._cli import audit

runner = CliRunner()
PACKS = ("multiwoz", "tau2", "tau2-retail", "tzdata")
EACH = NATURAL_PRESETS["natural"].pairs_per_pack


def test_generate_writes_exactly_the_pairs_a_run_of_the_preset_runs(tmp_path: Path):
    done = audit("generate", "--preset", "natural", "--out", str(tmp_path / "n"))
    assert done.returncode == 0, done.stderr
    written = load_pairs(tmp_path / "n" / "pairs.jsonl")
    source, pairs, digest = preset_source("natural")
    assert [p.to_json() for p in written] == [p.to_json() for p in pairs]
    assert rebuild_pairs(source, tmp_path) == (pairs, digest)  # a report rebuilds them
    manifest = json.loads((tmp_path / "n" / "manifest.json").read_text())
    assert manifest["pairs_per_family"] == {pack: EACH for pack in PACKS}
    # each pack is its own family, and every pair carries its provenance
    assert {p.family for p in pairs} == set(PACKS)
    assert all(p.provenance is not None and p.provenance.source == p.family for p in pairs)
    # another seed draws another sample of the same packs
    _, other, _ = preset_source("natural", seed=1)
    assert {p.pair_id for p in other} != {p.pair_id for p in pairs}
    assert len(other) == len(pairs)


def test_its_transforms_are_the_defaults_that_apply_to_natural_data():
    kept = [t for t in DEFAULT_TRANSFORMS.split(",") if not t.startswith("revalue")]
    # entity, the natural counterpart of revalue, as many as the renamings
    assert PRESET_TRANSFORMS["natural"] == ",".join([*kept, "entity:5"])


def test_a_run_scores_each_pack_as_its_family(tmp_path: Path):
    run = tmp_path / "run"
    done = audit(
        "run", "--preset", "natural", "--conditions", "full,tail", "--transforms",
        "identity,revalue:2,entity:1", "--seed", "11", "--out", str(run), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((run / "summary.json").read_text())
    rows = {(r["condition"], r["family"], r["transform"]): r for r in summary["scores"]}
    # revalue gives natural pairs no instance; entity only packs with an ontology
    assert {t for _, _, t in rows} == {"identity", "entity"}
    assert {f for _, f, t in rows if t == "entity"} == {"all", "multiwoz", "tau2"}
    for pack in PACKS:
        full = rows[("full", pack, "identity")]["source pairs"]["joint_J"]
        # the archive keeps every record, and E_q read on the whole history is the gold
        assert (full["k"], full["n"]) == (EACH, EACH)
    tail = [rows[("tail", pack, "identity")]["source pairs"]["joint_J"]["k"] for pack in PACKS]
    overall = rows[("tail", "all", "identity")]["source pairs"]["joint_J"]
    assert sum(tail) == overall["k"]
    assert overall["n"] == EACH * len(PACKS)

    # a gap compares the pairs the transform gave an instance: the same gaps as a run
    # of those pairs alone (where identity covers exactly them)
    _, pairs, _ = preset_source("natural")
    entity_ids = {
        r["source_pair_id"] for r in pd.read_parquet(run / "results.parquet").to_dict("records")
        if r["transform"] == "entity"
    }  # fmt: skip
    assert 0 < len(entity_ids) < len(pairs)
    some = tmp_path / "some.jsonl"
    some.write_text("".join(p.to_json() + "\n" for p in pairs if p.pair_id in entity_ids))
    alone = tmp_path / "alone"
    done = audit(
        "run", "--pairs", str(some), "--conditions", "full,tail", "--transforms",
        "identity,entity:1", "--seed", "11", "--out", str(alone), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    def gaps(path: Path) -> dict[str, object]:
        (tail_gap,) = [
            g for g in json.loads((path / "summary.json").read_text())["shortcut_gaps"]
            if g["condition"] == "tail" and g["family"] == "all"
        ]  # fmt: skip
        return {k: v for k, v in tail_gap.items() if k.endswith(("_blocks", "_pairs"))}

    assert gaps(run) == gaps(alone)


def test_a_pack_that_fails_to_load_is_named_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    broken = tmp_path / "pack"
    broken.mkdir()
    (broken / "pairs.jsonl.gz").write_bytes(b"not gzip")
    monkeypatch.setattr(multiwoz, "PACK", str(broken))
    result = runner.invoke(app, ["run", "--preset", "natural", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert str(broken / "pairs.jsonl.gz") in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "r").exists()


def test_a_committed_pair_that_does_not_verify_names_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    lines = gzip.decompress(
        Path(multiwoz.__file__).with_name("data").joinpath("multiwoz21-test", "pairs.jsonl.gz")
        .read_bytes()
    ).splitlines()  # fmt: skip
    pair = json.loads(lines[0])
    pair["gold"]["A"]["current"] = {k: "wrong" for k in pair["gold"]["A"]["current"]}
    lines[0] = json.dumps(pair).encode()
    broken = tmp_path / "pack"
    broken.mkdir()
    (broken / "pairs.jsonl.gz").write_bytes(gzip.compress(b"\n".join(lines)))
    monkeypatch.setattr(multiwoz, "PACK", str(broken))
    # one pair a pack, so the sample holds the first line whatever the seed
    one = NATURAL_PRESETS["natural"].model_copy(update={"pairs_per_pack": len(lines)})
    monkeypatch.setitem(NATURAL_PRESETS, "natural", one)
    result = runner.invoke(app, ["generate", "--preset", "natural", "--out", str(tmp_path / "g")])
    assert result.exit_code == 1
    assert f"{broken / 'pairs.jsonl.gz'}:1: gold" in result.output
    assert "Traceback" not in result.output


def test_a_resume_whose_natural_pairs_changed_says_what_to_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    run = tmp_path / "run"
    done = audit(
        "run", "--preset", "natural", "--conditions", "full", "--transforms", "identity",
        "--out", str(run), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import audit.rundir._pairs as pairs_module

    derive = pairs_module.natural_pairs
    # another tzdata release: the same preset derives other pairs
    monkeypatch.setattr(pairs_module, "natural_pairs", lambda preset: derive(preset)[:-1])
    result = runner.invoke(app, ["resume", str(run)])
    assert result.exit_code == 2
    assert "install the tzdata package the run derived its pairs from" in result.output
    assert "Traceback" not in result.output

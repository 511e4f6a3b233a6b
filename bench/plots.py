"""PNG plots of the results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

OURS, BASE, GREY = "#2b6cb0", "#c05621", "#a0aec0"


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def calls(section: dict[str, Any], out: Path) -> list[str]:
    workloads = section["workloads"]
    names = list(workloads)
    naive = [workloads[n]["naive"]["calls_per_request"] for n in names]
    ours = [workloads[n]["ours"]["calls_per_request"] for n in names]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], naive, 0.4, label="naive (first allocator)", color=BASE)
    ax.bar([x + 0.2 for x in xs], ours, 0.4, label="ours (real handler)", color=OURS)
    for x, n in zip(xs, names, strict=True):
        top = max(naive[x], ours[x])
        ax.annotate(
            f"{workloads[n]['fewer_calls_x']}x fewer",
            (x, top),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(list(xs), [n.replace("_", " ") for n in names])
    ax.set_ylabel("upstream calls per request")
    ax.set_title("Upstream calls per request (simulator call log, same run)")
    ax.legend(fontsize=8)
    files = [_save(fig, out / "calls_per_request.png")]

    variants = workloads["tight_pool"]["variants"]
    labels = [v["label"] for v in variants.values()]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    colors = [BASE, GREY, OURS, "#2f855a"][: len(labels)]
    left.barh(labels, [v["rejected"] for v in variants.values()], color=colors)
    left.set_xlabel(f"rejected (of {workloads['tight_pool']['requests']} ensures)")
    left.invert_yaxis()
    right.barh(labels, [v["calls_per_request"] for v in variants.values()], color=colors)
    right.set_xlabel("upstream calls per request")
    right.set_yticks([])
    right.invert_yaxis()
    fig.suptitle("Tight pool: rejections and calls, fallback and reclaim side by side")
    files.append(_save(fig, out / "tight_pool.png"))
    return files


def overhead(section: dict[str, Any], out: Path) -> list[str]:
    rows = section["rows"]
    keys = list(rows)
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    own = [rows[k]["own_us_per_message"] for k in keys]
    gateway = [rows[k]["gateway_us_per_message"] for k in keys]
    ax.barh(keys, own, color=OURS, label="handler's own CPU")
    ax.barh(keys, gateway, left=own, color=GREY, label="in-process gateway (not counted)")
    target = section["targets"]["target_us_per_message"]
    ax.axvline(target, color="red", linestyle="--", label=f"target {target:.0f} µs (2 % of 50 ms)")
    ax.set_xlabel("µs per message (batch of 10)")
    ax.set_title(f"Handler overhead vs one round trip ({section['measured_rtt_ms']} ms measured)")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    return [_save(fig, out / "handler_overhead.png")]


def throughput(section: dict[str, Any], out: Path) -> list[str]:
    rows = list(section["rows"].values())
    consumers = [r["consumers"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot(consumers, [r["bound_msgs_per_s"] for r in rows], "o--", color=GREY, label="bound")
    left.plot(
        consumers, [r["achieved_msgs_per_s"] for r in rows], "o-", color=OURS, label="achieved"
    )
    left.plot(
        consumers,
        [0.7 * r["bound_msgs_per_s"] for r in rows],
        ":",
        color="red",
        label="0.7 x bound (target)",
    )
    left.set_xlabel("consumers C")
    left.set_ylabel("messages / s")
    left.set_xticks(consumers)
    left.legend(fontsize=8)
    left.set_title("Achieved vs C / (calls per msg x 50 ms)")
    parts = ("upstream_latency", "handler_other", "broker_receive_delete", "idle_polling")
    colors = (OURS, "#90cdf4", BASE, GREY)
    bottom = [0.0] * len(rows)
    for part, color in zip(parts, colors, strict=True):
        values = [r["time_split"][part] or 0.0 for r in rows]
        right.bar([str(c) for c in consumers], values, bottom=bottom, color=color, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    right.set_xlabel("consumers C")
    right.set_ylabel("share of consumer time")
    right.set_title("Where the consumers' time goes")
    right.legend(fontsize=7)
    return [_save(fig, out / "throughput.png")]


def coldstart(section: dict[str, Any], out: Path) -> list[str]:
    return [_imports_plot(section["imports"], out), _package_plot(section["package"], out)]


def _imports_plot(imports_section: dict[str, Any], out: Path) -> str:
    rows = imports_section["rows"]
    target_x = imports_section["targets"]["target_x"]
    keys = list(rows)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    imports = [rows[k]["importtime_ms"] for k in keys]
    extras = [rows[k]["extra_ms"] for k in keys]
    ax.barh(keys, imports, color=OURS, label="import (median, -X importtime)")
    ax.barh(keys, extras, left=imports, color=GREY, label="first-invocation wiring / Tracer()")
    limit = target_x * rows["boto3"]["importtime_ms"]
    ax.axvline(limit, color="red", linestyle="--", label=f"{target_x} x import boto3 (target)")
    ax.set_xlabel("ms in a fresh process")
    ax.set_title("Cold start: import time against a bare import boto3")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    return _save(fig, out / "cold_start.png")


def _package_plot(package: dict[str, Any], out: Path) -> str:
    bars = {"artifact (uploaded)": package["by_package_mb"]}
    if package.get("template_uses_powertools_layer") and package.get("layer_provides_mb"):
        bars["Powertools layer (provided)"] = package["layer_provides_mb"]
    names = list(dict.fromkeys(name for sizes in bars.values() for name in sizes))
    palette = plt.get_cmap("tab20")
    color = {name: palette(index % 20) for index, name in enumerate(names)}
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(bars)))
    labelled: set[str] = set()
    for bar, sizes in bars.items():
        left = 0.0
        for name, size in sizes.items():
            ax.barh(
                [bar],
                [size],
                left=left,
                color=color[name],
                label=None if name in labelled else name,
            )
            labelled.add(name)
            left += size
    ax.axvline(package["target_mb"], color="red", linestyle="--", label="10 MB target")
    ax.set_xlabel("MB unzipped (boto3 and its dependencies come with the runtime)")
    ax.set_title("Deployable artifact by package")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), ncol=2)
    return _save(fig, out / "package_size.png")


def sweep(section: dict[str, Any], out: Path) -> list[str]:
    rows = section["rows"]
    keys = list(rows)
    parts = (
        ("checkpoint_ms_per_target", "checkpoint (S3 on moto)", BASE),
        ("upstream_ms_per_target", "upstream calls", OURS),
        ("enqueue_ms_per_target", "release enqueue (SQS on moto)", "#d69e2e"),
        ("other_ms_per_target", "rest", GREY),
    )
    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    left = [0.0] * len(keys)
    for field, label, color in parts:
        values = [rows[k][field] / rows[k]["ms_per_target"] for k in keys]
        ax.barh(keys, values, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, values, strict=True)]
    for index, key in enumerate(keys):
        ax.annotate(
            f"{rows[key]['ms_per_target']} ms/target",
            (1.01, index),
            va="center",
            fontsize=8,
            annotation_clip=False,
        )
    ax.axvline(0.10, color="red", linestyle="--", label="checkpoint target 10 %")
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the time per target")
    ax.set_title("Sweep: where the time per target goes")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3)
    return [_save(fig, out / "sweep.png")]


def write_all(results: dict[str, Any], out: Path) -> list[str]:
    """Every plot whose section exists; returns the file names written."""
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    for key, plot in (
        ("calls", calls),
        ("overhead", overhead),
        ("throughput", throughput),
        ("coldstart", coldstart),
        ("sweep", sweep),
    ):
        section = results.get(key)
        if isinstance(section, dict) and "error" not in section and "skipped" not in section:
            files.extend(plot(section, out))
    return files

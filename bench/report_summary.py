"""The "At a glance" rows of docs/benchmarks/README.md (also stored in results.json)."""

from __future__ import annotations

from typing import Any

from .report_format import measured, pct


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: what was measured, the baseline, the ratio, the target, met."""
    rows: list[dict[str, Any]] = []
    calls = measured(results, "calls")
    if calls:
        rows += _calls_rows(calls)
    overhead = measured(results, "overhead")
    if overhead:
        rows.append(_overhead_row(overhead))
    throughput = measured(results, "throughput")
    if throughput:
        rows.append(_throughput_row(throughput))
    cold = measured(results, "coldstart")
    if cold:
        rows += _coldstart_rows(cold)
    ledger = measured(results, "ledger")
    if ledger:
        from .ledger import summary_rows as ledger_rows

        rows += ledger_rows(ledger)
    sweep = measured(results, "sweep")
    if sweep:
        rows += _sweep_rows(sweep)
    writes = measured(results, "writes")
    if writes and "targets" in writes:
        from .writes import summary_rows as writes_rows

        rows += writes_rows(writes)
    pools = measured(results, "pools")
    if pools:
        from .pool_grid import summary_rows as pools_rows

        rows += pools_rows(pools)
    return rows


def _calls_rows(calls: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    w = calls["workloads"]
    bursts = w["bursts"]
    rows.append(
        {
            "measurement": "1. Upstream calls per request, bursts",
            "ours": f"{bursts['ours']['calls_per_request']} calls/req",
            "baseline": f"{bursts['naive']['calls_per_request']} calls/req (naive loop)",
            "ratio": f"{bursts['fewer_calls_x']}x fewer",
            "target": ">= 2.5x fewer",
            "met": calls["targets"]["bursts_met"],
        }
    )
    worst_key = min(w, key=lambda k: w[k]["fewer_calls_x"] or 0)
    worst = w[worst_key]
    rows.append(
        {
            "measurement": f"1. Calls, every workload (worst: {worst_key.replace('_', ' ')})",
            "ours": f"{worst['ours']['calls_per_request']} calls/req",
            "baseline": f"{worst['naive']['calls_per_request']} calls/req (naive loop)",
            "ratio": f"{worst['fewer_calls_x']}x fewer",
            "target": "never more (>= 1x)",
            "met": calls["targets"]["never_more_met"],
        }
    )
    trips = calls.get("round_trips")
    if trips:
        rows.append(
            {
                "measurement": "1. IMS burst batch at 50 ms round trips: added round trips",
                "ours": f"{trips['ims_ms_per_batch']} ms per batch (IMS)",
                "baseline": f"{trips['static_ms_per_batch']} ms per batch (static)",
                "ratio": f"{trips['ims_added_round_trips_per_batch']} round trips",
                "target": f"<= {trips['target_added_round_trips']} round trips",
                "met": trips["met"],
            }
        )
    return rows


def _overhead_row(overhead: dict[str, Any]) -> dict[str, Any]:
    t = overhead["targets"]
    return {
        "measurement": "2. Handler's own CPU per message (worst scenario)",
        "ours": f"{t['worst_own_us_per_message']:.0f} µs",
        "baseline": f"{overhead['measured_rtt_ms']} ms (one round trip at 50 ms, measured)",
        "ratio": pct(t["worst_share_of_measured_rtt"]),
        "target": "< 2 % (< 1 ms)",
        "met": t["met"],
    }


def _throughput_row(throughput: dict[str, Any]) -> dict[str, Any]:
    rows_ = throughput["rows"]
    worst_c = min(rows_, key=lambda c: rows_[c]["efficiency"] or 0)
    row = rows_[worst_c]
    return {
        "measurement": f"3. End-to-end throughput, worst C (C={worst_c})",
        "ours": f"{row['achieved_msgs_per_s']} msg/s",
        "baseline": f"{row['bound_msgs_per_s']} msg/s bound (C / (calls/msg x 50 ms))",
        "ratio": f"{row['efficiency']} of bound",
        "target": ">= 0.7 of bound at every C",
        "met": throughput["targets"]["met"],
    }


def _coldstart_rows(cold: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    imports = cold["imports"]["rows"]
    worst_key = max(("allocator", "sweep"), key=lambda k: imports[k]["x_boto3"] or 0)
    rows.append(
        {
            "measurement": f"4. Handler import (worst: {worst_key})",
            "ours": f"{imports[worst_key]['importtime_ms']} ms",
            "baseline": f"{imports['boto3']['importtime_ms']} ms (import boto3)",
            "ratio": f"{imports[worst_key]['x_boto3']}x "
            f"(paired {imports[worst_key]['paired_x_boto3']}x)",
            "target": f"<= {cold['imports']['targets']['target_x']}x",
            "met": cold["imports"]["targets"]["met"],
        }
    )
    package = cold["package"]
    rows.append(
        {
            "measurement": "4. Deployable artifact, unzipped",
            "ours": f"{package['unzipped_mb']} MB ({package['zipped_mb']} MB zipped)"
            + (
                f"; the Powertools layer adds {package['layer_provides_total_mb']} MB"
                if package["template_uses_powertools_layer"]
                else ""
            ),
            "baseline": f"{package['target_mb']} MB target",
            "ratio": f"{package['x_target']}x the target",
            "target": "< 10 MB",
            "met": package["met"],
        }
    )
    return rows


def _sweep_rows(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    r0 = sweep["rows"]["dry_200_latency0"]
    r50 = sweep["rows"]["dry_60_latency50"]
    rows.append(
        {
            "measurement": "5. Sweep checkpoint share, latency 0",
            "ours": f"{r0['checkpoint_ms_per_target']} ms of {r0['ms_per_target']} ms/target",
            "baseline": f"{r0['targets_per_s']} targets/s",
            "ratio": pct(r0["checkpoint_share"]),
            "target": "< 10 %",
            "met": sweep["targets"]["met_latency0"],
        }
    )
    rows.append(
        {
            "measurement": "5. Sweep checkpoint share, 50 ms upstream",
            "ours": f"{r50['checkpoint_ms_per_target']} ms of {r50['ms_per_target']} ms/target",
            "baseline": f"{r50['targets_per_s']} targets/s",
            "ratio": pct(r50["checkpoint_share"]),
            "target": "< 10 % (informational)",
            "met": sweep["targets"]["met_latency50"],
        }
    )
    return rows

"""The measurement tables of docs/benchmarks/README.md, one function per section."""

from __future__ import annotations

from typing import Any

from .report_format import met_cell, pct, tool_file_count


def calls_tables(calls: dict[str, Any]) -> list[str]:
    """Per-workload call counts, then the tight-pool variants side by side."""
    w = calls["workloads"]
    out = [
        "| workload | requests | naive calls/req | ours calls/req | fewer | naive writes "
        "refused | ours writes refused | ours calls by op |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in w.values():
        ops = ", ".join(f"{op} {n}" for op, n in sorted(row["ours"]["calls_by_op"].items()))
        out.append(
            f"| {row['title']} | {row['requests']} | {row['naive']['calls_per_request']} "
            f"({row['naive']['calls']}) | {row['ours']['calls_per_request']} "
            f"({row['ours']['calls']}) | {row['fewer_calls_x']}x | "
            f"{row['naive']['writes_refused']} | {row['ours']['writes_refused']} | {ops} |"
        )
    out += ["", *ims_calls_table(w)]
    if "round_trips" in calls:
        out += ["", *round_trips_table(calls["round_trips"])]
    out += [
        "",
        "Tight pool, rejections side by side (same 30 ensures, same pool):",
        "",
        "| variant | rejected | served | calls/req | calls by op | deliveries | extra "
        "messages | dead letters | units conserved |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for variant in w["tight_pool"]["variants"].values():
        ops = ", ".join(f"{op} {n}" for op, n in sorted(variant["calls_by_op"].items()))
        out.append(
            f"| {variant['label']} | {variant['rejected']} | {variant['served']} | "
            f"{variant['calls_per_request']} | {ops} | {variant['deliveries']} | "
            f"{variant['extra_messages']} | {variant['dead_letters']} | "
            f"{variant['units_conserved']} |"
        )
    return out


def ims_calls_table(workloads: dict[str, Any]) -> list[str]:
    """Per workload, acting as each request's user: IMS calls beside Semrush calls."""
    out = [
        "Acting as the user (IMS mode, every request its child's user; the worker exchanges "
        "first and invalidates at the end). IMS calls/req counts the worker's (exchange, "
        "invalidate); the services' mints at enqueue are apart. Under IMS a coalesced member "
        "is admitted by one read of the child under its own token, so bursts make more Semrush "
        "calls. The added time per message is IMS mode's (exchange, invalidate, admission "
        "reads; the services' mints left out) over loopback HTTP at latency 0, with the "
        "credentials table in memory (no DynamoDB or KMS in it): a ratio on this machine, "
        "never a target.",
        "",
        "| workload | Semrush calls/req static | Semrush calls/req IMS | IMS calls/req "
        "(worker) | IMS calls by op | mints/req (services) | IMS mode adds ms/message | "
        "IMS/static time |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for row in workloads.values():
        ims = row.get("ims")
        if not ims:
            continue
        ops = ", ".join(f"{op} {n}" for op, n in sorted(ims["ims_calls_by_op"].items()))
        out.append(
            f"| {row['title']} | {row['ours']['calls_per_request']} | "
            f"{ims['semrush_calls_per_request']} | {ims['ims_calls_per_request']} | {ops} | "
            f"{ims['mints_per_request']} | {ims['exchange_ms_per_message']} | "
            f"{ims['ims_over_static_time_x']}x |"
        )
    return out


def round_trips_table(trips: dict[str, Any]) -> list[str]:
    """A burst batch at real round trips, static against IMS mode: what acting as users adds."""
    rtt = trips["round_trip_ms"]
    return [
        f"Bursts at round trips of {rtt:g} ms (every Semrush, IMS, credentials-table, KMS and "
        "PutEvents call waits one): two children, two rounds, "
        f"{trips['batches']} batches of ten ensures of one user on one child. IMS mode reads "
        "the record (GetItem, Decrypt) and exchanges before the first Semrush call; the "
        "roll's store runs beside the Semrush reads (waited for before the transfer), and "
        "each end's invalidation and scrub run side by side, beside the publishing.",
        "",
        "| mode | ms per batch | Semrush calls/req | added round trips per batch | target | met |",
        "| --- | ---: | ---: | ---: | --- | --- |",
        f"| static | {trips['static_ms_per_batch']} | "
        f"{trips['static_semrush_calls_per_request']} | | | |",
        f"| IMS | {trips['ims_ms_per_batch']} | {trips['ims_semrush_calls_per_request']} | "
        f"{trips['ims_added_round_trips_per_batch']} | "
        f"<= {trips['target_added_round_trips']} | {met_cell(trips['met'])} |",
    ]


def overhead_table(overhead: dict[str, Any]) -> list[str]:
    """The handler's own and the gateway's cost per message, per scenario."""
    out = [
        "| scenario / gateway | own µs/msg | gateway µs/msg | total µs/msg | calls/msg | own "
        "msg/s | share of 50 ms | share of measured RTT | own µs per run |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for key, row in overhead["rows"].items():
        out.append(
            f"| {key} ({row['gateway']}) | {row['own_us_per_message']} | "
            f"{row['gateway_us_per_message']} | {row['total_us_per_message']} | "
            f"{row['calls_per_message']} | {row['messages_per_s_own']} | "
            f"{pct(row['share_of_50ms'])} | {pct(row['share_of_measured_rtt'])} | "
            f"{row['own_us_runs']} |"
        )
    return out


def throughput_table(throughput: dict[str, Any]) -> list[str]:
    """Achieved against bound per consumer count, with the time split."""
    out = [
        "| C | messages | calls/msg | window s | achieved msg/s | bound msg/s | achieved / "
        "bound | wall msg/s (with start-up) | upstream | handler other | broker | idle | "
        "broker ms/batch | moto CPU ms/batch | CPUs busy |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: |",
    ]
    for row in throughput["rows"].values():
        split = row["time_split"]
        out.append(
            f"| {row['consumers']} | {row['messages']} | {row['calls_per_message']} | "
            f"{row['window_s']} | {row['achieved_msgs_per_s']} | {row['bound_msgs_per_s']} | "
            f"{row['efficiency']} | {row['wall_msgs_per_s']} | "
            f"{pct(split['upstream_latency'])} | {pct(split['handler_other'])} | "
            f"{pct(split['broker_receive_delete'])} | {pct(split['idle_polling'])} | "
            f"{row['broker_ms_per_batch']} | {row['moto_cpu_ms_per_batch']} | "
            f"{pct(row['cpu_busy_share'])} |"
        )
    return out


def coldstart_tables(cold: dict[str, Any]) -> list[str]:
    """Import times against boto3, then the artifact by package."""
    imports = cold["imports"]
    out = [
        f"Python {imports['python']} locally (the template runs python3.12 on arm64: absolute "
        "times differ there, the ratio is the figure).",
        "",
        "| case | import ms (median) | x boto3 | paired x boto3 | + wiring/Tracer ms | "
        "(import + that) x boto3 | runs (ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in imports["rows"].values():
        out.append(
            f"| {row['label']} | {row['importtime_ms']} | {row['x_boto3']} | "
            f"{row['paired_x_boto3']} | {row['extra_ms']} | {row['init_x_boto3']} | "
            f"{row['importtime_ms_runs']} |"
        )
    package = cold["package"]
    out += [
        "",
        f"Artifact: {package['method']}. Removed as provided by the runtime: "
        + (
            ", ".join(f"{k} {v} MB" for k, v in package["removed_runtime_provided_mb"].items())
            or "nothing (src/requirements.txt does not list boto3 or its dependencies)"
        )
        + ".",
        "",
        "| package | MB unzipped |",
        "| --- | ---: |",
    ]
    out += [f"| {name} | {mb} |" for name, mb in package["by_package_mb"].items()]
    out += [
        f"| **total** | **{package['unzipped_mb']}** ({package['zipped_mb']} zipped) |",
        "",
        "- Tool files (serenity_tools, tests, bench) inside the artifact: "
        f"{tool_file_count(package)} (the tools live beside src/, in tools/).",
        f"- Uses the public Powertools layer: {package['template_uses_powertools_layer']}; "
        "what the layer provides for us, built the same way: "
        + (
            ", ".join(f"{k} {v} MB" for k, v in package["layer_provides_mb"].items())
            if package.get("layer_provides_mb")
            else "not measured (pip failed)"
        )
        + ".",
        f"- pyproject.toml lists pyyaml at runtime: {package['pyproject_lists_pyyaml']}; "
        f"src/requirements.txt (what sam build bundles) exists: "
        f"{package['codeuri_has_requirements_txt']}.",
    ]
    return out


def sweep_table(sweep: dict[str, Any]) -> list[str]:
    """Sweep rate and checkpoint share per scenario."""
    out = [
        "| scenario | targets | targets/s | ms/target | checkpoint ms/target | ms/save | "
        "upstream ms/target | enqueue ms/target | checkpoint share |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, row in sweep["rows"].items():
        out.append(
            f"| {key} | {row['processed']} | {row['targets_per_s']} | {row['ms_per_target']} | "
            f"{row['checkpoint_ms_per_target']} | {row['checkpoint_ms_per_save']} | "
            f"{row['upstream_ms_per_target']} | {row['enqueue_ms_per_target']} | "
            f"{pct(row['checkpoint_share'])} |"
        )
    return out

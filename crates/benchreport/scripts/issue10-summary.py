#!/usr/bin/env python3
"""Markdown summary of issue10-measure.sh: one row per (part, delay), three
configurations side by side (txnfs-txn: txnfs with --txn; txnfs: the same
server, plain vectorized COMPOUNDs; ganesha: NFS-Ganesha, plain).

Medians over the repeats of each run. Relative runtime = runtime of txnfs-txn
divided by the other's for the same work = ops/s(other) / ops/s(txnfs-txn)
(TC-NFS Figs. 4-14 plot this); relative throughput is its inverse. Latency is
per iteration (one transaction or one batch of files; one whole tree for
tree-cp/rm), p50/p99 of the iterations of each repeat, median over repeats.
Server CPU µs and context switches are per iteration (the runner's per-COMPOUND
figures times COMPOUNDs / iterations).

usage: issue10-summary.py OUT_DIR > summary.md
"""
import json
import os
import statistics
import sys

CONFIGS = ["txnfs-txn", "txnfs", "ganesha"]
# The `layer` part: plain workloads, txn layer on (txnfs) and off (txnfs-notxn).
LAYER_CONFIGS = ["txnfs", "txnfs-notxn", "ganesha"]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main_kind(rep):
    lat = rep.get("latency_us") or {}
    if not lat:
        return None
    return max(lat, key=lambda k: lat[k].get("count", 0))


def stats(raw):
    reps = raw.get("repeats") or []
    ops, p50, p99, cpu, ctx, ok = [], [], [], [], [], True
    failed = set()
    for r in reps:
        ops.append(r.get("ops_per_s"))
        k = main_kind(r)
        if k:
            p50.append(r["latency_us"][k]["p50"] / 1000.0)
            p99.append(r["latency_us"][k]["p99"] / 1000.0)
        s = r.get("server")
        it = r.get("ops") or 0
        if s and it:
            per_iter = (r.get("compounds") or 0) / it
            cpu.append(s["cpu_us_per_op"] * per_iter)
            ctx.append(s["ctx_switches_per_op"] * per_iter)
        for c in r.get("checks") or []:
            if not c.get("ok", True):
                ok = False
                failed.add(c.get("rule", "?").split(" (")[0])
    counters = {}
    for r in reps:
        for k, v in (r.get("counters") or {}).items():
            counters[k] = counters.get(k, 0) + v
    return {
        "ops": med(ops),
        "p50": med(p50),
        "p99": med(p99),
        "cpu": med(cpu),
        "ctx": med(ctx),
        "ok": ok,
        "failed": failed,
        "n": len(reps),
        "conflicts": counters.get("txn_conflicts", 0),
        "compounds_per_txn": (counters.get("txn_compounds", 0) / counters["txn_commits"])
        if counters.get("txn_commits")
        else None,
    }


def f(x, nd=1):
    if x is None:
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{nd}f}"


def ratio(a, b):
    if a is None or b is None or a == 0:
        return None
    return b / a  # runtime(txn)/runtime(other) = ops(other)/ops(txn)


def print_layer(rows):
    print("\n## What the txn layer costs plain traffic\n")
    print(
        "The same plain workloads (no transaction sent) against txnfs with the txn "
        "layer (the default), `txnfs serve --no-txn` and Ganesha. tree-ls = `ls -lR`, "
        "tree-cp = copy of a tree of small files (as untar creates it). Ratio = "
        "ops/s with the layer / ops/s without (1 = free). Medians of the repeats.\n"
    )
    hdr = ["workload", "delay", "ops/s layer", "ops/s --no-txn", "ops/s gan",
           "layer/no-txn", "CPU µs layer/no-txn/gan", "checks"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for w, d, st in rows:
        a, b, g = (st.get(c) for c in LAYER_CONFIGS)
        ops = lambda s: f(s["ops"]) if s else "–"
        r = (a["ops"] / b["ops"]) if a and b and a["ops"] and b["ops"] else None
        cpu = "/".join(f(s["cpu"]) if s else "–" for s in (a, b, g))
        bad = sorted({x for s in st.values() for x in s["failed"]})
        checks = "ok" if not bad else "FAILED: " + "; ".join(bad)
        print(f"| {w} | {d:g} ms | {ops(a)} | {ops(b)} | {ops(g)} | {f(r, 2)} | {cpu} | {checks} |")


def main():
    out = sys.argv[1]
    parts = sorted(
        d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "compare.json"))
    )
    rows = []
    layer = []
    errors = []
    for part in parts:
        cmp = json.load(open(os.path.join(out, part, "compare.json")))
        for e in cmp.get("errors") or []:
            errors.append((part, e["server"], e["delay_ms"], e["workload"], e["error"].splitlines()[0]))
        by = {}
        for run in cmp.get("runs") or []:
            by[(run["workload"], run["delay_ms"], run["server"])] = run.get("raw") or {}
        keys = sorted({(w, d) for (w, d, _) in by}, key=lambda k: (k[1], k[0]))
        for w, d in keys:
            if part.startswith("layer"):
                st = {c: stats(by[(w, d, c)]) for c in LAYER_CONFIGS if (w, d, c) in by}
                layer.append((w, d, st))
                continue
            st = {c: stats(by[(w, d, c)]) for c in CONFIGS if (w, d, c) in by}
            args = " ".join((cmp.get("settings") or {}).get("extra_args") or [])
            rows.append((part, w, d, st, args))
    print("# Issue 10: transactional COMPOUNDs vs plain (TC-NFS Figs. 4-14)\n")
    print(
        "Configurations: **txnfs-txn** = txnfs, each iteration one transaction "
        "(`--txn`); **txnfs** = the same server, the same files through the plain "
        "vectorized client, as many per COMPOUND; **ganesha** = NFS-Ganesha (FSAL VFS), "
        "plain. Servers grant no delegations (txnfs `--no-delegations`, Ganesha's "
        "default). Medians of the repeats.\n"
    )
    print(
        "Relative runtime = runtime(txnfs-txn) / runtime(other) for the same work "
        "(> 1: transactions are slower; TC-NFS: 1.55 for one client). "
        "Latency p50/p99 in ms per iteration (one transaction / batch / tree). "
        "CPU = server CPU µs per iteration, cs = server context switches per iteration.\n"
    )
    hdr = [
        "part", "delay", "ops/s txn", "ops/s plain", "ops/s gan",
        "rel. runtime txn/plain", "rel. runtime txn/gan",
        "p50/p99 txn", "p50/p99 plain", "p50/p99 gan",
        "CPU txn/plain/gan", "cs txn/plain/gan", "checks",
    ]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for part, w, d, st, args in rows:
        t, p, g = (st.get(c) for c in CONFIGS)
        ops = lambda s: f(s["ops"]) if s else "–"
        lat = lambda s: f"{f(s['p50'], 2)}/{f(s['p99'], 2)}" if s else "–"
        trio = lambda k: "/".join(f(s[k]) if s else "–" for s in (t, p, g))
        rp = ratio(t and t["ops"], p and p["ops"])
        rg = ratio(t and t["ops"], g and g["ops"])
        bad = sorted({r for s in st.values() for r in s["failed"]})
        checks = "ok" if not bad else "FAILED: " + "; ".join(bad)
        if t and t["conflicts"]:
            checks += f", {t['conflicts']} txn gave up"
        label = part if part.endswith(w) or w in part else f"{part} ({w})"
        print(
            f"| {label} | {d:g} ms | {ops(t)} | {ops(p)} | {ops(g)} | "
            f"{f(rp, 2)} | {f(rg, 2)} | {lat(t)} | {lat(p)} | {lat(g)} | "
            f"{trio('cpu')} | {trio('ctx')} | {checks} |"
        )
    print()
    print("Parts: `wf-<size>-k<files per txn>-c<clients>-s<sharing %>` = writefiles, "
          "`rf-...` = readfiles, `tree` = cp -R / rm -r of a source tree (one transaction "
          "per tree with --txn). Exact `bench run` arguments: each part's "
          "`report.md` and `runs/*/*/*/command.txt`.")
    if layer:
        print_layer(layer)
    if errors:
        print("\n## Failed runs\n")
        for e in errors:
            print(f"- {e[0]}: {e[1]} {e[3]} at {e[2]:g} ms: {e[4]}")


if __name__ == "__main__":
    main()

"""Benchmark: edgekit's accuracy-aware int8 (--budget) against full int8 and the raw library calls.

    .venv/bin/python bench/bench_int8_search.py [--models a,b] [--targets x,y] [--work DIR] [--json PATH]

Same models, targets and raw calls as bench/bench_int8_real.py (whose functions this imports). For each
model × target, in one run:

  full    `edgekit convert SRC -t TARGET --int8 --calib CALIB --eval EVAL --json`, timed;
  search  the same plus `--budget cosine=0.99`, and `--budget top1_agreement=0.98` for the classifier, timed;
  raw     bench_int8_real's raw library calls, verified by edgekit's verifier on the same eval samples
          (for onnx from a .pt2 it quantizes the fp32 .onnx of one extra edgekit fp32 conversion).

Columns: result = exit code / raw error, status = edgekit's verdict on the eval samples (against the
budgets for the search row, else edgekit's default thresholds), cosine / ch-cos / top-1 of output 0
against the source model, w-int8 = share of weight bytes stored as int8, bytes = artifact size,
kept = layers the search kept back, conv = conversions the search made, wall s = the subprocess (raw:
conversion + verification), ×full = the search's wall over the full-int8 wall, stopped = why the search
ended (met | exhausted | steps | no-fallback). The machine may be shared: seconds are indicative.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import bench_int8_real as R  # beside this script, which Python puts first on the path


def budgets(m) -> list[str]:
    return ["cosine=0.99"] + (["top1_agreement=0.98"] if m.kind == "classifier" else [])


def search_convert(m, target: str, out: Path) -> dict:
    """bench_int8_real's int8 command with the budgets added."""
    return R.edgekit_convert(m, target, True, out, extra=tuple(a for b in budgets(m) for a in ("--budget", b)))


def guarded(fn, *args) -> dict:
    """A side that raises is a row with its error, and the benchmark goes on."""
    started = time.perf_counter()
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        return {"exit": None, "error": f"bench error: {R.first_line(e)}", "artifact": None,
                "wall_s": time.perf_counter() - started}


def row_of(name, target, side, run, m, full_wall) -> dict:
    r = R.summarize(name, target, "raw" if side == "raw" else "edgekit", run, None, m.kind)
    s = (run.get("artifact") or {}).get("search") or {}
    r.update(side=side, search=s or None, kept=len(s["kept"]) if s else None, conversions=s.get("conversions"),
             search_s=s.get("seconds"), stopped=s.get("stopped"), ratio=None)
    if side == "search" and r["wall_s"] and full_wall:
        r["ratio"] = r["wall_s"] / full_wall
    return r


COLUMNS = [("model", 18, "s"), ("target", 10, "s"), ("side", 6, "s"), ("result", 30, "s"), ("status", 6, "s"),
           ("cosine", 7, ".4f"), ("channel_cosine", 7, ".4f"), ("top1_agreement", 6, ".3f"),
           ("int8_weight_share", 6, ".3f"), ("bytes", 9, "d"), ("kept", 4, "d"), ("conversions", 4, "d"),
           ("wall_s", 7, ".1f"), ("ratio", 6, ".2f"), ("stopped", 11, "s")]
HEADERS = {**R.HEADERS, "conversions": "conv", "ratio": "×full"}


def print_table(rows):
    print(" | ".join(R.cell(HEADERS.get(c, c), w, "s") if f == "s" else HEADERS.get(c, c).rjust(w)
                     for c, w, f in COLUMNS))
    print("-+-".join("-" * w for _, w, _ in COLUMNS))
    for r in rows:
        print(" | ".join(R.cell(r[c], w, f) for c, w, f in COLUMNS))
    for r in rows:
        if r["result"] not in ("ok", "exit 0") or r["note"]:
            print(f"* {r['model']} {r['target']} {r['side']}: {r['result']}" + (f" — {r['note']}" if r["note"] else "")
                  + (f" ({'; '.join(r['reasons'])})" if r["reasons"] else ""))
    for r in (r for r in rows if r["search"]):
        s = r["search"]
        print(f"\n{r['model']} {r['target']}: {s.get('why')} — stopped {s.get('stopped')}, "
              f"{s.get('conversions')} conversions in {s.get('seconds')} s (ranking {s.get('ranking_seconds')} s), "
              f"search values {s.get('values')}")
        for k in s.get("kept") or []:
            contribution = ", ".join(f"{key} {v:+g}" for key, v in (k.get("contribution") or {}).items())
            print(f"    kept {k['layer']} at {k['precision']} (step {k.get('step')}, {k.get('bytes') or 0:+d} B; {contribution})")


def main(argv=None) -> int:
    args = R.bench_args(__doc__, argv)
    with R.work_folder(args, "bench-search-") as work:
        started, rows = time.perf_counter(), []
        for name, m, target, base in R.cases(args, work, "search-"):
            print(f"{name} {target}: edgekit full int8, edgekit search {budgets(m)}, raw int8 …", flush=True)
            full = guarded(R.edgekit_convert, m, target, True, base / "int8")
            search = guarded(search_convert, m, target, base / "search")
            fp32_onnx = None
            if target == "onnx" and m.source.suffix != ".onnx":  # the raw quantizer needs edgekit's fp32 .onnx
                fp32_onnx = (guarded(R.edgekit_convert, m, target, False, base / "fp32").get("artifact") or {}).get("path")
            raw = guarded(R.raw_side, m, target, fp32_onnx, base / "raw")
            for side, run in (("full", full), ("search", search), ("raw", raw)):
                rows.append(row_of(name, target, side, run, m, full.get("wall_s")))
                r = rows[-1]
                print(f"  {side:6} {r['result']}  cosine={r['cosine']}  kept={r['kept']}  wall={r['wall_s'] or 0:.1f}s",
                      flush=True)
        total = time.perf_counter() - started
        (work / "raw-calls-search.log").write_text("\n".join(R.RAW_LOG))
    print(f"\nint8: full vs accuracy-aware search vs raw library calls, verified by edgekit on the eval samples "
          f"({total:.0f} s in all)\n")
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"seconds": total, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

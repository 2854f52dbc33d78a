"""Census scale: native (in memory) vs Dask (LocalCluster) on Parquet datasets (issue 23).

Generates Parquet datasets in chunks (one file per chunk, row groups of 1M rows: the
generator holds one chunk at a time) with 5 numeric columns ``y1..y5``, weights ``w``, 600
strata x 10 PSUs (rows stored in PSU order, as a census file is stored by geography) and a
200-level domain; estimates the means of ``y1..y5`` by domain with the native engine (the
columns read into one pandas DataFrame) and with ``DaskSurveyDesign.from_parquet`` on a
LocalCluster of 2 worker processes with a memory limit each, in separate processes so that
each peak RSS is its own. Reports time, rows per second and peak RSS (the client's and its
workers' summed RSS, sampled every 50 ms with psutil; and each process's own
``ru_maxrss``) against the data's in-memory size; checks Dask against native to 1e-12.

``--big N`` then writes a dataset larger than the machine's memory under ``--dir``, tabulates
the mean of y1 by domain with a progress bar on a LocalCluster held to ``--memory-limit``
per worker, checks the table against per-domain sums kept while generating, and deletes it.

Usage:
  python benchmarks/dask_scale.py --fast                  # 200k rows, checks only (tests)
  python benchmarks/dask_scale.py --sizes 10e6,30e6 --big 600e6 --dir /work/scratch/census
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

H, PER, DOMAINS = 600, 10, 200
Y = ["y1", "y2", "y3", "y4", "y5"]
ROWS_PER_FILE = 1_000_000
ROW_GROUP = 500_000


# ------------------------------------------------------------------------ data
def chunk(n: int, start: int, stop: int, seed: int) -> dict[str, np.ndarray]:
    """Rows ``start:stop`` of an ``n``-row dataset (PSU order; deterministic per chunk)."""
    rng = np.random.default_rng([seed, start])
    m = stop - start
    K = H * PER
    psu = ((np.arange(start, stop, dtype=np.int64) * K) // n).astype(np.int32)
    stratum = (psu // PER).astype(np.int32)
    domain = rng.integers(0, DOMAINS, m, dtype=np.int16)
    w = 20.0 + (stratum % 7) * 5.0 + rng.random(m) * 10.0
    out = {"stratum": stratum, "psu": psu, "domain": domain, "w": w}
    base = rng.standard_normal(m)
    for j, c in enumerate(Y):
        out[c] = 10.0 * (j + 1) + domain * 0.05 + (psu % 13) * 0.1 + base + rng.random(m)
    return out


def _write_file(args: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Write one file of the dataset; its per-domain sums of w and w*y1."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, i, n, start, stop, seed = args
    cols = chunk(n, start, stop, seed)
    sw = np.bincount(cols["domain"], weights=cols["w"], minlength=DOMAINS)
    swy = np.bincount(cols["domain"], weights=cols["w"] * cols["y1"], minlength=DOMAINS)
    pq.write_table(pa.table(cols), Path(path) / f"part.{i:05d}.parquet",
                   row_group_size=ROW_GROUP, use_dictionary=["stratum", "psu", "domain"])
    return sw, swy


def generate(path: Path, n: int, seed: int = 1, rows_per_file: int = ROWS_PER_FILE,
             processes: int = 1) -> dict:
    """Write the dataset one file per chunk (``processes`` files at a time, each process
    holding one chunk); returns per-domain sums of w and w*y1 (the big run's check)."""
    path.mkdir(parents=True, exist_ok=True)
    jobs = [(str(path), i, n, start, min(n, start + rows_per_file), seed)
            for i, start in enumerate(range(0, n, rows_per_file))]
    if processes > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(processes) as pool:
            parts = pool.map(_write_file, jobs, chunksize=1)
    else:
        parts = [_write_file(j) for j in jobs]
    sw = np.sum([p[0] for p in parts], axis=0)
    swy = np.sum([p[1] for p in parts], axis=0)
    return {"sw": sw.tolist(), "swy": swy.tolist()}


# ------------------------------------------------------------------------ memory
class PeakRSS:
    """Peak of the summed RSS of this process and its descendants (the workers), sampled."""

    def __init__(self, interval: float = 0.05) -> None:
        import psutil

        self.proc = psutil.Process()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = 0
        for p in [self.proc] + self.proc.children(recursive=True):
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 - a process that just ended
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def maxrss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ------------------------------------------------------------------------ the runs (child)
def read_frame(path: str, other: list[str], floats: list[str]):
    """The dataset's columns as one pandas DataFrame, read file by file into arrays
    allocated once: the float64 columns in one (columns, rows) block (pandas keeps it as its
    one float block, so the estimators read the variables as a view), the others in their
    own dtype. Peak memory is the frame plus one file's Arrow table; ``pd.read_parquet``
    holds the whole Arrow table and the frame at once (and consolidates blocks by copying)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(Path(path).glob("part.*.parquet"))
    sizes = [pq.ParquetFile(f).metadata.num_rows for f in files]
    n = int(sum(sizes))
    schema = pq.read_schema(files[0])
    block = np.empty((len(floats), n))
    rest = {c: np.empty(n, dtype=schema.field(c).type.to_pandas_dtype()) for c in other}
    start = 0
    for f, m in zip(files, sizes, strict=True):
        table = pq.read_table(f, columns=other + floats)
        for j, c in enumerate(floats):
            block[j, start:start + m] = table.column(c).to_numpy()
        for c in other:
            rest[c][start:start + m] = table.column(c).to_numpy()
        start += m
        del table
    pa.default_memory_pool().release_unused()  # the Arrow pool keeps freed tables otherwise
    df = pd.DataFrame(block.T, columns=floats, copy=False)
    for c in other:
        df[c] = rest.pop(c)
    return df[other + floats]


def run_native(path: str, out: str) -> dict:
    import psutil

    import surveysynth as ss

    base = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    df = read_frame(path, ["stratum", "psu", "domain"], ["w"] + Y)
    t1 = time.perf_counter()
    read_peak, after_read = maxrss(), psutil.Process().memory_info().rss
    design = ss.SurveyDesign(df, ids="psu", strata="stratum", weights="w")
    res = design.mean(Y, by="domain")
    t2 = time.perf_counter()
    res.to_parquet(out)
    return {"rows": len(df), "data_bytes": int(df.memory_usage(deep=True).sum()),
            "read_s": t1 - t0, "estimate_s": t2 - t1, "peak_rss": maxrss(),
            "start_rss": base, "read_peak_rss": read_peak, "after_read_rss": after_read}


def run_dask(path: str, out: str, memory_limit: str, table: bool = False) -> dict:
    from surveysynth.engines.dask_engine import DaskSurveyDesign

    with PeakRSS() as peak:
        t0 = time.perf_counter()
        dk = DaskSurveyDesign.from_parquet(path, ids="psu", strata="stratum", weights="w",
                                           n_workers=2, memory_limit=memory_limit,
                                           progress=table)
        with dk:
            t1 = time.perf_counter()
            if table:
                from surveysynth.tables import tabulate

                tab = tabulate(dk, "domain", value="y1", stat="mean")
                res = tab.long.astype({"domain": str})  # labels: levels and "All"
            else:
                res = dk.mean(Y, by="domain")
            t2 = time.perf_counter()
            workers = dk._client.run(maxrss)  # noqa: SLF001 - each worker's own peak
            nparts = dk._ddf.npartitions  # noqa: SLF001
    res.to_parquet(out)
    return {"startup_s": t1 - t0, "estimate_s": t2 - t1, "peak_rss": peak.peak,
            "client_maxrss": maxrss(), "worker_maxrss": sorted(workers.values()),
            "partitions": nparts, "memory_limit": memory_limit}


def child(kind: str, *args: str) -> dict:
    """Run one measurement in a fresh process (its own peak RSS); returns its JSON."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, *args]
    # the table run shows its progress bar on our stdout; the others' logs are kept quiet
    proc = subprocess.run(cmd, capture_output=kind != "table", text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} run failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(Path(args[1] + ".json").read_text())


def compare(a: str, b: str) -> float:
    """Largest relative difference of estimate and se (Dask vs native)."""
    import pandas as pd

    x, y = pd.read_parquet(a), pd.read_parquet(b)
    assert x.shape == y.shape and (x["domain"].to_numpy() == y["domain"].to_numpy()).all()
    err = 0.0
    for c in ("estimate", "se"):
        e, g = x[c].to_numpy(float), y[c].to_numpy(float)
        err = max(err, float(np.max(np.abs(g - e) / np.abs(e))))
    return err


# ------------------------------------------------------------------------ driver
def gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def scale_run(n: int, root: Path, memory_limit: str, native_only: bool = False,
              keep: bool = False) -> dict:
    """Native and Dask runs on an ``n``-row dataset under ``root`` (a complete dataset left
    there by ``--keep`` is reused). ``native_only``: the native run alone (no Dask, no
    comparison)."""
    path = root / f"rows_{n}"
    files = -(-n // ROWS_PER_FILE)
    t = time.perf_counter()
    if not (path.is_dir() and len(list(path.glob("part.*.parquet"))) == files):
        generate(path, n)
    gen = time.perf_counter() - t
    nat = child("native", str(path), str(root / f"native_{n}.parquet"))
    dk, err = None, None
    if not native_only:
        dk = child("dask", str(path), str(root / f"dask_{n}.parquet"), memory_limit)
        err = compare(str(root / f"native_{n}.parquet"), str(root / f"dask_{n}.parquet"))
        if err > 1e-12:
            raise AssertionError(f"Dask and native differ by {err:.3g} at {n} rows")
    disk = sum(f.stat().st_size for f in path.iterdir())
    if not keep:
        shutil.rmtree(path)
    return {"n": n, "generate_s": gen, "disk": disk, "native": nat, "dask": dk, "max_rel": err}


def big_run(n: int, root: Path, memory_limit: str) -> dict:
    path = root / f"big_{n}"
    print(f"generating {n:,} rows under {path} ...", flush=True)
    t = time.perf_counter()
    sums = generate(path, n, processes=2)
    gen = time.perf_counter() - t
    disk = sum(f.stat().st_size for f in path.iterdir())
    print(f"generated in {gen:.0f} s ({gib(disk)} on disk); tabulating ...", flush=True)
    try:
        res = child("table", str(path), str(root / "big_table.parquet"), memory_limit)
        import pandas as pd

        long = pd.read_parquet(root / "big_table.parquet")
    finally:
        shutil.rmtree(path)
    inner = long[long.cell == "interior"]
    expect = np.array(sums["swy"]) / np.array(sums["sw"])
    got = inner.estimate.to_numpy(float)
    err = float(np.max(np.abs(got - expect) / expect))
    if err > 1e-9:
        raise AssertionError(f"big table differs from the generator's sums by {err:.3g}")
    bytes_per_row = 4 + 4 + 2 + 8 + 8 * len(Y)
    return {"n": n, "generate_s": gen, "disk": disk, "in_memory": n * bytes_per_row,
            "read_bytes": n * (4 + 4 + 2 + 8 + 8), "table": res, "max_rel": err,
            "se_median": float(inner.se.median())}


def report(scale: list[dict], big: dict | None, memory_limit: str, command: str,
           load: str) -> str:
    lines = [
        "### Census scale: native vs Dask, and a table larger than memory",
        "",
        f"Runs: {command}. The machine is shared "
        "(the lead's niced Monte Carlo job and other helpers ran at the same time), so the "
        "times are upper bounds.",
        "",
        f"Data: Parquet files of {ROWS_PER_FILE:,} rows (row groups of {ROW_GROUP:,}), "
        f"5 float64 columns y1..y5, float64 weights, {H} strata x {PER} PSUs (int32, rows in "
        f"PSU order), a {DOMAINS}-level int16 domain. Statistic: `mean(['y1', ..., 'y5'], "
        "by='domain')` (linearization SEs, design df). Native: the 9 columns read file by file "
        "into one pandas DataFrame (the 6 float64 columns in one block), `SurveyDesign`, one call (own process). Dask: "
        f"`DaskSurveyDesign.from_parquet` on a LocalCluster of 2 worker processes, "
        f"`memory_limit={memory_limit!r}` each (own process). Dask equals native to "
        "1e-12 (checked in the run: largest relative difference of estimate and SE shown).",
        "",
        "| rows | data in memory | engine | time (s) | rows/s | peak RSS (all processes) "
        "| peak / data | max rel. diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in scale:
        nat, dk = r["native"], r["dask"]
        size = nat["data_bytes"]
        t_nat = nat["read_s"] + nat["estimate_s"]
        lines.append(f"| {r['n']:,} | {gib(size)} | native (read {nat['read_s']:.1f} s + "
                     f"estimate {nat['estimate_s']:.1f} s) | {t_nat:.1f} | "
                     f"{r['n'] / t_nat:,.0f} | {gib(nat['peak_rss'])} | "
                     f"{nat['peak_rss'] / size:.2f} | |")
        if dk is None:  # a --native-only run
            continue
        lines.append(f"| {r['n']:,} | {gib(size)} | Dask ({dk['partitions']} partitions; "
                     f"cluster start {dk['startup_s']:.1f} s not counted) | "
                     f"{dk['estimate_s']:.1f} | {r['n'] / dk['estimate_s']:,.0f} | "
                     f"{gib(dk['peak_rss'])} (workers' own peaks "
                     f"{', '.join(gib(x) for x in dk['worker_maxrss'])}) | "
                     f"{dk['peak_rss'] / size:.2f} | {r['max_rel']:.1e} |")
    if big is not None:
        t = big["table"]
        lines += [
            "",
            f"**Larger than memory.** {big['n']:,} rows: {gib(big['in_memory'])} as the "
            f"columns' arrays in memory (the machine has 24 GiB), {gib(big['disk'])} of "
            f"Parquet on disk under /work/scratch (written in {big['generate_s']:.0f} s, "
            "deleted after the run). `tabulate(d, 'domain', value='y1', stat='mean')` "
            f"(200 domains + the grand total, with SE, CV, CI, flags) on a LocalCluster of 2 "
            f"worker processes with `memory_limit={memory_limit!r}` each, progress bar on "
            f"stdout: {t['estimate_s']:.0f} s ({big['n'] / t['estimate_s']:,.0f} rows/s, "
            f"{t['partitions']} partitions; the 5 columns the table needs are read: "
            f"{gib(big['read_bytes'])}). Peak RSS of client + workers "
            f"{gib(t['peak_rss'])}; the workers' own peaks "
            f"{', '.join(gib(x) for x in t['worker_maxrss'])}; the client's "
            f"{gib(t['client_maxrss'])}. The domain means equal the per-domain sums kept "
            f"by the generator to {big['max_rel']:.1e} (relative).",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="200k rows, checks only, no write")
    ap.add_argument("--sizes", default="10e6,30e6")
    ap.add_argument("--big", type=float, default=0.0, help="rows of the larger-than-memory run")
    ap.add_argument("--dir", default=None, help="where datasets are written (default: tmp)")
    ap.add_argument("--memory-limit", default="3GiB")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--native-only", action="store_true",
                    help="the native runs of --sizes alone (no Dask, no comparison)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the --sizes datasets under --dir (a later run reuses them)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        kind, *rest = a.child
        if kind == "native":
            out = run_native(*rest)
        else:
            out = run_dask(rest[0], rest[1], rest[2], table=kind == "table")
        Path(rest[1] + ".json").write_text(json.dumps(out))
        return
    root = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="dask_scale_"))
    root.mkdir(parents=True, exist_ok=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    command = "python benchmarks/dask_scale.py " + " ".join(argv if argv is not None
                                                            else sys.argv[1:])
    # results of earlier runs with the same --dir are kept (the sizes and the big run can be
    # run separately; the report shows every run's command and load)
    store = root / "results.json"
    saved = json.loads(store.read_text()) if (a.dir and store.exists()) else {
        "scale": {}, "big": None, "runs": []}
    saved["runs"].append(f"`{command}` (load: {load})")
    try:
        sizes = [200_000] if a.fast else [int(float(s)) for s in a.sizes.split(",") if s]
        for n in sizes:
            saved["scale"][str(n)] = scale_run(n, root, a.memory_limit, a.native_only,
                                               a.keep and bool(a.dir))
            store.write_text(json.dumps(saved))
        if a.big:
            saved["big"] = big_run(int(a.big), root, a.memory_limit)
        if a.fast:  # the tabulate path too, small
            saved["big"] = big_run(300_000, root, a.memory_limit)
        store.write_text(json.dumps(saved))
    finally:
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)
    scale = [saved["scale"][k] for k in sorted(saved["scale"], key=int)]
    text = report(scale, saved["big"], a.memory_limit, "; ".join(saved["runs"]), "")
    print(text)
    if not (a.fast or a.no_write):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _report import write_section

        write_section("census", text)


if __name__ == "__main__":
    main()

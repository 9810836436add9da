"""Worker for the ``simhash`` PyPI package's ``SimhashIndex``, run by
``bench_peers.py`` and ``bench_online.py`` in a separate interpreter.

``simhash`` (2.1.2) needs ``numpy<2``, and simstore needs ``numpy>=2``, so it
lives in its own virtual environment::

    python -m venv /tmp/simhash-venv && /tmp/simhash-venv/bin/pip install "numpy<2" simhash

and the benchmarks start this file with that interpreter, passing the
fingerprints and queries as ``.npy`` files. It prints one JSON object.

    /tmp/simhash-venv/bin/python benchmarks/suite/_simhash_worker.py peers --data fps.npy --queries q.npy
    /tmp/simhash-venv/bin/python benchmarks/suite/_simhash_worker.py online --data fps.npy --new new.npy

Keys are the strings ``"0" .. "N-1"`` (``SimhashIndex`` stores ``"%x,%s"``
strings); every timed call includes building the ``Simhash`` object from an
int, as a user's code would.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def anon_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def build(fps: list[int], k: int):  # type: ignore[no-untyped-def]
    from simhash import Simhash, SimhashIndex

    return SimhashIndex([(str(index), Simhash(value)) for index, value in enumerate(fps)], k=k)


def peers(args: argparse.Namespace) -> dict[str, object]:
    from simhash import Simhash

    fps = np.load(args.data).tolist()
    queries = np.load(args.queries).tolist()
    baseline_anon = anon_mib()
    builds = []
    index = None
    for _ in range(args.repeats):
        index = None  # free the previous index before timing the next build
        started = time.perf_counter()
        index = build(fps, args.k)
        builds.append(time.perf_counter() - started)
    anon_after_build = anon_mib()
    assert index is not None
    results = [sorted(int(found) for found in index.get_near_dups(Simhash(query))) for query in queries]
    clock = time.perf_counter_ns
    latencies = []
    for _ in range(args.rounds):
        for query in queries:
            started = clock()
            index.get_near_dups(Simhash(query))
            latencies.append((clock() - started) / 1000)
    return {
        "build s": builds,
        "latency us": latencies,
        "results": results,
        "index anon MiB": anon_after_build - baseline_anon,
        "peak RSS MiB": peak_rss_mib(),
        "version": _version(),
    }


def online(args: argparse.Namespace) -> dict[str, object]:
    from simhash import Simhash

    fps = np.load(args.data).tolist()
    new = np.load(args.new).tolist()
    index = build(fps, args.k)
    base = len(fps)
    clock = time.perf_counter_ns
    latencies = []
    for offset, value in enumerate(new):
        started = clock()
        index.add(str(base + offset), Simhash(value))
        latencies.append((clock() - started) / 1000)
    return {"add us": latencies, "peak RSS MiB": peak_rss_mib(), "version": _version()}


def _version() -> str:
    from importlib import metadata

    return metadata.version("simhash")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["peers", "online"])
    parser.add_argument("--data", required=True)
    parser.add_argument("--queries")
    parser.add_argument("--new")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = peers(args) if args.mode == "peers" else online(args)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Stage times of the CPU ARINA load: open, read of every chunk, decode (1 and 2 threads).

Medians of 9 (wall s, process CPU s) on an existing acquisition with a warm page cache,
e.g. the one ``benchmarks/cpu_load.py --data-dir DIR`` keeps::

    python benchmarks/cpu_decode_stages.py /tmp/bench64/bench_master.h5
"""

from __future__ import annotations

import sys
import time

import numpy as np


def median_time(function, runs: int = 9) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        samples.append((time.perf_counter() - wall, time.process_time() - cpu))
    samples.sort()
    return samples[len(samples) // 2]


def main(master: str) -> None:
    from quantem.stem4d.io import cpu_decode
    from quantem.stem4d.io.arina import load_arina, open_arina, read_compressed

    source = open_arina(master)
    print("open_arina", median_time(lambda: open_arina(master)))
    buffer, offsets = read_compressed(source)
    print("read_compressed (all)", median_time(lambda: read_compressed(source)))
    out = np.empty((source.n_frames, *source.detector_shape), source.dtype)
    for threads in (1, 2):
        print(
            f"decode into existing array, threads {threads}",
            median_time(
                lambda threads=threads: cpu_decode.decode_frames(
                    buffer, offsets, source.detector_shape, source.dtype, out=out, threads=threads
                )
            ),
        )
    for threads in (1, 2):
        print(
            f"load_arina, threads {threads}",
            median_time(lambda t=threads: load_arina(master, threads=t)),
        )


if __name__ == "__main__":
    main(sys.argv[1])

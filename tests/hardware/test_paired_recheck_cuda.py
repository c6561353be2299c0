"""A paired recheck on the cuda backend: two worker processes, each with its own CUDA
context on the one GPU, asked in turn; the coordinator holds the GPU's host lock."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import main
from harness.history.records import sha256_bytes
from harness.run import runner

CHECKOUT = Path(__file__).resolve().parents[2]


def test_paired_recheck_on_cuda(tmp_path: Path, monkeypatch) -> None:
    history = tmp_path / "h"
    first = tmp_path / "a"
    assert main(["run", "io-scale", "--demo", "--backend", "cuda", "--output-dir", str(first),
                 "--history-dir", str(history)]) == 0  # fmt: skip
    base_sha = sha256_bytes((first / "loading.json").read_bytes())
    cells = [("demo-u16", "hdf5", "cached"), ("demo-u8", "qem", "cold")]
    monkeypatch.setattr(runner, "flagged_for_recheck", lambda *a, **k: list(cells))
    code = main(
        ["run", "io-scale", "--demo", "--backend", "cuda", "--output-dir", str(tmp_path / "b"),
         "--history-dir", str(history), "--baseline", base_sha, "--recheck", "3", "--paired",
         "--baseline-tree", str(CHECKOUT)]
    )  # fmt: skip
    assert code in (0, 2)
    doc = json.loads((tmp_path / "b" / "loading.json").read_bytes())
    assert doc["conditions"]["backend"] == "cuda"
    paired = doc["recheck"]["paired"]
    # the recheck is sequential: a cell still undecided after a look gets 3 more rounds
    per_side = [
        sorted((t["acquisition"], t["format"], t["cache_state"]) for t in trials_)
        for trials_ in (paired["baseline_trials"], doc["recheck"]["trials"])
    ]
    assert per_side[0] == per_side[1]
    counts = {key: per_side[0].count(key) for key in set(per_side[0])}
    assert set(counts) == set(cells) and all(n % 3 == 0 for n in counts.values()), counts
    products = {a["id"]: a["indexed_product_sha256"] for a in doc["acquisitions"]}
    for side in ("baseline", "candidate"):
        worker = paired["workers"][side]
        assert worker["stable"] and not worker["failures"], worker
        assert worker["products"] == {k: products[k] for k in worker["products"]}
    assert all(t["kept"] for t in paired["baseline_trials"] + doc["recheck"]["trials"])

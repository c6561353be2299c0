"""``harness recheck --history-url``: baseline and candidate looked up on a server by
SHA-256 prefix, the recheck record registered there (issue 15), with the folder's
outcome: the same flagged cell, cleared by the recheck, exit 0."""

from __future__ import annotations

import hashlib
import json

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)
from test_recheck import SCALED, _fingerprint_only_watched_files, measured  # noqa: F401

from harness.cli import main
from harness.errors import EXIT_OK, EXIT_USAGE
from harness.report import parse_report


def _cell(doc: dict) -> dict:
    return next(
        c for c in doc["cells"] if (c["acquisition"], c["format"], c["cache_state"]) == SCALED
    )


@pytest.mark.slow  # a server start and two rechecks
def test_recheck_on_a_server_looks_up_by_prefix_and_registers_there(
    measured,  # noqa: F811
    postgres_url,  # noqa: F811
    capsys,
) -> None:
    folder, _suite, history, base_sha, candidate = measured
    url = postgres_url
    assert main(["history", "init-db", url]) == EXIT_OK
    assert main(["history", "push", str(history), "--history-url", url]) == EXIT_OK
    assert main(["history", "register", str(candidate), "--history-url", url]) == EXIT_OK
    capsys.readouterr()
    candidate_sha = hashlib.sha256(candidate.read_bytes()).hexdigest()
    # unpaired: the paired workers would fingerprint the whole tree, not test_recheck's WATCHED
    threshold = ["--regression-percent", "100", "--recheck", "3", "--no-paired"]

    # the folder's outcome, for comparison (the candidate given as a file there)
    on_folder = folder / "rechecked-folder"
    argv = ["recheck", str(candidate), "--baseline", base_sha[:12], *threshold]
    assert main([*argv, "--history-dir", str(history), "--output-dir", str(on_folder),
                 "--format", "json"]) in (0, 2)  # fmt: skip
    folder_final = json.loads(capsys.readouterr().out)

    # on the server: both records by prefix, the new record registered there only
    on_url = folder / "rechecked-url"
    argv = ["recheck", candidate_sha[:12], "--baseline", base_sha[:12], *threshold]
    head_before = _out(["history", "head", "--history-url", url], capsys)
    assert main([*argv, "--history-url", url, "--output-dir", str(on_url),
                 "--format", "json"]) in (0, 2)  # fmt: skip
    captured = capsys.readouterr()
    url_final = json.loads(captured.out)
    for final in (folder_final, url_final):
        cell = _cell(final)
        # cleared only on the recheck's interval within the threshold (issue 40)
        cleared = cell["ci_percent"][1] <= 100
        assert (cell["verdict"] == "unchanged") == cleared
        assert final["verdict"] == ("pass" if cleared else "review")
        n = cell["recheck"]["n"]  # 3 rounds a look, up to 8 looks (a sequential recheck)
        assert n == cell["n_candidate"] and n % 3 == 0 and 3 <= n <= 24
        assert cleared or n == 24
    assert [c["verdict"] for c in folder_final["cells"]] == [
        c["verdict"] for c in url_final["cells"]
    ]
    new_bytes = (on_url / "loading.json").read_bytes()
    new_sha = hashlib.sha256(new_bytes).hexdigest()
    record = parse_report(new_bytes, name="rechecked")
    assert record["recheck"]["candidate_sha256"] == candidate_sha
    assert record["baseline"]["sha256"] == base_sha
    assert "postgresql+psycopg://harness@" in captured.err  # where it was registered
    assert f"stored {new_sha}" in captured.err

    # registered on the server (exact bytes, journal extended, verify clean) ...
    raw = main(["history", "show", "--raw", new_sha[:16], "--history-url", url])
    assert raw == EXIT_OK and capsys.readouterr().out.encode() == new_bytes
    assert _out(["history", "head", "--history-url", url], capsys) != head_before
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK
    assert "0 errors" in capsys.readouterr().out
    # ... and not in the folder
    assert main(["history", "show", new_sha[:16], "--history-dir", str(history)]) == EXIT_USAGE
    capsys.readouterr()

    # the rechecked record is not rechecked again, on the server as in a folder
    again = ["recheck", new_sha[:16], "--baseline", base_sha[:12], "--history-url", url]
    assert main([*again, "--output-dir", str(folder / "again")]) == EXIT_USAGE
    assert "already holds a recheck" in capsys.readouterr().err
    # an unknown prefix names the server; --history-dir and --history-url exclude each other
    unknown = ["recheck", "ffff0000", "--baseline", base_sha[:12], "--history-url", url]
    assert main(unknown) == EXIT_USAGE
    assert "no record in postgresql+psycopg://harness@" in capsys.readouterr().err
    with pytest.raises(SystemExit) as both:
        main([*unknown, "--history-dir", str(history)])
    assert both.value.code == EXIT_USAGE


def _out(argv: list[str], capsys) -> str:
    assert main(argv) == EXIT_OK
    return capsys.readouterr().out

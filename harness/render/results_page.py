"""The published results page (``docs/performance/results.md``), generated from records.

Every figure on the page is read from a record of the committed evidence history, which
the page links with its SHA-256; nothing is typed. Figures not measured again since an
older revision are listed apart, under their own heading, never as current.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.history.layout import HistoryLayout
from harness.render.claims import (
    Claim,
    Claims,
    ResolvedClaim,
    RevisionCheck,
    compare_claims,
    resolve_claim,
)

PAGE_TITLE = "Published results"


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def _figure(value: float, unit: str) -> str:
    return f"{value * 100:.3g}%" if unit == "fraction" else _seconds(value)


def _cell_words(cell: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in cell.items())


def _revision(provenance: dict) -> str:
    revision = provenance.get("git_revision")
    if revision is None:
        return "none (not a git checkout)"
    if provenance.get("git_dirty"):
        return f"none: {revision[:12]} with local changes (diff SHA-256 {str(provenance.get('diff_sha256'))[:12]})"
    verified = provenance.get("git_revision_verified")
    if verified is False:
        return f"none: {revision[:12]} does not hold the code that ran (fingerprint differs)"
    if verified is None:
        return f"`{revision[:12]}` (recorded before revisions were checked against the fingerprint)"
    return f"`{revision[:12]}` (its files give the source fingerprint)"


def _claimed_revision(claim: Claim, provenance: dict) -> str:
    if claim.revision is None:
        return _revision(provenance)
    return (
        f"`{claim.revision[:12]}`, named by the claim and checked against the source "
        f"fingerprint when published (the record's own git fields: {_revision(provenance)})"
    )


def _host(report: dict) -> str:
    host = report["environment"]["host"]
    words = f"{host.get('cpu_model')}, {host.get('cores')} cores, host `{host.get('hostname')}`"
    contention = report.get("contention") or {}
    if contention.get("contended"):
        words += "; **contended while measuring** (other work ran: timings less reliable)"
    elif contention:
        words += "; not contended"
    return words


def _floor(resolved: ResolvedClaim) -> str:
    floor = resolved.floor
    if not floor:
        return "none in this record"
    parts = []
    seconds = floor.get("floor_seconds", floor.get("floor"))
    if isinstance(seconds, (int, float)):
        parts.append(_seconds(float(seconds)))
    if floor.get("floor_method"):
        parts.append(f"({floor['floor_method']})")
    words = " ".join(parts)
    if floor.get("ratio_to_floor") is not None:
        words += f"; ratio to floor **{floor['ratio_to_floor']:.2f}x**"
    if floor.get("floor_status"):
        words += f"; floor {floor['floor_status']}"
    return words


def _verdict_word(resolved: ResolvedClaim) -> str:
    if resolved.goal_undetermined:
        return "undetermined"
    met = resolved.goal_met
    return "-" if met is None else ("met" if met else "not met")


def _goal(resolved: ResolvedClaim) -> str:
    met = resolved.goal_met
    if resolved.goal_undetermined:
        return (
            f"{resolved.claim.goal}: **undetermined** (the figure beats its floor: a broken floor)"
        )
    if met is None:
        return resolved.claim.goal
    against = ", ".join(
        f"[{other}](#{other}) {_figure(figure, resolved.claim.unit)}"
        for other, figure in resolved.compared.items()
    )
    return f"{resolved.claim.goal}: **{'met' if met else 'not met'}**" + (
        f" (against {against})" if against else ""
    )


def _claim_section(resolved: ResolvedClaim, link_prefix: str, evidence_path: str) -> list[str]:
    claim = resolved.claim
    report = resolved.report
    provenance = report["provenance"]
    device = report["environment"]["device"]
    storage = report["environment"]["storage"]
    summary = resolved.summary
    kept = f"{summary.get('n_kept', '?')} of {summary.get('n', '?')} kept"
    link = f"{link_prefix}{resolved.record_relpath}"
    return [
        f"### {claim.id}",
        "",
        f"**{claim.question}**",
        "",
        "| | |",
        "|---|---|",
        f"| Figure | **{_figure(resolved.figure, claim.unit)}**, the {claim.statistic} of {_cell_words(claim.cell)} ({kept}) |",
        f"| Floor | {_floor(resolved)} |",
        f"| Goal | {_goal(resolved)} |",
        f"| Date | {report['created_utc']} |",
        f"| Device | {device['name']} ({device['kind']}); {_host(report)} |",
        f"| Storage | `{storage['storage_id']}` ({storage.get('filesystem')}) |",
        f"| Source fingerprint | `{provenance['source_fingerprint_start']}` |",
        f"| Clean revision | {_claimed_revision(claim, provenance)} |",
        f"| Reproduce | `{claim.reproduce}`, then `harness compare --baseline {evidence_path}/{resolved.record_relpath} NEW_REPORT` |",
        f"| Record | [`{claim.record}`]({link}) |",
        "",
    ]


def render_results_page(
    claims: Claims,
    history_dir: str | Path,
    page_path: str | Path,
    evidence_label: str = "docs/performance/evidence",
    check_revision: RevisionCheck | None = None,
) -> str:
    """The page's Markdown for ``claims`` resolved against the history at ``history_dir``;
    record links are relative to ``page_path``'s folder, and the printed commands name the
    history as ``evidence_label`` (its path from the repository root)."""
    layout = HistoryLayout.at(history_dir)
    resolved = compare_claims(
        [resolve_claim(claim, layout, check_revision) for claim in claims.claims]
    )
    prefix = os.path.relpath(Path(history_dir).resolve(), Path(page_path).resolve().parent)
    prefix = "" if prefix == "." else prefix.replace(os.sep, "/") + "/"
    evidence_path = evidence_label.rstrip("/")
    lines = [
        f"# {PAGE_TITLE}",
        "",
        "<!-- Generated by `harness history publish`; do not edit. The claims are declared",
        "     in docs/performance/claims.toml, the figures read from the records. -->",
        "",
        "Every figure here is read from a record of the committed evidence history",
        "(`docs/performance/evidence/`, the harness's own store layout) and links it by its",
        "SHA-256. `harness history verify --records-only --history-dir docs/performance/evidence`",
        "re-hashes them; CI fails when this page differs from what the records give",
        "(`harness history publish --check`). Each claim prints the command that reproduces it;",
        "`harness compare` judges the rerun against the published record;",
        "`python tools/rerun_claims.py` measures every claim again and republishes. A",
        "superseded figure leaves this page and stays in its record and in git.",
        "",
        "## Current claims",
        "",
    ]
    if not resolved:
        lines += ["None yet.", ""]
    else:
        lines += ["| Claim | Figure | Ratio to floor | Goal | Date |", "|---|---|---|---|---|"]
        for item in resolved:
            ratio = item.ratio_to_floor
            lines.append(
                f"| [{item.claim.id}](#{item.claim.id}) | {_figure(item.figure, item.claim.unit)} "
                f"| {'-' if ratio is None else f'{ratio:.2f}x'} "
                f"| {_verdict_word(item)} "
                f"| {item.report['created_utc'][:10]} |"
            )
        lines.append("")
    for item in resolved:
        lines += _claim_section(item, prefix, evidence_path)
    if claims.not_remeasured:
        lines += [
            "## Not re-measured at the current code",
            "",
            "These figures were measured before the evidence history existed and have not been",
            "measured again since the revision named; they are **not current** and link no",
            "record. Each stays here until a device run regenerates it as a record.",
            "",
            "| Question | Old figure | Goal | Not re-measured since | Where the old figure is |",
            "|---|---|---|---|---|",
        ]
        for stale in claims.not_remeasured:
            lines.append(
                f"| {stale.question} | {stale.old_figure} | {stale.goal} | `{stale.since}` | {stale.source} |"
            )
        lines.append("")
    return "\n".join(lines)

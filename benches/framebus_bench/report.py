"""Tables of a benchmark run: the same cells for the terminal (rich) and for Markdown, the W7
per-hop waterfall, and the change of every row against an earlier run (``--compare``)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from .records import Column, Row, Run, SuiteResult

#: Ratio columns: key in Row.ratios -> header.
RATIOS = [("best_peer", "× best peer"), ("pyshmem", "× pyshmem"), ("limit", "× limit")]
ROLE_MARK = {"framebus": "", "peer": "", "limit": ""}


def fmt_num(fmt: str, v: Any) -> str:
    """``v`` formatted with ``fmt``; an em dash for missing or non-finite numbers."""
    if v is None:
        return "—"
    if isinstance(v, float) and not math.isfinite(v):
        return "—"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def fmt_ratio(x: Optional[float]) -> str:
    """``1.23×``, or an em dash."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.2f}×" if x < 100 else f"{x:.0f}×"


def cell(col: Column, row: Row) -> str:
    """The text of ``col`` for ``row``."""
    if col.source == "extra":
        return fmt_num(col.fmt, row.extra.get(col.key))
    m = row.metrics.get(col.key)
    if m is None:
        return "—"
    if col.source == "p50":
        return fmt_num(col.fmt, m.p50)
    if col.source == "p99":
        return fmt_num(col.fmt, m.p99)
    if col.source == "lo":
        return fmt_num(col.fmt, m.lo)
    if col.source == "spread":
        if m.lo is None or m.hi is None or m.lo == m.hi:
            return "—"
        return f"{fmt_num(col.fmt, m.lo)}–{fmt_num(col.fmt, m.hi)}"
    return fmt_num(col.fmt, m.value)


def ratio_columns(suite: SuiteResult) -> List[Tuple[str, str]]:
    """The ratio columns that have at least one value in ``suite``."""
    return [(k, h) for k, h in RATIOS if any(r.ratios.get(k) is not None for r in suite.rows)]


def grid(suite: SuiteResult) -> Tuple[List[str], List[List[str]], List[str]]:
    """(headers, rows of cells, role of each row) of ``suite``'s table."""
    ratios = ratio_columns(suite)
    headers = ["case", "variant"] + [c.header for c in suite.columns] + [h for _, h in ratios]
    cells, roles = [], []
    last_case = None
    for case in suite.cases():
        for r in (x for x in suite.rows if x.case == case):
            shown_case = case if case != last_case else ""
            last_case = case
            cells.append([shown_case, r.variant] + [cell(c, r) for c in suite.columns] + [fmt_ratio(r.ratios.get(k)) for k, _ in ratios])
            roles.append(r.role)
    return headers, cells, roles


# -- markdown --------------------------------------------------------------------------------------


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def markdown_table(headers: List[str], rows: List[List[str]], bold: Optional[List[bool]] = None) -> str:
    """A GitHub Markdown table (numbers right-aligned)."""
    align = ["---" if i < 2 else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(_md_escape(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    for i, r in enumerate(rows):
        cells = [_md_escape(c) for c in r]
        if bold and bold[i] and len(cells) > 1:
            cells[1] = f"**{cells[1]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def waterfall_rows(suite: SuiteResult) -> Tuple[List[str], List[List[str]]]:
    """The W7 waterfall as a table: stage times (ms) per case and variant."""
    if not suite.waterfall:
        return [], []
    stages = [name for name, _ in suite.waterfall[0]["stages"]]
    headers = ["case", "variant"] + [f"{s} ms" for s in stages] + ["total ms"]
    rows = []
    for w in suite.waterfall:
        vals = [v for _, v in w["stages"]]
        rows.append([w["case"], w["variant"]] + [fmt_num("{:.3f}", v) for v in vals] + [fmt_num("{:.3f}", sum(vals))])
    return headers, rows


def markdown(run: Run, compare: Optional[Run] = None, plots: Optional[Dict[str, List[str]]] = None) -> str:
    """The whole run as Markdown: command, machine, versions, one table per suite (framebus rows
    in bold), notes, the W7 waterfall, plot links and the comparison when given."""
    out = [f"Command: `{run.command}`  ", f"Started: {run.started}, took {run.seconds:.0f} s  "]
    m = run.machine
    out.append(
        f"Machine: {m.get('cpu', '?')}, {m.get('cpus_usable', m.get('cpus', '?'))} usable cores, "
        f"{m.get('memory_gib', '?')} GiB, kernel {m.get('kernel', '?')}, Python {m.get('python', '?')}, "
        f"load average at start {', '.join(f'{x:.1f}' for x in m.get('loadavg', []))}  "
    )
    out.append("Versions: " + ", ".join(f"{k} {v}" for k, v in run.versions.items()) + "  ")
    load = run.settings.get("load")
    out.append(f"Load: {load['processes']} busy process(es) beside every suite ({load['kind']})" if load else "Load: none (no --load)")
    out.append("")
    out.append("Ratios say how many times better a row is than the reference on the table's first metric (>1 = better); the best peer excludes framebus and the limits.")
    for suite in run.suites:
        out.append("")
        out.append(f"### {suite.title}")
        out.append("")
        out.append(suite.what + f" ({suite.seconds:.0f} s)")
        out.append("")
        headers, rows, roles = grid(suite)
        if rows:
            out.append(markdown_table(headers, rows, [r == "framebus" for r in roles]))
        else:
            out.append("(no rows)")
        wh, wr = waterfall_rows(suite)
        if wr:
            out.append("")
            out.append("Per-hop waterfall (medians, paced phase):")
            out.append("")
            out.append(markdown_table(wh, wr))
        for note in suite.notes:
            out.append(f"- {note}")
        for p in (plots or {}).get(suite.id, []):
            out.append("")
            out.append(f"![{suite.id}]({p})")
    if compare is not None:
        out.append("")
        out.append(f"### Change against {compare.started}")
        out.append("")
        headers, rows = compare_rows(run, compare)
        out.append(markdown_table(headers, rows) if rows else "(no rows in common)")
    return "\n".join(out) + "\n"


# -- compare ---------------------------------------------------------------------------------------


def compare_rows(new: Run, old: Run) -> Tuple[List[str], List[List[str]]]:
    """Each row of ``new`` found in ``old`` (same suite, case, variant): primary metric before,
    after, and the change (+ = better)."""
    index: Dict[Tuple[str, str, str], Row] = {}
    for s in old.suites:
        for r in s.rows:
            index[(s.id, r.case, r.variant)] = r
    headers = ["suite", "case", "variant", "metric", "before", "after", "change"]
    rows = []
    for s in new.suites:
        for r in s.rows:
            o = index.get((s.id, r.case, r.variant))
            if o is None or r.primary not in r.metrics or r.primary not in o.metrics:
                continue
            m, mo = r.metrics[r.primary], o.metrics[r.primary]
            change = "—"
            if mo.value and math.isfinite(mo.value) and math.isfinite(m.value) and mo.value != 0:
                pct = (m.value / mo.value - 1) * 100 if m.higher_is_better else (mo.value / m.value - 1) * 100 if m.value else float("inf")
                change = f"{pct:+.1f}%" if math.isfinite(pct) else "—"
            rows.append([s.id, r.case, r.variant, m.unit, fmt_num("{:.4g}", mo.value), fmt_num("{:.4g}", m.value), change])
    return headers, rows


# -- rich ------------------------------------------------------------------------------------------


def rich_tables(run: Run, console: Any, compare: Optional[Run] = None) -> None:
    """Prints every suite's table (and the W7 waterfall, and the comparison) with rich."""
    from rich.markup import escape
    from rich.table import Table

    for suite in run.suites:
        headers, rows, roles = grid(suite)
        t = Table(title=suite.title, caption=suite.what, title_justify="left", caption_justify="left")
        for i, h in enumerate(headers):
            t.add_column(h, justify="left" if i < 2 else "right", no_wrap=i > 1)
        last_case = None
        for r, role in zip(rows, roles):
            if r[0] and last_case is not None:
                t.add_section()
            last_case = r[0] or last_case
            style = "bold cyan" if role == "framebus" else ("dim" if role == "limit" else None)
            t.add_row(*r, style=style)
        console.print(t)
        if suite.waterfall:
            console.print(waterfall_rich(suite))
        for note in suite.notes:
            console.print(f"  [yellow]note:[/yellow] {escape(note)}")  # a note may hold "[bench]"
        console.print()
    if compare is not None:
        headers, rows = compare_rows(run, compare)
        t = Table(title=f"change against the run of {compare.started} (+ = better)", title_justify="left")
        for i, h in enumerate(headers):
            t.add_column(h, justify="left" if i < 4 else "right")
        for r in rows:
            style = "green" if r[-1].startswith("+") else ("red" if r[-1].startswith("-") else None)
            t.add_row(*r, style=style)
        console.print(t)


#: Characters and colours of the waterfall's stages.
_STAGE_STYLE = [("█", "cyan"), ("▒", "magenta"), ("█", "green"), ("▓", "yellow")]


def waterfall_rich(suite: SuiteResult, width: int = 48) -> Any:
    """The W7 per-hop waterfall as a rich Table: one bar per variant and case, stages side by
    side, scaled to the slowest pipeline of each case."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title="W7 per-hop waterfall (ms, medians of the paced phase)", title_justify="left", show_edge=False)
    t.add_column("case")
    t.add_column("variant")
    t.add_column("stages", no_wrap=True)
    t.add_column("total ms", justify="right")
    stages = [name for name, _ in suite.waterfall[0]["stages"]] if suite.waterfall else []
    legend = Text()
    for i, name in enumerate(stages):
        ch, colour = _STAGE_STYLE[i % len(_STAGE_STYLE)]
        legend.append(f"{ch * 2} {name}  ", style=colour)
    t.caption = legend  # type: ignore[assignment]
    cases: List[str] = []
    for w in suite.waterfall:
        if w["case"] not in cases:
            cases.append(w["case"])
    for case in cases:
        items = [w for w in suite.waterfall if w["case"] == case]
        top = max((sum(v for _, v in w["stages"] if math.isfinite(v)) for w in items), default=0.0) or 1.0
        for j, w in enumerate(items):
            bar = Text()
            for i, (_name, v) in enumerate(w["stages"]):
                ch, colour = _STAGE_STYLE[i % len(_STAGE_STYLE)]
                n = int(round(width * (v if math.isfinite(v) else 0.0) / top))
                if v > 0 and n == 0:
                    n = 1
                bar.append(ch * n, style=colour)
            total = sum(v for _, v in w["stages"] if math.isfinite(v))
            t.add_row(case if j == 0 else "", w["variant"], bar, f"{total:.3f}")
        t.add_section()
    return t


def plain_tables(run: Run, compare: Optional[Run] = None) -> str:
    """The tables as plain text (no rich installed)."""
    out = []
    for suite in run.suites:
        headers, rows, _ = grid(suite)
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
        out.append(suite.title)
        out.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
        for r in rows:
            out.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        wh, wr = waterfall_rows(suite)
        for r in wr:
            out.append("  waterfall " + "  ".join(r))
        for note in suite.notes:
            out.append(f"  note: {note}")
        out.append("")
    if compare is not None:
        headers, rows = compare_rows(run, compare)
        out.append("change against the earlier run (+ = better)")
        for r in rows:
            out.append("  ".join(r))
    return "\n".join(out)

"""`jfbench claims`: the paper's claims 1 and 2 as verdicts computed from run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit


def _num(value: float, sign: bool = False) -> str:
    return "" if value != value else f"{value:+.3f}" if sign else f"{value:.3f}"


@app.command("claims")
def claims(
    runs: Annotated[list[Path], typer.Argument(help="Run folders (requests.parquet) or collected claims folders "
                                                    "(requests.csv.gz, as in results/baselines/*/claims).")],
    gamma: Annotated[int, typer.Option("--gamma", min=0, help="Loss weighting the claim-2 heads were trained with "
                                                       "(0, 3, 7 or 15): picks the paper's effect.")] = 7,
    dflash_twin: Annotated[bool, typer.Option("--dflash-twin", help="Claim 2 from claim-1 runs too: each run's dflash head is "
                                              "its jetflow head's bidirectional twin (trained with the same recipe but the "
                                              "mask; checked from the heads' configs where the run's head folders are "
                                              "still there), so jetflow vs dflash is the causal-vs-bidirectional pair.")] = False,
    format: TableFormatOpt = TableFormat.table,
) -> None:
    """Claim 1 (JetFlow keeps gaining past B = 64 where DFlash-T saturates) and claim 2 (a causal head
    beats a bidirectional one) as verdicts: reproduced, contradicted, inconclusive or untestable here.

    Each effect is a matched pair over the head seeds x prompts the folders share, with a 95%
    bootstrap CI over both; docs/methodology.md ("Claim verdicts") states the rule.

    Examples:

        jfbench claims results/baselines/toy-quality-bar/claims

        jfbench claims runs/main-s0 runs/main-s1 --format csv

        jfbench claims claim1-s0-gsm8k claim1-s1-gsm8k --gamma 0 --dflash-twin
    """
    from jetflow_bench.report.claims import check_twins, claims_table

    if dflash_twin and (unchecked := check_twins(runs)):
        typer.echo(f"--dflash-twin: not checked (head folders gone or no manifest), taken as twins: "
                   f"{', '.join(map(str, unchecked))}", err=True)
    table = claims_table(runs, gamma, dflash_twin)
    if format in (TableFormat.csv, TableFormat.json):
        emit(json.loads(table.to_json(orient="records")), format)  # an unknown reachable as null / empty
        return
    rows = [{"claim": r["claim"], "suite": r["suite"], "contrast": r["contrast"], "seeds x prompts": f"{r['seeds']} x {r['prompts']}",
             "effect [95% CI]": f"{_num(r['effect'], True)} [{_num(r['lo'], True)}, {_num(r['hi'], True)}]",
             "paper": _num(r["paper"], True), "reachable": _num(r["reachable"]), "verdict": r["verdict"]}
            for r in table.to_dict("records")]
    emit(rows, format, title="the paper's claims", left=("claim", "suite", "contrast", "verdict"),
         caption="reachable: the largest effect the runs could show (" + "; ".join(
             sorted({f"claim {r['claim']}: {r['reachable_from']}" for r in table.to_dict("records") if r["reachable_from"]}))
         + "); blank: unknown")

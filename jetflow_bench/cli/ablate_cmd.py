"""`jfbench ablate`: a drafter's default configuration and named variants on one grid, and their deltas.

Wiring only: the shared grid options (`grid_options.grid_command`) after its own (the base arm, the
variant flags, family and drafting options read from the declarations by `recipe_flags`), handed
over to the ablation plan (`jetflow_bench.sweep.ablate_plan`) and the run.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.grid_options import GridFlags, OutOpt, grid_command, grid_config, run_and_report
from jetflow_bench.cli.options import AllowOtherTargetOpt, TargetOpt
from jetflow_bench.cli.recipe_flags import EXTRA_FLAGS, epilog, family_flags, option_pairs
from jetflow_bench.core.arms import ARM_SYNTAX


@app.command("ablate", context_settings=EXTRA_FLAGS,
             epilog=epilog("variants of the base drafter's family: --NAME V1,V2; fixed: --train-option NAME=VALUE",
                           drafting="variants on the base's own head: --NAME V1,V2"))
@grid_command(after={"max_memory": ("allow_other_target",)})
def ablate(
    ctx: typer.Context,
    target: TargetOpt,
    out: OutOpt,
    drafter: Annotated[
        str, typer.Option("--drafter", help=f"The base arm (variant 'default'): {ARM_SYNTAX}.")
    ] = "jetflow",
    head: Annotated[
        str | None, typer.Option("--head", help="Head mask variants: bidirectional (alias: diffusion) or causal.")
    ] = None,
    loss: Annotated[str | None, typer.Option("--loss", help="Training-loss variants: rkl, sft.")] = None,
    data: Annotated[str | None, typer.Option("--data", help="Training-data variants: raw.")] = None,
    decay: Annotated[
        str | None, typer.Option("--decay", help="Loss-weighting variants (gamma; 0 = uniform), e.g. 0,3,15.")
    ] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", help="Any build option's values: KEY=V1,V2 (repeatable).")
    ] = None,
    checkpoint: Annotated[
        list[str] | None, typer.Option("--checkpoint", help="A variant's head: VARIANT=DIR (repeatable).")
    ] = None,
    train_option: Annotated[
        list[str] | None,
        typer.Option("--train-option", help="Recipe field for heads trained here, KEY=VALUE (e.g. steps=40)."),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option("--seeds", help="Head seeds, e.g. 0,1,2: every arm again per seed (heads trained on demand); "
                     "deltas get a bootstrap CI over seeds x prompts and the table shows the seed spread. Each seed draws "
                     "its own training prompts; --train-option data_seed=N keeps one data set for every seed."),
    ] = None,
    allow_other_target: AllowOtherTargetOpt = False,
    *,
    grid: GridFlags,
) -> None:
    """Run a drafter's default configuration and named variants on one grid; write their deltas.

    ablation.parquet/csv: τ and speed-up deltas of each variant vs the default, with paired
    bootstrap 95% CIs over prompts.

    Variants that need other weights (--head, --loss, --data, --decay, the family options below) use --checkpoint VARIANT=DIR or are
    trained on demand, cached by recipe: the default head's own recipe (from its config.json, plus
    --train-option) changed only by the variant's setting. Drafting options (--refine-passes, --scoring,
    --construction: each drafter's are listed below) and --option run on the default's head.

    Examples:

        jfbench ablate --target T --drafter jetflow=heads/jf --head bidirectional --refine-passes 0,2
            --suites math500 --budgets 16,64,256 --out results/ablate-head

        jfbench ablate --target T --drafter ngram --option max_ngram=1,2 --suites gsm8k --out results/ng

        jfbench ablate --target T --drafter "eagle[top_k=4]=heads/eagle" --option depth=4,8 --out results/ea

        jfbench ablate --target T --drafter jetflow=heads/jf --loss rkl,sft --seeds 0,1,2 --out results/loss

        jfbench ablate --target T --drafter dflash=heads/df --decay 0,3,15 --out results/decay

    A variant changes exactly one factor. Where the base's setting is impossible for the variant
    (a bidirectional head on the packed layout or through tree-causal refinement), both run at the
    nearest common setting: the variant is compared with the base at that setting, and stderr,
    the manifest and the table (compared_with, held_fixed) say so.
    """
    from jetflow_bench.sweep.ablate_plan import plan_ablation

    variant_flags = {"head": head, "loss": loss, "data": data, "decay": decay, **family_flags(ctx.args, drafting=True)}
    plan = plan_ablation(drafter, {k: v for k, v in variant_flags.items() if v is not None},
                         option_pairs(option, "--option"), option_pairs(train_option, "--train-option"), seeds)
    given = {k: Path(v).expanduser().resolve() for k, v in option_pairs(checkpoint, "--checkpoint").items()}
    config = grid_config(target, list(plan.specs), grid)
    plan = plan.pinned(config, given, allow_other_target)
    for note in plan.notes:
        print(note, file=sys.stderr)
    config = plan.with_heads(replace(config, extra=plan.extra), given, grid.data_dir)
    run_and_report(config, out, grid, kind="ablation", derived=plan.derived(config), heads_pinned=True)

"""Prompt lookup (n-gram) drafting: no model, no training. Its record (`drafter` drafts)."""

from jetflow_bench.plugins import Family

FAMILY = Family(
    "ngram",
    {"ngram": "drafters.ngram.drafter:NgramDrafter"},
    aliases={"ngram": ("prompt-lookup", "pld")},
    colour="#cc79a7",  # reddish purple
)

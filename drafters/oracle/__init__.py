"""The oracle test double (drafts the target's own greedy continuation). Its record (`drafter` drafts)."""

from jetflow_bench.plugins import Family

FAMILY = Family("oracle", {"oracle": "drafters.oracle.drafter:OracleDrafter"}, colour="#e69f00")  # orange

"""What a measurement means, in one place: every rate, tau and bootstrap interval (`metrics`), the
serving latencies TTFT / TPOT / ITL / E2EL (`serving`), and whether a run folder's files can be
read (`integrity`). pandas and pyarrow only: no model, so readers stay light."""

"""What a measured τ curve is worth on another device: a roofline cost model for verify and draft steps.

`shapes` (what a forward reads and computes), `hardware` (device profiles), `cost` (step times),
`calibration` (measured verify times, `jfbench bench verify-cost`), `project` (a run in, a
projection table out). Nothing here imports torch except `measure`, which the CLI imports lazily.
"""

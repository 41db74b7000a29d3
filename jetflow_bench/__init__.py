"""jfbench: a benchmarking and ablation suite for speculative decoding."""

__version__ = "0.1.0"

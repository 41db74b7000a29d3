"""Bridges to other tools (lm-evaluation-harness, vLLM); each module imports its tool only when used."""

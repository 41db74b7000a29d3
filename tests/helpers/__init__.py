"""Shared test helpers: random models, made-up data, fixture runs and the like (no tests here)."""

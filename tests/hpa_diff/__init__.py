"""Differential test against the upstream HPA controller code (README.md)."""

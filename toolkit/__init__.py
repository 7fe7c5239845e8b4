"""The Agent Ledger Toolkit: one queryable, browsable body of what AI coding agents learned,
left behind and did."""

__version__ = "0.1.0"

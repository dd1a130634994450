"""Hosts: where a backend runs commands and processes (docs/architecture.md)."""

"""Test-only helpers shared by several test modules."""

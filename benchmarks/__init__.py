"""Benchmarks: separate from the tests, outside the services (nothing imports this package)."""

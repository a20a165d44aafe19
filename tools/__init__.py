"""Tools for people and tests: run by hand, never by a service (nothing in services/ imports this)."""

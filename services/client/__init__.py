"""The terminal client: a QuickFIX initiator behind its own tap, in a TUI or one line per message."""

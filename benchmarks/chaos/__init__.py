"""The fault suite (issue 13): kill parts of a running stack under load and count what was lost."""

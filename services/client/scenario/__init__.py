"""Scenarios: FIX conversations written as text, played against the exchange (docs/scenarios.md).

``syntax`` (text -> steps) and ``match`` (expected fields vs a received message) are pure; ``runner``
plays the steps over ``services.client.session`` sessions; ``__main__`` is ``fixlab scenario``.
"""

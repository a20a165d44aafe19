"""Certification: the exchange plays a script at a member's FIX client and judges what it answers."""

"""FIX knowledge that several services need, in one place.

``codec``: split a message into fields, encode one with BodyLength and CheckSum, frame a byte stream
into whole messages (pure functions, no I/O). ``dictionary``: the FIX 4.4 dictionary the quickfix
package installs, the exchange's own derived from it, and the names of tags and enum values.
"""

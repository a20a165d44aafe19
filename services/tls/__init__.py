"""The exchange's TLS port: stunnel4 in front of the plain FIX acceptor (shared/tls.py)."""

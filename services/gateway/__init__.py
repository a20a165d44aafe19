"""The exchange's FIX 4.4 front door: a QuickFIX acceptor between FIX clients and the matcher."""

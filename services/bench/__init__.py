"""The bench: QuickFIX initiators that measure the exchange's ack latency and throughput."""

"""The matcher: a pure order-book core (book, prorata, engine) and its Redis service (one per shard)."""

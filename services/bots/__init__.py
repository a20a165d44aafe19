"""The liquidity bots: ordinary FIX sessions that keep the books from being empty."""

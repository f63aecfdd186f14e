"""The long-running proxy: the sync loop, its rate limits, health and metrics servers, signals."""

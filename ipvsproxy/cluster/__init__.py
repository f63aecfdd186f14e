"""Cluster objects in: API JSON and manifest files turned into slim model objects."""

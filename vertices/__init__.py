"""Vertex implementations: one module per vertex type plus the shared contract."""

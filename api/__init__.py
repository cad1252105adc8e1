"""The REST API and the command line."""

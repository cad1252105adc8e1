"""The names the REST access log is written and read by: `api.rest.middleware` writes its
records and `api.cli.log_setup` formats them. Here, with no imports, so that neither imports
the other (a command starts without the web stack, the web stack without the CLI)."""

ACCESS_LOGGER = "api.rest.access"
"""The logger of the access log: one JSON object per request, as the record's message."""

ACCESS_FIELDS = "access"
"""The attribute of an access record that holds its line as a dict (the message is its JSON)."""

"""What a secret's name may be: the one rule the validator (a `{{ secrets.NAME }}` reference)
and the secret store (setting a secret) share."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
"""A secret's name: a JMESPath identifier that needs no quoting, 1 to 128 characters."""
SECRET_NAME_RULE = (
    "a name is 1 to 128 letters, digits and underscores, not starting with a digit (e.g. CRM_TOKEN)"
)
"""`SECRET_NAME` in words, for refusals."""

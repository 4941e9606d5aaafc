"""DRF token authentication that also compares the stored key with the presented one.

The lookup alone trusts the database's comparison (a case-insensitive collation, a trimmed
column); comparing the row's key in constant time afterwards is a common hardening.
"""

from __future__ import annotations

import hmac
from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication


class StrictTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        user, token = super().authenticate_credentials(key)
        if not hmac.compare_digest(token.key, key):
            raise exceptions.AuthenticationFailed("Invalid token.")
        return user, token

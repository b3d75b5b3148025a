"""ONC RPC (RFC 5531) calls over any transport: credentials, XIDs, call/reply matching."""

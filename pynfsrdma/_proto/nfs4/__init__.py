"""NFSv4.1 (RFC 8881) protocol definitions: constants, XDR types, COMPOUND, attributes, callbacks."""

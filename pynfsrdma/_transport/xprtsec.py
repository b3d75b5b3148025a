"""nfs(5)'s ``xprtsec=`` and the files RPC-with-TLS uses, as options (URL and mount): what they say,
checked, with no TLS machinery loaded (the mount's option parser and ``--help`` read them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

XPRTSEC_MODES: Final = ("none", "tls", "mtls")
#: the URL and mount options of RPC-with-TLS
TLS_OPTIONS: Final = ("xprtsec", "truststore", "certificate", "private_key")

__all__ = ["TLS_OPTIONS", "XPRTSEC_MODES", "XprtSec", "XprtSecError"]


class XprtSecError(ValueError):
    """The TLS options do not make sense together (``xprtsec=mtls`` with no certificate, ...)."""


@dataclass(frozen=True, slots=True)
class XprtSec:
    """What a connection's transport security is to be (nfs(5)'s ``xprtsec=``) and the files it uses."""

    mode: str = "none"
    truststore: str | None = None
    certificate: str | None = None
    private_key: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str | None]) -> XprtSec:
        """From URL or mount options (:data:`TLS_OPTIONS`); XprtSecError for what does not fit."""
        mode = options.get("xprtsec") or "none"
        if mode not in XPRTSEC_MODES:
            raise XprtSecError(f"xprtsec={mode}: use one of {', '.join(XPRTSEC_MODES)}")
        files = {k: options.get(k) for k in ("truststore", "certificate", "private_key")}
        for k, v in files.items():
            if v == "":
                raise XprtSecError(f"{k} needs a file ({k}=/path/to/file.pem)")
        sec = cls(mode, files["truststore"], files["certificate"], files["private_key"])
        if mode == "mtls" and not sec.certificate:
            raise XprtSecError("xprtsec=mtls needs the client's certificate= (and private_key= unless it holds the key)")
        if mode != "mtls" and (sec.certificate or sec.private_key):
            raise XprtSecError(f"certificate= and private_key= are for xprtsec=mtls, not xprtsec={mode}")
        if mode == "none" and sec.truststore:
            raise XprtSecError("truststore= is for xprtsec=tls or mtls")
        return sec

    @property
    def on(self) -> bool:
        return self.mode != "none"

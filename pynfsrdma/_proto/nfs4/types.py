"""All NFSv4.1 XDR types in one namespace (RFC 8881 names), gathered from the modules that define them.

- types_base: basic data types (stateid4, fattr4, nfstime4, fsid4, fs_locations_info4, ...)
- types_ops: file operations (ACCESS ... WRITE, and the NFSv4.0-only ones)
- types_session: operations new in NFSv4.1 (EXCHANGE_ID, CREATE_SESSION, SEQUENCE, ...)
- types_v42: NFSv4.2 operations and extended attributes (RFC 7862, RFC 8276)

Conventions: structs are @xdr_struct classes (``Cls.XDR`` is the codec); typedefs and unions are XdrType
values; a union's Python value is ``(discriminant, arm value)``; every ``XXX4args`` class has ``OPNUM``.
"""

from . import types_base, types_ops, types_session, types_v42
from .types_base import *  # noqa: F403
from .types_ops import *  # noqa: F403
from .types_session import *  # noqa: F403
from .types_v42 import *  # noqa: F403

__all__: list[str] = []
__all__ += types_base.__all__
__all__ += types_ops.__all__
__all__ += types_session.__all__
__all__ += types_v42.__all__

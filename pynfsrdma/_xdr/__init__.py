"""XDR (RFC 4506): the codec every protocol layer of pynfsrdma is written in."""

from .codec import UINT32_MAX, UINT64_MAX, BulkSegment, Packer, Unpacker, XdrError, pad_len
from .types import (
    Array,
    Bounded,
    Bulk,
    ClassUnion,
    Enum,
    Lazy,
    LinkedList,
    Opaque,
    Optional,
    String,
    StructType,
    Union,
    VarOpaque,
    Void,
    XdrStruct,
    XdrType,
    boolean,
    bulk,
    int32,
    int64,
    string,
    struct_type,
    uint32,
    uint64,
    void,
    xdr_struct,
)

__all__ = [
    "UINT32_MAX", "UINT64_MAX", "Array", "Bounded", "Bulk", "BulkSegment", "ClassUnion", "Enum", "Lazy", "LinkedList", "Opaque",
    "Optional", "Packer", "String", "StructType", "Union", "Unpacker", "VarOpaque", "Void", "XdrError",
    "XdrStruct", "XdrType", "boolean", "bulk", "int32", "int64", "pad_len", "string", "struct_type",
    "uint32", "uint64", "void", "xdr_struct",
]

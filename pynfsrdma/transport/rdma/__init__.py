"""RPC-over-RDMA version 1 (RFC 8166, RFC 8267, RFC 8797).

Layered as in Linux's xprtrdma: :mod:`.chunks` and :mod:`.reply` decide and encode chunks
(requester side), :mod:`.responder_chunks` does the same for a responder, :mod:`.credits` is the
credit gate, :mod:`.provider` is the verbs-provider interface and :mod:`.soft` a software provider.
None of the marshalling code touches a provider, and providers never parse RPC.
"""

"""pynfsrdma: a userspace NFSv4.1 client (FUSE mount, scripted access, trunking, RPC-over-RDMA)."""

__version__ = "0.1.0"

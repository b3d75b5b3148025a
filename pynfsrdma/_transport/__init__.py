"""Transports: TCP with record marking, and RPC-over-RDMA version 1."""

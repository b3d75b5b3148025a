"""Protocol definitions: ONC RPC, NFSv4.1, RPC-over-RDMA, in the RFCs' own names."""

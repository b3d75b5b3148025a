"""The FUSE mount: a POSIX filesystem over an NFSv4.1 export (pyfuse3 on trio)."""

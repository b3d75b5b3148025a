"""The FUSE mount: a POSIX filesystem over an NFSv4.1 export, served on /dev/fuse from trio (or through pyfuse3)."""

"""Clients: file-handle operations and the path-based scripted-access API."""

"""NFSv4.1 sessions: client ID, slot tables, SEQUENCE, recovery and the backchannel."""

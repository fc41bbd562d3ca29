"""Private PostgreSQL and Redis servers started from wheels, who owns them, and serve's process
lifecycle (signals, the supervisor that restarts a server dying under it)."""

"""The Spark side: the session (session.py) and a round as one Spark job (rounds.py)."""

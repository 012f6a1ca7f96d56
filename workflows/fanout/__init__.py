"""The fan-out / join example of shared/seeds/001 (workflows/fanout.xml)."""

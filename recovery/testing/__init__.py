"""The public test kit for users' components (issue 10 item 6): to come. Fault injection is
recovery.faults."""

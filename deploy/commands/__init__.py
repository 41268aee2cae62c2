"""One entry module per operator command: ``fltest-deploy`` and ``fltest-flower``."""

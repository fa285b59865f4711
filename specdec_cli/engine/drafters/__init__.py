"""One proposer per drafting method, behind the ``Drafter`` interface in ``base``."""

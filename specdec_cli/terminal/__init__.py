"""What the user types and sees: prompts (argument, file, stdin, ``--batch``), stdout and
stderr, text streamed as it is accepted, files written for the user, and the signals that end
a run.

The bottom layer, beside ``models``: it may use only ``errors`` and ``paths``.
"""

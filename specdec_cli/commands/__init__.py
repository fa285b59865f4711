"""The commands that do more than one library call, each as a function of a request: ``run``, ``bench``
and ``export``. ``cli.py`` parses the options into the request; tests call these directly."""

"""The ``gregor`` command line (``main.py``; one module per subcommand, its grammar in
``args.py``) and, in ``client/``, the small blocking Kafka client the tools use."""

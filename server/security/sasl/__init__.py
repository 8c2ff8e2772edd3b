"""SASL mechanisms, server side: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER.

Import from the modules (``mechanism``: the protocol and errors; ``mechanisms``: what a
listener enables; ``jwks``): this package imports nothing itself, since Gregor's own clients
read JAAS configs through ``jaas`` and must not load the JWT checks (cryptography, urllib)
for it.
"""

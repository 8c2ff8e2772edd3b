"""Kafka's ACLs: the binding model, the authorizer and where the bindings are kept."""
